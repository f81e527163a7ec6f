//! Selection: scores in, kept slot indices out (R-KV, arXiv 2505.24133, `update_kv` of
//! Zefan-Cai/R-KV, which keeps the top `B - w` candidates plus the window).
//!
//! Owns: the deterministic top-k (larger score first, then lower index; NaN ranks
//! lowest), adding the last `w` slots, and returning the kept slots in ascending order
//! (position order; the reference returns them in score order).
//!
//! Must not know: how scores are made, keys, the schedule.

/// A key whose ascending order is the ranking: larger score first, NaN after everything
/// (below -inf), equal scores (`-0.0 == 0.0`) equal. Ties are then broken by the index.
#[inline]
fn rank_key(v: f64) -> u64 {
    if v.is_nan() {
        return u64::MAX;
    }
    // +0.0 for both zeros, so that they tie as `==` says.
    let bits = (v + 0.0).to_bits();
    // Ascending in `v` as unsigned integers: negative numbers reversed, positive above.
    let ascending = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    // Descending, and never `u64::MAX` (-inf maps to `!0x000F_FFFF_FFFF_FFFF`).
    !ascending
}

/// Indices of the `k` largest scores (ties to the lower index), ascending.
/// `k >= score.len()` keeps every index.
pub fn top_k(score: &[f64], k: usize) -> Vec<usize> {
    let n = score.len();
    if k >= n {
        return (0..n).collect();
    }
    if k == 0 {
        return Vec::new();
    }
    // Integer keys: a total order, compared without branches on floats. The `k`-th
    // smallest key is the threshold: every index below it is kept, and of those equal to
    // it the lowest ones, as many as are missing.
    let keys: Vec<u64> = score.iter().map(|&v| rank_key(v)).collect();
    let threshold = kth_smallest(&keys, k);
    let below = keys.iter().filter(|&&x| x < threshold).count();
    let mut equal_left = k - below;
    let mut kept = Vec::with_capacity(k);
    for (i, &x) in keys.iter().enumerate() {
        let equal = x == threshold;
        if x < threshold || (equal && equal_left > 0) {
            kept.push(i);
            equal_left -= usize::from(equal);
        }
    }
    kept
}

/// Keys [`narrowed`] samples (evenly spaced) to place its digit.
const SAMPLE: usize = 32;
/// Sample places either side of the `k`-th's expected place whose keys bound the range
/// [`narrowed`] counts in: its sample rank varies by under 2 places (at most
/// `sqrt(SAMPLE / 4)`), so the range misses it rarely, and a miss costs one pass.
const SPREAD: usize = 4;

/// The `k`-th smallest (1-based, `1 <= k <= keys.len()`) of `keys`, by radix selection.
/// When the keys span both signs of the scores, the first round's digit is placed by a
/// sample near the `k`-th ([`narrowed`]): over the whole range, scores near zero of
/// either sign lie at its two ends, and (R-KV's combined scores, most of them small
/// and negative) the first rounds barely narrow.
fn kth_smallest(keys: &[u64], k: usize) -> u64 {
    // Whether the top bits differ, in a pass that vectorises.
    let (any, all) = keys
        .iter()
        .fold((0u64, u64::MAX), |(any, all), &x| (any | x, all & x));
    if (any ^ all) >> 63 == 1 {
        if let Some((bucket, k)) = narrowed(keys, k) {
            return kth_smallest_radix(bucket, k);
        }
    }
    kth_smallest_radix(keys.to_vec(), k)
}

