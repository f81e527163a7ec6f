//! How a compressing sequence holds its prompt, and the append arithmetic that follows.
//!
//! With [`PromptMode::Keep`] the prompt is one append: held whole, then compressed once
//! after its last token, scored by the queries of its last `w` tokens (TensorRT-LLM's
//! rule; a sequence holds `max(prompt, B + b)` slots). With [`PromptMode::Compress`] the
//! prompt is appended `prompt_chunk` tokens at a time and the decode-time schedule runs
//! after each append, each scored by its own last `w` queries, so a sequence never holds
//! more than `B + b + chunk` slots. An engine may feed one append in several pieces (a
//! step's token room); only the piece that ends an append may compress.
//!
//! Appends end at multiples of the chunk (so a recomputed prompt compresses exactly as
//! the first time, whatever the steps' room), except that a last append shorter than the
//! window would not hold one: the append before it then ends `w` tokens before the
//! prompt's end.
//! Must not know: tensors, models, the policies' maths.

use std::fmt;
use std::str::FromStr;

use crate::config::{CompressionConfig, ConfigError};

/// Whether a compressing sequence compresses while its prompt is appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PromptMode {
    /// The prompt is held whole; the schedule runs after its last token.
    #[default]
    Keep,
    /// The schedule runs after every `prompt_chunk` tokens of the prompt.
    Compress,
}

impl PromptMode {
    pub const ALL: [PromptMode; 2] = [PromptMode::Keep, PromptMode::Compress];

    pub fn name(self) -> &'static str {
        match self {
            PromptMode::Keep => "keep",
            PromptMode::Compress => "compress",
        }
    }
}

impl fmt::Display for PromptMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PromptMode {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| ConfigError::UnknownPromptMode(s.to_string()))
    }
}

impl CompressionConfig {
    /// Whether the schedule runs between the prompt's chunks.
    pub fn compresses_prompt(&self) -> bool {
        self.policy.compresses() && self.prompt == PromptMode::Compress
    }

    /// The end (exclusive, in tokens) of the prompt append that holds token `fed` of a
    /// `prompt_len`-token prompt: `prompt_len` when the prompt is kept whole (or `fed` is
    /// past it).
    pub fn prompt_append_end(&self, fed: usize, prompt_len: usize) -> usize {
        if !self.compresses_prompt() || self.prompt_chunk == 0 || fed >= prompt_len {
            return prompt_len;
        }
        let c = self.prompt_chunk;
        let end = (fed / c).saturating_add(1).saturating_mul(c);
        if end >= prompt_len {
            return prompt_len;
        }
        // The last append must hold a window: the one before ends `w` tokens early (or,
        // fed from inside that last window, this is the last append). A chunk of at
        // least `2w` (validated) leaves a window in the shortened one too.
        if prompt_len - end < self.window {
            let early = prompt_len - self.window;
            return if early > fed { early } else { prompt_len };
        }
        end
    }

    /// The most slots (per layer and KV head) a sequence with a `prompt_len`-token prompt
    /// ever holds: `max(prompt, B + b)` when the prompt is kept, at most `B + b + chunk`
    /// when it is compressed (`None` for FullKV, which is unbounded).
    pub fn peak_slots(&self, prompt_len: usize) -> Option<usize> {
        let m = self.max_resident_slots()?;
        let prompt = if self.compresses_prompt() {
            prompt_len.min(m.saturating_add(self.prompt_chunk))
        } else {
            prompt_len
        };
        Some(m.max(prompt))
    }

