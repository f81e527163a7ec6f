//! StreamingLLM eviction (Xiao et al., arXiv 2309.17453; the `StreamingLLM` `update_kv`
//! of Zefan-Cai/R-KV): keep the first `sinks` slots and the most recent `B - sinks`.
//!
//! Owns: that index arithmetic. Must not know: keys, scores, the schedule.

/// Kept slots, ascending: `0..sinks` and `len-(budget-sinks)..len`; everything when
/// `len <= budget`. Requires `budget > sinks` (checked by the config).
pub fn streaming_keep(len: usize, budget: usize, sinks: usize) -> Vec<usize> {
    if len <= budget {
        return (0..len).collect();
    }
    let recent = budget.saturating_sub(sinks);
    (0..sinks.min(budget)).chain(len - recent..len).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_kept_sets() {
        assert_eq!(streaming_keep(10, 6, 2), vec![0, 1, 6, 7, 8, 9]);
        assert_eq!(
            streaming_keep(100, 32, 4),
            (0..4).chain(72..100).collect::<Vec<_>>()
        );
        assert_eq!(streaming_keep(7, 6, 4), vec![0, 1, 2, 3, 5, 6]);
    }

    #[test]
    fn short_cache_kept_whole() {
        assert_eq!(streaming_keep(5, 6, 4), vec![0, 1, 2, 3, 4]);
        assert_eq!(streaming_keep(6, 6, 4), vec![0, 1, 2, 3, 4, 5]);
        assert!(streaming_keep(0, 6, 4).is_empty());
    }
}