/// One round of radix selection whose digit is the 8 bits below the prefix that two
/// sampled keys [`SPREAD`] places either side of the `k`-th's expected place share (not
/// below the prefix all keys share, which two distant clusters of scores, say of both
/// signs, make so short that the round hardly narrows). The keys outside that prefix's
/// range are counted below or above it. When the `k`-th falls inside, the keys of its
/// digit's bucket and its rank among them: exactly the radix round's answer, whatever the
/// sample. `None` when it falls outside, when the keys are too few to sample, or when the
/// two sampled keys are equal.
fn narrowed(keys: &[u64], k: usize) -> Option<(Vec<u64>, usize)> {
    let n = keys.len();
    if n < 8 * SAMPLE || k == 0 || k > n {
        return None;
    }
    let mut sample: [u64; SAMPLE] = std::array::from_fn(|i| keys[(2 * i + 1) * n / (2 * SAMPLE)]);
    sample.sort_unstable();
    let at = (k - 1) * SAMPLE / n;
    let (lo, hi) = (
        sample[at.saturating_sub(SPREAD)],
        sample[(at + SPREAD).min(SAMPLE - 1)],
    );
    if lo == hi {
        return None;
    }
    // The range is the keys sharing the bits above `top` with `lo` and `hi`; the digit,
    // its 8 bits from `top` down, orders the keys inside it.
    let top = 63 - (lo ^ hi).leading_zeros();
    let prefix = |x: u64| x.checked_shr(top + 1).unwrap_or(0);
    let shift = top.saturating_sub(7);
    let digit = |x: u64| ((x >> shift) & 0xFF) as usize;
    let p = prefix(lo);
    // One pass without branches on the data: every key adds to its digit's count, only
    // those inside the range add one. Four tallies, key `i` in tally `i % 4`: keys outside
    // the range often share a digit (equal scores), and one tally would make each such
    // key wait on the last one's addition.
    let mut tallies = [[0u32; 256]; 4];
    let mut below = 0;
    let mut quads = keys.chunks_exact(4);
    for q in &mut quads {
        for (tally, &x) in tallies.iter_mut().zip(q) {
            tally[digit(x)] += u32::from(prefix(x) == p);
            below += usize::from(prefix(x) < p);
        }
    }
    for &x in quads.remainder() {
        tallies[0][digit(x)] += u32::from(prefix(x) == p);
        below += usize::from(prefix(x) < p);
    }
    let count: [usize; 256] = std::array::from_fn(|b| tallies.iter().map(|t| t[b] as usize).sum());
    let inside: usize = count.iter().sum();
    if k <= below || k > below + inside {
        return None;
    }
    let (bucket, k) = bucket_of(&count, k - below);
    let keys = keys
        .iter()
        .copied()
        .filter(|&x| prefix(x) == p && digit(x) == bucket)
        .collect();
    Some((keys, k))
}

