//! StreamingLLM eviction (Xiao et al., arXiv 2309.17453; the `StreamingLLM` `update_kv`
//! of Zefan-Cai/R-KV): keep the first `sinks` slots and the most recent `B - sinks`.
//!
//! Owns: that index arithmetic. Must not know: keys, scores, the schedule.

use super::{
    HeadObservation, HeadState, KvPolicy, Needs, ParamField, ParamSpec, PolicyError,
    RedundancyPath, Scored,
};
use crate::config::CompressionConfig;

const PARAMS: [ParamSpec; 1] = [ParamSpec {
    name: "sinks",
    help: "first slots always kept (attention sinks)",
    min: 0.0,
    max: 16_777_216.0,
    open: false,
    integer: true,
    default: 4.0,
    field: ParamField::Sinks,
}];

/// StreamingLLM: the first `sinks` slots and the most recent `B - sinks`.
#[derive(Debug, Clone, Copy)]
pub struct StreamingLlm;

impl KvPolicy for StreamingLlm {
    fn name(&self) -> &'static str {
        "streamingllm"
    }

    fn about(&self) -> &'static str {
        "StreamingLLM: attention sinks plus the most recent slots (arXiv 2309.17453)"
    }

    fn needs(&self) -> Needs {
        Needs::default()
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn protected_recent(&self, cfg: &CompressionConfig) -> usize {
        cfg.budget.saturating_sub(cfg.sinks)
    }

    /// The older the slot the higher: the first `sinks` candidates win.
    fn score(
        &self,
        cfg: &CompressionConfig,
        obs: &HeadObservation<'_>,
        _state: &mut HeadState,
        _path: RedundancyPath,
    ) -> Result<Scored, PolicyError> {
        let candidates = obs.len.saturating_sub(self.protected_recent(cfg));
        Ok(Scored {
            score: (0..candidates).map(|i| -(i as f64)).collect(),
            ..Scored::default()
        })
    }
}

/// The scalar reference of the seam's StreamingLLM. Kept slots, ascending: `0..sinks` and `len-(budget-sinks)..len`; everything when
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