    /// The prompt fields' own checks (see [`CompressionConfig::validate`]).
    pub(crate) fn validate_prompt(&self) -> Result<(), ConfigError> {
        if self.prompt == PromptMode::Compress
            && self.prompt_chunk < self.window.max(1).saturating_mul(2)
        {
            return Err(ConfigError::PromptChunkBelowWindow {
                chunk: self.prompt_chunk,
                window: self.window,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PolicyKind;

    fn cfg(mode: PromptMode, chunk: usize) -> CompressionConfig {
        CompressionConfig {
            policy: PolicyKind::RKv,
            budget: 64,
            buffer: 16,
            window: 8,
            prompt: mode,
            prompt_chunk: chunk,
            ..CompressionConfig::default()
        }
    }

    /// The appends of a whole prompt, fed from the start of each.
    fn appends(c: &CompressionConfig, prompt_len: usize) -> Vec<usize> {
        let (mut fed, mut out) = (0, Vec::new());
        while fed < prompt_len {
            let end = c.prompt_append_end(fed, prompt_len);
            assert!(end > fed, "append must advance at {fed}");
            out.push(end - fed);
            fed = end;
        }
        out
    }

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for m in PromptMode::ALL {
            assert_eq!(m.to_string().parse::<PromptMode>(), Ok(m));
        }
        let err = "drop".parse::<PromptMode>().unwrap_err().to_string();
        assert!(err.contains("drop") && err.contains("keep") && err.contains("compress"));
    }

    #[test]
    fn keep_is_one_append_and_compress_ends_at_multiples_of_the_chunk() {
        assert_eq!(appends(&cfg(PromptMode::Keep, 32), 100), vec![100]);
        assert_eq!(appends(&cfg(PromptMode::Compress, 32), 64), vec![32, 32]);
        assert_eq!(
            appends(&cfg(PromptMode::Compress, 32), 80),
            vec![32, 32, 16]
        );
    }

    #[test]
    fn the_last_append_always_holds_a_window() {
        let c = cfg(PromptMode::Compress, 32);
        // 100 = 3 x 32 + 4: the third append ends 8 tokens before the end.
        assert_eq!(appends(&c, 100), vec![32, 32, 28, 8]);
        assert_eq!(appends(&c, 96), vec![32, 32, 32]);
        assert_eq!(appends(&c, 104), vec![32, 32, 32, 8]);
        assert_eq!(appends(&c, 5), vec![5]);
        // The smallest chunk, twice the window: the shortened append still holds one.
        let w = cfg(PromptMode::Compress, 16);
        assert_eq!(appends(&w, 36), vec![16, 12, 8]);
        // A piece fed from inside an append ends where the append does.
        assert_eq!(c.prompt_append_end(70, 100), 92);
        assert_eq!(c.prompt_append_end(40, 100), 64);
        assert_eq!(c.prompt_append_end(95, 100), 100);
        assert_eq!(c.prompt_append_end(100, 100), 100);
        // FullKV holds its prompt whole whatever the mode says.
        let mut f = c;
        f.policy = PolicyKind::Full;
        assert_eq!(appends(&f, 100), vec![100]);
    }

    #[test]
    fn every_prompt_length_and_chunk_has_appends_holding_a_window() {
        for chunk in [16, 17, 31, 512] {
            let c = cfg(PromptMode::Compress, chunk);
            for len in 1..300 {
                let a = appends(&c, len);
                assert_eq!(a.iter().sum::<usize>(), len);
                assert!(a.iter().all(|&n| n <= chunk), "{chunk} {len} {a:?}");
                // Every append holds a window (the first may be the whole short prompt).
                assert!(
                    a.iter().all(|&n| n >= c.window.min(len)),
                    "{chunk} {len} {a:?}"
                );
            }
        }
    }

    #[test]
    fn peak_slots_bound_the_prompt_when_it_is_compressed() {
        assert_eq!(cfg(PromptMode::Keep, 32).peak_slots(1000), Some(1000));
        assert_eq!(cfg(PromptMode::Keep, 32).peak_slots(10), Some(80));
        assert_eq!(cfg(PromptMode::Compress, 32).peak_slots(1000), Some(112));
        assert_eq!(cfg(PromptMode::Compress, 32).peak_slots(90), Some(90));
        assert_eq!(cfg(PromptMode::Compress, 32).peak_slots(10), Some(80));
        assert_eq!(CompressionConfig::full().peak_slots(10), None);
    }

    #[test]
    fn a_chunk_below_the_window_is_refused() {
        assert!(cfg(PromptMode::Compress, 16).validate().is_ok());
        let err = cfg(PromptMode::Compress, 15).validate().unwrap_err();
        assert!(err.to_string().contains("prompt_chunk (15)"), "{err}");
        assert!(cfg(PromptMode::Compress, 0).validate().is_err());
        // Keep never reads the chunk.
        assert!(cfg(PromptMode::Keep, 0).validate().is_ok());
    }
}