/// The `k`-th smallest (1-based, `1 <= k <= keys.len()`) of `keys`, by most-significant
/// digit radix selection: each round counts the keys by the 8 bits below the prefix they
/// all share and keeps only the bucket holding the `k`-th (a few linear passes whatever
/// the data, where a quickselect's partitions mispredict on every other element).
/// Inlined into both callers: called through, SnapKV's selection measured slower.
#[inline(always)]
fn kth_smallest_radix(mut keys: Vec<u64>, mut k: usize) -> u64 {
    loop {
        if keys.len() <= 32 {
            keys.sort_unstable();
            return keys[k - 1];
        }
        let (lo, hi) = keys
            .iter()
            .fold((u64::MAX, 0), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        if lo == hi {
            return lo;
        }
        // Bits above the highest differing one are common: the digit is the 8 bits
        // ending there, and its order is the keys' order.
        let top = 63 - (lo ^ hi).leading_zeros();
        let shift = top.saturating_sub(7);
        let digit = |x: u64| ((x >> shift) & 0xFF) as usize;
        let mut count = [0usize; 256];
        for &x in &keys {
            count[digit(x)] += 1;
        }
        let bucket;
        (bucket, k) = bucket_of(&count, k);
        keys.retain(|&x| digit(x) == bucket);
    }
}

/// The bucket holding the `k`-th smallest key (1-based) by the buckets' `count`s in key
/// order, and its rank within the bucket.
fn bucket_of(count: &[usize; 256], mut k: usize) -> (usize, usize) {
    let mut bucket = 0;
    while k > count[bucket] {
        k -= count[bucket];
        bucket += 1;
    }
    (bucket, k)
}

/// Keep the top `budget - window` of the `score.len()` candidates plus the `window`
/// slots that follow them, ascending. `score`: `[L - w]`.
pub fn top_k_plus_window(score: &[f64], budget: usize, window: usize) -> Vec<usize> {
    let n = score.len();
    let mut kept = top_k(score, budget.saturating_sub(window));
    kept.extend(n..n + window);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_basic_ascending_output() {
        assert_eq!(top_k(&[0.1, 0.9, 0.5, 0.7], 2), vec![1, 3]);
        assert_eq!(top_k(&[0.1, 0.9, 0.5, 0.7], 0), Vec::<usize>::new());
        assert_eq!(top_k(&[0.1, 0.9], 5), vec![0, 1]);
        assert_eq!(top_k(&[], 3), Vec::<usize>::new());
    }

    #[test]
    fn ties_go_to_lower_index() {
        let s = [1.0, 2.0, 2.0, 2.0, 0.0, 2.0];
        assert_eq!(top_k(&s, 2), vec![1, 2]);
        assert_eq!(top_k(&s, 4), vec![1, 2, 3, 5]);
        assert_eq!(top_k(&s, 5), vec![0, 1, 2, 3, 5]);
        assert_eq!(top_k(&[3.0; 7], 3), vec![0, 1, 2]);
    }

    #[test]
    fn nan_ranks_lowest() {
        let s = [f64::NAN, f64::NEG_INFINITY, 1.0, f64::NAN];
        assert_eq!(top_k(&s, 1), vec![2]);
        assert_eq!(top_k(&s, 2), vec![1, 2]);
        assert_eq!(top_k(&s, 3), vec![0, 1, 2]);
    }

    #[test]
    fn window_always_kept() {
        // 5 candidates, window 3, budget 5: two best candidates plus slots 5..8.
        let kept = top_k_plus_window(&[0.0, 5.0, 1.0, 4.0, 3.0], 5, 3);
        assert_eq!(kept, vec![1, 3, 5, 6, 7]);
    }

    /// The ranking spelled out as a comparator: the reference `top_k` must agree with.
    fn top_k_by_sorting(score: &[f64], k: usize) -> Vec<usize> {
        use std::cmp::Ordering;
        let key = |i: usize| {
            let v = score[i];
            if v.is_nan() {
                f64::NEG_INFINITY
            } else {
                v
            }
        };
        let mut idx: Vec<usize> = (0..score.len()).collect();
        idx.sort_by(|&a, &b| match key(b).partial_cmp(&key(a)) {
            Some(Ordering::Equal) | None => {
                let (na, nb) = (score[a].is_nan(), score[b].is_nan());
                na.cmp(&nb).then(a.cmp(&b))
            }
            Some(o) => o,
        });
        idx.truncate(k);
        idx.sort_unstable();
        idx
    }

    #[test]
    fn zeros_of_both_signs_tie() {
        let s = [-0.0, 0.0, -0.0, 1.0];
        assert_eq!(top_k(&s, 2), vec![0, 3]);
        assert_eq!(top_k(&s, 3), vec![0, 1, 3]);
        let s = [
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
        ];
        assert_eq!(top_k(&s, 2), vec![0, 2]);
        assert_eq!(top_k(&s, 3), vec![0, 2, 3]);
    }

    proptest::proptest! {
        #[test]
        fn agrees_with_the_comparator(
            // Few distinct values (ties) with NaN, infinities and both zeros mixed in.
            picks in proptest::collection::vec(0usize..12, 0..300),
            k in 0usize..320,
        ) {
            let values = [
                f64::NAN, f64::NEG_INFINITY, f64::INFINITY, -0.0, 0.0, 1e-300, -1e-300,
                0.5, -0.5, 2.0, 3.25, -7.0,
            ];
            let score: Vec<f64> = picks.iter().map(|&p| values[p]).collect();
            proptest::prop_assert_eq!(top_k(&score, k), top_k_by_sorting(&score, k));
        }

        #[test]
        fn agrees_with_the_comparator_on_close_scores(
            // Scores sharing most of their bits (the radix selection's deeper rounds),
            // with repeats.
            steps in proptest::collection::vec(0u64..5000, 0..1500),
            k in 0usize..1600,
        ) {
            let score: Vec<f64> = steps
                .iter()
                .map(|&t| f64::from_bits(0.1f64.to_bits() + t * 7))
                .collect();
            proptest::prop_assert_eq!(top_k(&score, k), top_k_by_sorting(&score, k));
        }

        #[test]
        fn agrees_with_the_comparator_on_distinct_scores(
            score in proptest::collection::vec(-1e3f64..1e3, 0..2000),
            k in 0usize..2100,
        ) {
            proptest::prop_assert_eq!(top_k(&score, k), top_k_by_sorting(&score, k));
        }
    }

    /// Scores like R-KV's: most small and negative, a few positive, some tied; the
    /// sampled first round finds the `k`-th, and where its sample is made to miss (the
    /// sampled places hold the largest scores), the selection over all keys does.
    #[test]
    fn scores_of_both_signs_sampled_or_not() {
        let n = 1144;
        let mut x = 7u64;
        let mut next = move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let score: Vec<f64> = (0..n)
            .map(|i| match i % 97 {
                0 => 1e-3 * next(),
                1 => -7.5e-4,
                _ => -1e-3 * (0.5 + next()),
            })
            .collect();
        let keys: Vec<u64> = score.iter().map(|&v| rank_key(v)).collect();
        for k in [1, 9, 300, 1016, 1100, n] {
            assert_eq!(top_k(&score, k), top_k_by_sorting(&score, k), "k {k}");
        }
        assert!(narrowed(&keys, 1016).is_some());
        let mut rigged = score.clone();
        for i in 0..SAMPLE {
            rigged[(2 * i + 1) * n / (2 * SAMPLE)] = 1.0 + i as f64;
        }
        let rigged_keys: Vec<u64> = rigged.iter().map(|&v| rank_key(v)).collect();
        assert!(narrowed(&rigged_keys, 1016).is_none());
        assert_eq!(top_k(&rigged, 1016), top_k_by_sorting(&rigged, 1016));
    }

    #[test]
    fn deterministic_on_large_plateau() {
        let s: Vec<f64> = (0..1000).map(|i| f64::from((i / 100) as u32)).collect();
        // The top 150 are all of plateau 9 (900..1000) and the lowest 50 of plateau 8.
        let kept = top_k(&s, 150);
        let expect: Vec<usize> = (800..850).chain(900..1000).collect();
        assert_eq!(kept, expect);
    }
}
