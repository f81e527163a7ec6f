//! The engine on its own thread, driven through channels: what a server or an in-process
//! benchmark talks to.
//!
//! Owns the engine thread (run inside its own rayon worker pool, as the CLI runs the
//! engine), the routing of token events to each request's sink, cancellation, the queue
//! bound and a snapshot of the engine's gauges and counters after every step.
//! Must not know: HTTP, async runtimes, metric exposition formats. A sink is a plain
//! callback; the server wraps its async channel in one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rkv_core::config::CompressionConfig;
use rkv_model::{LoadedModel, Tokenizer};
use thiserror::Error;

use crate::engine::{Engine, EngineConfig, EngineCounters};
use crate::error::EngineError;
use crate::grammar::{Grammar, GrammarError, GrammarSpec, Grammars};
use crate::limits::RequestLimits;
use crate::logprobs::TokenLogprob;
use crate::request::{GenerationOutput, GenerationRequest, SeqId};

/// Identifies one submitted request (all of its samples).
pub type RequestId = u64;

/// What the engine tells a request's sink.
#[derive(Debug, Clone, PartialEq)]
pub enum RequestEvent {
    /// Sample `index` produced `token`; `text` is what became printable (may be empty).
    Token {
        index: usize,
        token: u32,
        text: String,
        /// Its log-probability, when the request asked for them.
        logprob: Option<TokenLogprob>,
    },
    /// Sample `index` finished; its whole output and statistics.
    Finished {
        index: usize,
        output: GenerationOutput,
    },
    /// Sample `index` failed; the request's other samples and other requests go on.
    Failed { index: usize, error: String },
}

/// Receives a request's events on the engine thread. Returns `false` when nobody listens
/// any more (the client went away): the engine then cancels the request and frees its
/// blocks. Must not block.
pub type EventSink = Box<dyn FnMut(RequestEvent) -> bool + Send>;

/// One request: its prompt and stop rules, its compression (`None`: the engine's
/// default) and how many samples of the prompt to generate (`n >= 1`; the samples share
/// the prompt's prefill, sample `i` is seeded with `seed + i`).
#[derive(Debug, Clone)]
pub struct Submission {
    pub request: GenerationRequest,
    pub compression: Option<CompressionConfig>,
    pub n: usize,
}

#[derive(Debug, Error)]
pub enum SubmitError {
    /// The request is malformed or can never fit: a 4xx for its sender.
    #[error(transparent)]
    Invalid(#[from] EngineError),
    /// More requests are waiting than the queue bound allows: try again later.
    #[error("the server is busy: {waiting} requests are already waiting (the bound is {bound})")]
    QueueFull { waiting: usize, bound: usize },
    /// The engine is shutting down or its thread has stopped.
    #[error("the engine is shutting down")]
    Closed,
}

/// The engine's gauges and counters as of its last step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineMetrics {
    pub counters: EngineCounters,
    /// Requests refused because the queue was full.
    pub requests_rejected_total: u64,
}

/// How the engine thread runs.
#[derive(Debug, Clone)]
pub struct HandleConfig {
    /// Most requests waiting for admission before new ones are refused.
    pub max_queue: usize,
    /// Worker threads of the engine's pool (`None`: one per core).
    pub threads: Option<usize>,
}

enum Command {
    Submit {
        id: RequestId,
        sub: Box<Submission>,
        sink: EventSink,
    },
    Cancel(RequestId),
    Shutdown,
}

struct Shared {
    metrics: Mutex<EngineMetrics>,
    /// Submissions sent but not yet taken by the engine thread.
    in_channel: AtomicUsize,
    rejected: AtomicU64,
    closed: AtomicBool,
}

struct Inner {
    tx: Mutex<Sender<Command>>,
    shared: Arc<Shared>,
    tokenizer: Tokenizer,
    grammars: Grammars,
    limits: RequestLimits,
    default_compression: CompressionConfig,
    max_queue: usize,
    next_id: AtomicU64,
    join: Mutex<Option<JoinHandle<()>>>,
}

/// A cheap, cloneable handle to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    inner: Arc<Inner>,
}

