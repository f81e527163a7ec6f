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
    let threshold = kth_smallest(keys.clone(), k);
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

/// The `k`-th smallest (1-based, `1 <= k <= keys.len()`) of `keys`, by most-significant
/// digit radix selection: each round counts the keys by the 8 bits below the prefix they
/// all share and keeps only the bucket holding the `k`-th (a few linear passes whatever
/// the data, where a quickselect's partitions mispredict on every other element).
fn kth_smallest(mut keys: Vec<u64>, mut k: usize) -> u64 {
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
        let mut bucket = 0;
        while k > count[bucket] {
            k -= count[bucket];
            bucket += 1;
        }
        keys.retain(|&x| digit(x) == bucket);
    }
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

    #[test]
    fn deterministic_on_large_plateau() {
        let s: Vec<f64> = (0..1000).map(|i| f64::from((i / 100) as u32)).collect();
        // The top 150 are all of plateau 9 (900..1000) and the lowest 50 of plateau 8.
        let kept = top_k(&s, 150);
        let expect: Vec<usize> = (800..850).chain(900..1000).collect();
        assert_eq!(kept, expect);
    }
}
