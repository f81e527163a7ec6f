//! Decoding-time SnapKV (Li et al., arXiv 2404.14469, as the R-KV paper runs it at decode
//! time): R-KV's importance alone (lambda = 1), top `B - w` plus the window.
//!
//! Owns: its registry entry. Must not know: the engine, the other policies.

use super::{
    explain::explain_rkv_family, rkv::KERNEL, score_head, select_rkv_family, Explained,
    HeadObservation, HeadState, KvPolicy, Needs, ParamSpec, PolicyError, RedundancyPath, Scored,
};
use crate::config::CompressionConfig;

const PARAMS: [ParamSpec; 1] = [KERNEL];

/// SnapKV: the window queries' pooled attention.
#[derive(Debug, Clone, Copy)]
pub struct SnapKv;

impl KvPolicy for SnapKv {
    fn name(&self) -> &'static str {
        "snapkv"
    }

    fn about(&self) -> &'static str {
        "SnapKV at decode time: window attention only (arXiv 2404.14469)"
    }

    fn needs(&self) -> Needs {
        Needs {
            window_logits: true,
            ..Needs::default()
        }
    }

    fn params(&self) -> &'static [ParamSpec] {
        &PARAMS
    }

    fn score(
        &self,
        cfg: &CompressionConfig,
        obs: &HeadObservation<'_>,
        state: &mut HeadState,
        path: RedundancyPath,
    ) -> Result<Scored, PolicyError> {
        let (s, _) = score_head(cfg, obs, state, path)?;
        Ok(Scored {
            score: s.score,
            importance: s.importance,
            ..Scored::default()
        })
    }

    fn explain(
        &self,
        cfg: &CompressionConfig,
        obs: &HeadObservation<'_>,
        state: &mut HeadState,
        path: RedundancyPath,
    ) -> Result<Explained, PolicyError> {
        explain_rkv_family(cfg, obs, state, path)
    }

    fn select(
        &self,
        cfg: &CompressionConfig,
        obs: &HeadObservation<'_>,
        state: &mut HeadState,
        path: RedundancyPath,
    ) -> Result<Vec<usize>, PolicyError> {
        select_rkv_family(cfg, obs, state, path)
    }
}