impl EngineHandle {
    /// Builds the engine and starts its thread. Errors in the configuration come back here.
    pub fn spawn(
        model: LoadedModel,
        cfg: EngineConfig,
        hc: HandleConfig,
    ) -> Result<Self, EngineError> {
        let mut builder =
            rayon::ThreadPoolBuilder::new().thread_name(|i| format!("rkv-engine-{i}"));
        if let Some(n) = hc.threads {
            builder = builder.num_threads(n);
        }
        let pool = builder
            .build()
            .map_err(|e| EngineError::Config(format!("cannot start the engine's threads: {e}")))?;
        let tokenizer = model.tokenizer.clone();
        let default_compression = cfg.compression;
        let engine = Engine::new(model, cfg)?;
        let limits = engine.limits();
        let grammars = engine.grammars().clone();
        let shared = Arc::new(Shared {
            metrics: Mutex::new(EngineMetrics {
                counters: engine.counters(),
                requests_rejected_total: 0,
            }),
            in_channel: AtomicUsize::new(0),
            rejected: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel();
        let thread_shared = Arc::clone(&shared);
        let join = std::thread::Builder::new()
            .name("rkv-engine".into())
            .spawn(move || pool.install(move || run_loop(engine, rx, &thread_shared)))
            .map_err(|e| EngineError::Config(format!("cannot start the engine thread: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                tx: Mutex::new(tx),
                shared,
                tokenizer,
                grammars,
                limits,
                default_compression,
                max_queue: hc.max_queue,
                next_id: AtomicU64::new(0),
                join: Mutex::new(Some(join)),
            }),
        })
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.inner.tokenizer
    }

    /// Compiles a request's grammar, on the caller's thread (the first one also builds
    /// the model's token environment). A grammar that cannot be enforced is refused here.
    pub fn compile_grammar(&self, spec: &GrammarSpec) -> Result<Grammar, GrammarError> {
        self.inner.grammars.compile(spec)
    }

    /// Prompt plus generated tokens the model accepts.
    pub fn max_context(&self) -> usize {
        self.inner.limits.max_context
    }

    /// The compression of requests that bring none.
    pub fn default_compression(&self) -> CompressionConfig {
        self.inner.default_compression
    }

    /// Checks a request as [`Self::submit`] would, without queuing it: a caller with many
    /// requests checks them all before submitting any.
    pub fn check(&self, sub: &Submission) -> Result<(), EngineError> {
        let comp = sub.compression.unwrap_or(self.inner.default_compression);
        self.inner.limits.check(&sub.request, &comp, sub.n)
    }

    /// Validates and queues a request; its events go to `sink`. Bad input or a full
    /// queue is refused here, before anything reaches the engine.
    pub fn submit(&self, sub: Submission, sink: EventSink) -> Result<RequestId, SubmitError> {
        let inner = &*self.inner;
        if inner.shared.closed.load(Ordering::SeqCst) {
            return Err(SubmitError::Closed);
        }
        self.check(&sub)?;
        let waiting =
            self.metrics().counters.waiting + inner.shared.in_channel.load(Ordering::SeqCst);
        if waiting >= inner.max_queue {
            inner.shared.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(SubmitError::QueueFull {
                waiting,
                bound: inner.max_queue,
            });
        }
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        inner.shared.in_channel.fetch_add(1, Ordering::SeqCst);
        let sent = self.send(Command::Submit {
            id,
            sub: Box::new(sub),
            sink,
        });
        if !sent {
            inner.shared.in_channel.fetch_sub(1, Ordering::SeqCst);
            return Err(SubmitError::Closed);
        }
        Ok(id)
    }

    /// Stops a request and frees its blocks; its sink hears nothing more. Unknown or
    /// finished ids are ignored.
    pub fn cancel(&self, id: RequestId) {
        self.send(Command::Cancel(id));
    }

    /// Gauges and counters as of the engine's last step.
    pub fn metrics(&self) -> EngineMetrics {
        let mut m = self
            .inner
            .shared
            .metrics
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default();
        m.requests_rejected_total = self.inner.shared.rejected.load(Ordering::Relaxed);
        m
    }

    /// Refuses new requests, lets every queued and running one finish, then stops the
    /// engine thread and waits for it.
    pub fn shutdown(&self) {
        self.inner.shared.closed.store(true, Ordering::SeqCst);
        self.send(Command::Shutdown);
        let join = self.inner.join.lock().ok().and_then(|mut j| j.take());
        if let Some(j) = join {
            let _ = j.join();
        }
    }

    fn send(&self, cmd: Command) -> bool {
        self.inner
            .tx
            .lock()
            .map(|tx| tx.send(cmd).is_ok())
            .unwrap_or(false)
    }
}

/// A request the engine thread is running: its sink and which sequence is which sample.
struct Live {
    sink: EventSink,
    seqs: Vec<SeqId>,
    open: usize,
}

fn run_loop(mut engine: Engine, rx: Receiver<Command>, shared: &Shared) {
    let mut live: HashMap<RequestId, Live> = HashMap::new();
    let mut owner: HashMap<SeqId, (RequestId, usize)> = HashMap::new();
    let mut draining = false;
    loop {
        // Take every command that is there; wait for one only when there is nothing to do.
        loop {
            let cmd = if engine.has_work() || draining {
                match rx.try_recv() {
                    Ok(c) => c,
                    Err(_) => break,
                }
            } else {
                // Idle: what the gauges show must already be true (a cancel may just
                // have emptied the engine).
                publish(&engine, shared);
                match rx.recv() {
                    Ok(c) => c,
                    Err(_) => return,
                }
            };
            match cmd {
                Command::Submit { id, sub, mut sink } => {
                    shared.in_channel.fetch_sub(1, Ordering::SeqCst);
                    match engine.add_request_n(sub.request, sub.compression, sub.n) {
                        Ok(seqs) => {
                            for (i, &s) in seqs.iter().enumerate() {
                                owner.insert(s, (id, i));
                            }
                            let open = seqs.len();
                            live.insert(id, Live { sink, seqs, open });
                        }
                        Err(e) => {
                            for index in 0..sub.n.max(1) {
                                sink(RequestEvent::Failed {
                                    index,
                                    error: e.to_string(),
                                });
                            }
                        }
                    }
                }
                Command::Cancel(id) => cancel(&mut engine, &mut live, &mut owner, id),
                Command::Shutdown => draining = true,
            }
        }
        if !engine.has_work() {
            publish(&engine, shared);
            if draining {
                return;
            }
            continue;
        }
        let events = engine.step();
        let mut gone: Vec<RequestId> = Vec::new();
        for ev in events {
            let Some(&(rid, index)) = owner.get(&ev.seq) else {
                continue;
            };
            let Some(l) = live.get_mut(&rid) else {
                continue;
            };
            let mut ok = (l.sink)(RequestEvent::Token {
                index,
                token: ev.token,
                text: ev.text,
                logprob: ev.logprob,
            });
            if ev.finished.is_some() {
                if let Some(output) = engine.take_output(ev.seq) {
                    ok &= (l.sink)(RequestEvent::Finished { index, output });
                }
                owner.remove(&ev.seq);
                l.open -= 1;
            }
            if !ok || l.open == 0 {
                gone.push(rid);
            }
        }
        for (seq, err) in engine.take_failures() {
            let Some((rid, index)) = owner.remove(&seq) else {
                continue;
            };
            if let Some(l) = live.get_mut(&rid) {
                let ok = (l.sink)(RequestEvent::Failed {
                    index,
                    error: err.to_string(),
                });
                l.open -= 1;
                if !ok || l.open == 0 {
                    gone.push(rid);
                }
            }
        }
        for rid in gone {
            cancel(&mut engine, &mut live, &mut owner, rid);
        }
        publish(&engine, shared);
    }
}

/// Forgets a request, aborting whatever of it still runs.
fn cancel(
    engine: &mut Engine,
    live: &mut HashMap<RequestId, Live>,
    owner: &mut HashMap<SeqId, (RequestId, usize)>,
    id: RequestId,
) {
    if let Some(l) = live.remove(&id) {
        for s in l.seqs {
            owner.remove(&s);
            engine.abort(s);
        }
    }
}

fn publish(engine: &Engine, shared: &Shared) {
    if let Ok(mut m) = shared.metrics.lock() {
        m.counters = engine.counters();
    }
}
