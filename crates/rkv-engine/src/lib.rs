//! rkv-engine: sequences, the paged KV store and its attention, compression, sampling and
//! the step loop.
//!
//! Must not know: HTTP, CLI flags, environment variables.

pub mod compression;
pub mod engine;
pub mod error;
pub mod kv_store;
pub mod paged_attention;
pub mod request;
pub mod sampling;
pub mod sequence;
pub mod teacher;

pub use engine::{Engine, EngineConfig};
pub use error::{EngineError, Result};
pub use kv_store::KvDtype;
pub use request::{
    fits_context, FinishReason, GenerationOutput, GenerationRequest, SeqId, SeqStats, TokenEvent,
};
pub use sampling::SamplingParams;
pub use teacher::TeacherStats;
