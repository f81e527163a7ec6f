//! The block arithmetic of admission: how many blocks a request, or one of its samples,
//! can ever hold under its compression, and whether it reserves them when admitted or
//! grows (DESIGN.md §3; docs/scheduling.md).
//! Must not know: which blocks (the pool's business), the scheduler's order, HTTP.

use rkv_core::config::CompressionConfig;

use crate::error::{EngineError, Result};
use crate::request::GenerationRequest;

/// How a FullKV sequence takes memory (a compressing one always reserves what it can
/// ever hold, which is bounded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Admission {
    /// Admitted with its prompt's blocks, it grows a block at a time; when the pool runs
    /// dry the newest sequence is preempted and later recomputed (vLLM's rule). More
    /// sequences start at once; long ones may be recomputed many times.
    #[default]
    Grow,
    /// Admitted only when `prompt + max_tokens` slots are free, and those are reserved:
    /// never preempted, fewer at once (TGI's rule, and how the R-KV paper counts batch
    /// size).
    Reserve,
}

impl std::str::FromStr for Admission {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "grow" => Ok(Self::Grow),
            "reserve" => Ok(Self::Reserve),
            other => Err(EngineError::BadRequest(format!(
                "unknown admission `{other}` (expected `grow` or `reserve`)"
            ))),
        }
    }
}

impl std::fmt::Display for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Grow => "grow",
            Self::Reserve => "reserve",
        })
    }
}

/// Slots per block and how FullKV sequences take memory: all admission needs to turn a
/// request into blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockBudget {
    pub block_size: usize,
    pub admission: Admission,
}

impl BlockBudget {
    /// Blocks one sample of `req` can ever hold: FullKV its whole length; a compressing
    /// policy the prompt or `B + b`, whichever is larger, when it keeps the prompt, at
    /// most `B + b + chunk` when it compresses it (never more than the whole length).
    pub fn blocks_needed(&self, req: &GenerationRequest, comp: &CompressionConfig) -> usize {
        let full = req.prompt.len().saturating_add(req.max_tokens);
        let slots = comp
            .peak_slots(req.prompt.len())
            .map_or(full, |m| full.min(m));
        slots.div_ceil(self.block_size.max(1))
    }

    /// Blocks one sample of `req` can hold once the samples of its request have forked:
    /// the prompt is in, and when it reached `B + b` it was compressed to `B` before the
    /// fork, so a compressing sample holds at most `B + b` slots from then on (never more
    /// than its whole length); FullKV its whole length.
    pub fn sample_blocks(&self, req: &GenerationRequest, comp: &CompressionConfig) -> usize {
        let full = req.prompt.len().saturating_add(req.max_tokens);
        let slots = comp.max_resident_slots().map_or(full, |m| full.min(m));
        slots.div_ceil(self.block_size.max(1))
    }

    /// Blocks a reserving request of `n` samples reserves on admission: the first sample's
    /// prompt appended whole (before its first compression), or every sample's share
    /// after the fork ([`Self::sample_blocks`]), whichever is more (for FullKV, every
    /// sample's whole length). A prompt longer than `B + b` is held once, not once per
    /// sample.
    pub fn request_blocks(
        &self,
        req: &GenerationRequest,
        comp: &CompressionConfig,
        n: usize,
    ) -> usize {
        let per_sample = self.sample_blocks(req, comp).saturating_mul(n);
        self.blocks_needed(req, comp).max(per_sample)
    }

    /// Whether a sequence under `comp` reserves its blocks on admission (`true`) or grows.
    pub fn reserves(&self, comp: &CompressionConfig) -> bool {
        comp.max_resident_slots().is_some() || self.admission == Admission::Reserve
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkv_core::config::PolicyKind;

    fn budget(admission: Admission) -> BlockBudget {
        BlockBudget {
            block_size: 10,
            admission,
        }
    }

    fn req(prompt: usize, max_tokens: usize) -> GenerationRequest {
        GenerationRequest::of_len(prompt, max_tokens)
    }

    #[test]
    fn compressing_sequences_reserve_under_either_admission() {
        let comp = CompressionConfig {
            policy: PolicyKind::RKv,
            budget: 16,
            buffer: 4,
            window: 4,
            ..CompressionConfig::default()
        };
        for a in [Admission::Grow, Admission::Reserve] {
            assert!(budget(a).reserves(&comp));
            // max(prompt 10, B + b = 20) slots: 2 blocks a sample.
            assert_eq!(budget(a).blocks_needed(&req(10, 500), &comp), 2);
            assert_eq!(budget(a).request_blocks(&req(10, 500), &comp, 3), 6);
        }
    }

    #[test]
    fn admission_parses_its_two_names_and_refuses_others() {
        for a in [Admission::Grow, Admission::Reserve] {
            assert_eq!(a.to_string().parse::<Admission>().unwrap(), a);
        }
        let err = "static".parse::<Admission>().unwrap_err();
        assert!(err.to_string().contains("`grow` or `reserve`"), "{err}");
    }
}
