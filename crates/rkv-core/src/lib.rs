//! rkv-core: the pure heart of rkv.
//!
//! Owns the KV policies (score + select), the compression configuration and its schedule
//! (prompt chunks included), and the softmax's vectorised `exp` (which the engine's
//! attention shares). Plain slices in, indices out. Its SIMD paths are chosen at
//! run time (`simd`), so one build for the portable x86-64 target takes them on the CPUs
//! that have them.
//! Must not know: tensors, models, tokio, files, environment variables.

pub mod config;
pub mod exp;
pub mod overrides;
pub mod policy;
pub mod prompt;
mod simd;

pub use config::{CompressionConfig, ConfigError, PolicyKind, StepPlan};
pub use overrides::{CompressionOverrides, OverrideError};
pub use policy::{select_keep, HeadObservation, HeadState, KeyRows, PolicyError};
pub use prompt::PromptMode;
