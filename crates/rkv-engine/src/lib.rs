//! rkv-engine: sequences, the paged KV store and its attention, compression, sampling and
//! the step loop.
//!
//! Must not know: HTTP, CLI flags, environment variables.
//!
//! Threads: the kernels split their work with rayon, in whatever pool the caller runs
//! in. Drive the engine from a worker of that pool (`rayon::ThreadPool::install`, as the
//! `rkv` binary does): from any other thread each of the few hundred parallel calls per
//! step hands its work to the pool and sleeps until it is done, which on 2 cores halves
//! decode speed.

mod admission;
mod attention_chunk;
pub mod compression;
pub mod engine;
pub mod error;
pub mod grammar;
pub mod handle;
pub mod kv;
pub mod limits;
pub mod logprobs;
pub mod paged_attention;
pub mod recorder;
pub mod request;
pub mod sampling;
pub mod scheduler;
pub mod sequence;
mod step;
pub mod teacher;

pub use engine::{Engine, EngineConfig, EngineCounters};
pub use error::{EngineError, Result};
pub use grammar::{Grammar, GrammarError, GrammarSpec, Grammars};
pub use handle::{
    EngineHandle, EngineMetrics, EventSink, HandleConfig, RequestEvent, RequestId, Submission,
    SubmitError,
};
pub use kv::{Admission, KvDtype};
pub use limits::RequestLimits;
pub use logprobs::{LogprobsRequest, TokenLogprob};
pub use recorder::CompressionRecord;
pub use request::{
    fits_context, FinishReason, GenerationOutput, GenerationRequest, SeqId, SeqStats, TokenEvent,
};
pub use sampling::SamplingParams;
pub use teacher::TeacherStats;
