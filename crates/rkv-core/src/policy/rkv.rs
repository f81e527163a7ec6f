//! R-KV (Cai et al., arXiv 2505.24133; reference Zefan-Cai/R-KV): importance from the
//! window queries' attention minus redundancy from key similarity, DESIGN.md §2.
//!
//! Owns: its registry entry and parameters. The maths live beside it: the importance in
//! `importance`, the redundancy (oracle and incremental) in `redundancy*`, `cosine`,
//! `describe`, `dot`, `kept` and the tiles, and their mix in `super::score_head`.
//! Must not know: the engine, the other policies.

use super::{
    explain::explain_rkv_family, score_head, select_rkv_family, Explained, HeadObservation,
    HeadState, KvPolicy, Needs, ParamField, ParamSpec, PolicyError, RedundancyPath, Scored,
};
use crate::config::CompressionConfig;

/// The max-pool kernel over importance, shared by R-KV and SnapKV.
pub(crate) const KERNEL: ParamSpec = ParamSpec {
    name: "kernel",
    help: "max-pool kernel over the importance (odd)",
    min: 1.0,
    max: 1025.0,
    open: false,
    integer: true,
    default: 7.0,
    field: ParamField::Kernel,
};

const PARAMS: [ParamSpec; 3] = [
    ParamSpec {
        name: "lambda",
        help: "score = lambda * importance - (1 - lambda) * redundancy",
        min: 0.0,
        max: 1.0,
        open: false,
        integer: false,
        default: 0.1,
        field: ParamField::Lambda,
    },
    THRESHOLD,
    KERNEL,
];

/// The redundancy's cosine threshold, shared by every policy that subtracts it.
pub(crate) const THRESHOLD: ParamSpec = ParamSpec {
    name: "threshold",
    help: "cosine above which a newer key makes an older one redundant",
    min: -1.0,
    max: 1.0,
    open: true,
    integer: false,
    default: 0.5,
    field: ParamField::Threshold,
};

/// R-KV: `lambda * importance - (1 - lambda) * redundancy`, top `B - w` plus the window.
#[derive(Debug, Clone, Copy)]
pub struct RKv;

impl KvPolicy for RKv {
    fn name(&self) -> &'static str {
        "rkv"
    }

    fn about(&self) -> &'static str {
        "R-KV: window attention minus key redundancy (arXiv 2505.24133)"
    }

    fn needs(&self) -> Needs {
        Needs {
            window_logits: true,
            keys: true,
            redundancy: true,
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
        // Scores without committing the pass (the inspector's view of the terms).
        let (s, _) = score_head(cfg, obs, state, path)?;
        Ok(Scored {
            score: s.score,
            importance: s.importance,
            redundancy: s.redundancy,
            carried: None,
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
