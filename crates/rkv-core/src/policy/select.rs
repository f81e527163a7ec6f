//! Selection: scores in, kept slot indices out (R-KV, arXiv 2505.24133, `update_kv` of
//! Zefan-Cai/R-KV, which keeps the top `B - w` candidates plus the window).
//!
//! Owns: the deterministic top-k (larger score first, then lower index; NaN ranks
//! lowest), adding the last `w` slots, and returning the kept slots in ascending order
//! (position order; the reference returns them in score order).
//!
//! Must not know: how scores are made, keys, the schedule.

use std::cmp::Ordering;

/// Ranking order: larger score first, ties to the lower index, NaN after everything.
#[inline]
fn rank(score: &[f64], a: usize, b: usize) -> Ordering {
    let key = |i: usize| {
        let v = score[i];
        if v.is_nan() {
            f64::NEG_INFINITY
        } else {
            v
        }
    };
    let (sa, sb) = (key(a), key(b));
    match sb.partial_cmp(&sa) {
        Some(Ordering::Equal) | None => {
            // Equal scores (or both NaN): NaN below -inf, then index.
            let (na, nb) = (score[a].is_nan(), score[b].is_nan());
            na.cmp(&nb).then(a.cmp(&b))
        }
        Some(o) => o,
    }
}

/// Indices of the `k` largest scores (ties to the lower index), ascending.
/// `k >= score.len()` keeps every index.
pub fn top_k(score: &[f64], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..score.len()).collect();
    if k < idx.len() {
        if k == 0 {
            return Vec::new();
        }
        idx.select_nth_unstable_by(k - 1, |&a, &b| rank(score, a, b));
        idx.truncate(k);
    }
    idx.sort_unstable();
    idx
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

    #[test]
    fn deterministic_on_large_plateau() {
        let s: Vec<f64> = (0..1000).map(|i| f64::from((i / 100) as u32)).collect();
        // The top 150 are all of plateau 9 (900..1000) and the lowest 50 of plateau 8.
        let kept = top_k(&s, 150);
        let expect: Vec<usize> = (800..850).chain(900..1000).collect();
        assert_eq!(kept, expect);
    }
}
