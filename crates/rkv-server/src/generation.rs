//! One request in flight: its submissions to the engine (one per prompt; a completions
//! request may carry several), the channel their events arrive on (stamped with their
//! arrival time on the engine thread, each sample renumbered into the request's choices:
//! prompt `p`'s sample `j` is choice `p * n + j`), the latency metrics taken from those
//! stamps, and cancellation: dropping a [`Generation`] before its samples have all ended
//! (the client went away) cancels every submission so that its KV blocks are freed at once.
//!
//! Must not know: HTTP, response shapes.

use std::time::Instant;

use rkv_engine::handle::{EngineHandle, RequestEvent, RequestId, Submission};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::error::ApiError;
use crate::state::AppState;

/// Cancels its submissions when dropped, unless disarmed.
struct CancelGuard {
    handle: EngineHandle,
    ids: Vec<RequestId>,
    armed: bool,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if self.armed {
            for &id in &self.ids {
                self.handle.cancel(id);
            }
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct SampleClock {
    first: Option<Instant>,
    tokens: usize,
    ended: bool,
}

/// A submitted request's event stream.
pub struct Generation {
    rx: UnboundedReceiver<(Instant, RequestEvent)>,
    guard: CancelGuard,
    state: AppState,
    arrival: Instant,
    samples: Vec<SampleClock>,
    open: usize,
    first_token: bool,
}

impl Generation {
    /// Submits `subs` (one per prompt, each of the same `n`); a refusal (bad input, full
    /// queue, shutting down) comes back here, and what was already submitted is cancelled.
    /// `arrival`: when the HTTP request arrived (time to first token counts from it).
    pub fn start(
        state: &AppState,
        subs: Vec<Submission>,
        arrival: Instant,
    ) -> Result<Self, ApiError> {
        let (tx, rx) = unbounded_channel();
        let mut guard = CancelGuard {
            handle: state.handle().clone(),
            ids: Vec::with_capacity(subs.len()),
            armed: true,
        };
        let mut total = 0;
        for sub in subs {
            let offset = total;
            total += sub.n;
            let tx = tx.clone();
            let sink = Box::new(move |ev: RequestEvent| {
                tx.send((Instant::now(), renumber(ev, offset))).is_ok()
            });
            guard.ids.push(state.handle().submit(sub, sink)?);
        }
        Ok(Self {
            rx,
            guard,
            state: state.clone(),
            arrival,
            samples: vec![SampleClock::default(); total],
            open: total,
            first_token: false,
        })
    }

    /// Samples of the request.
    pub fn n(&self) -> usize {
        self.samples.len()
    }

    /// The next event; `None` once every sample has finished or failed. If the engine
    /// goes away first, each open sample fails.
    pub async fn next(&mut self) -> Option<RequestEvent> {
        if self.open == 0 {
            return None;
        }
        match self.rx.recv().await {
            Some((at, ev)) => {
                self.record(at, &ev);
                Some(ev)
            }
            None => {
                let index = self.samples.iter().position(|s| !s.ended)?;
                let ev = RequestEvent::Failed {
                    index,
                    error: "the engine stopped before the request finished".into(),
                };
                self.record(Instant::now(), &ev);
                Some(ev)
            }
        }
    }

    fn record(&mut self, at: Instant, ev: &RequestEvent) {
        let index = match ev {
            RequestEvent::Token { index, .. }
            | RequestEvent::Finished { index, .. }
            | RequestEvent::Failed { index, .. } => *index,
        };
        let Some(s) = self.samples.get_mut(index) else {
            return;
        };
        if s.ended {
            return;
        }
        let metrics = self.state.metrics();
        match ev {
            RequestEvent::Token { .. } => {
                s.tokens += 1;
                if s.first.is_none() {
                    s.first = Some(at);
                }
                if !self.first_token {
                    self.first_token = true;
                    metrics.observe_ttft(at.duration_since(self.arrival).as_secs_f64());
                }
            }
            RequestEvent::Finished { .. } | RequestEvent::Failed { .. } => {
                if let (RequestEvent::Finished { .. }, Some(first)) = (ev, s.first) {
                    if s.tokens > 1 {
                        let per = at.duration_since(first).as_secs_f64() / (s.tokens - 1) as f64;
                        metrics.observe_tpot(per);
                    }
                }
                s.ended = true;
                self.open -= 1;
                if self.open == 0 {
                    self.guard.armed = false;
                }
            }
        }
    }
}

/// `ev` with its sample index moved by `offset` (its prompt's first choice).
fn renumber(ev: RequestEvent, offset: usize) -> RequestEvent {
    match ev {
        RequestEvent::Token {
            index,
            token,
            text,
            logprob,
        } => RequestEvent::Token {
            index: index + offset,
            token,
            text,
            logprob,
        },
        RequestEvent::Finished { index, output } => RequestEvent::Finished {
            index: index + offset,
            output,
        },
        RequestEvent::Failed { index, error } => RequestEvent::Failed {
            index: index + offset,
            error,
        },
    }
}
