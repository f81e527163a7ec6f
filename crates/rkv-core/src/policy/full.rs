//! FullKV: no compression, the baseline every fidelity figure is compared with.
//!
//! Owns: its registry entry. Must not know: anything else (it never scores).

use super::{HeadObservation, HeadState, KvPolicy, Needs, PolicyError, RedundancyPath, Scored};
use crate::config::CompressionConfig;

/// Keeps every slot; a sequence's memory grows with its length.
#[derive(Debug, Clone, Copy)]
pub struct Full;

impl KvPolicy for Full {
    fn name(&self) -> &'static str {
        "full"
    }

    fn about(&self) -> &'static str {
        "no compression (the baseline); memory grows with the sequence"
    }

    fn needs(&self) -> Needs {
        Needs::default()
    }

    fn compresses(&self) -> bool {
        false
    }

    fn protected_recent(&self, _cfg: &CompressionConfig) -> usize {
        0
    }

    fn score(
        &self,
        _cfg: &CompressionConfig,
        obs: &HeadObservation<'_>,
        _state: &mut HeadState,
        _path: RedundancyPath,
    ) -> Result<Scored, PolicyError> {
        // Never asked (it does not compress); every slot ties, so all would be kept.
        Ok(Scored {
            score: vec![0.0; obs.len],
            ..Scored::default()
        })
    }
}
