//! What every handler shares: the engine handle, the server's options, its metrics and
//! the small sources of ids, seeds and timestamps.
//!
//! Must not know: routes, response shapes.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rkv_engine::handle::EngineHandle;

use crate::metrics::ServerMetrics;
use crate::{ServerOptions, ToolParser};

/// Cheap to clone; one per server.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    handle: EngineHandle,
    opts: ServerOptions,
    /// The tool-call format: the option's, else the chat template's.
    tool_parser: Option<ToolParser>,
    metrics: ServerMetrics,
    started: u64,
}

impl AppState {
    pub fn new(handle: EngineHandle, opts: ServerOptions) -> Self {
        let tool_parser = opts.tool_parser.or_else(|| {
            let t = handle.tokenizer().chat_template()?;
            ToolParser::for_template(t.source())
        });
        Self {
            inner: Arc::new(Inner {
                handle,
                opts,
                tool_parser,
                metrics: ServerMetrics::default(),
                started: unix_now(),
            }),
        }
    }

    pub fn handle(&self) -> &EngineHandle {
        &self.inner.handle
    }

    pub fn opts(&self) -> &ServerOptions {
        &self.inner.opts
    }

    pub fn tool_parser(&self) -> Option<ToolParser> {
        self.inner.tool_parser
    }

    pub fn metrics(&self) -> &ServerMetrics {
        &self.inner.metrics
    }

    /// When the server started (Unix seconds): the model's `created`.
    pub fn started(&self) -> u64 {
        self.inner.started
    }
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A fresh unpredictable number for ids and the seeds of requests without one (not for
/// cryptography): the standard library's randomly keyed hasher over a counter and the
/// clock.
pub fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.write_u128(nanos);
    h.finish()
}
