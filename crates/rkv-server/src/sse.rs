//! A streamed answer as server-sent events: one `data: {chunk}` per piece of text in
//! OpenAI's `chat.completion.chunk` / `text_completion` shapes (a first chunk with the
//! assistant role for chat, a last one per sample with its `finish_reason`), a usage
//! chunk when `stream_options.include_usage` asks, then `data: [DONE]`. A failed sample
//! ends the stream with `data: {"error": ...}` and `[DONE]`.
//!
//! The stream owns the [`Generation`]: when the client goes away the body is dropped,
//! and with it the generation, which cancels the request.
//!
//! Must not know: HTTP routing, the engine's internals.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use rkv_engine::handle::RequestEvent;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::generation::Generation;
use crate::reasoning::{ReasoningSplitter, Split};
use crate::response::{chunk, usage_chunk, Endpoint, Meta, Usage};
use crate::shaper::{Pending, Shaper};
use crate::stop_text::StopHoldback;

/// How often an idle stream sends an SSE comment (a queued request shows it is alive,
/// and a closed connection is noticed).
const KEEP_ALIVE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Start,
    Running,
    Done,
}

struct Sample {
    hold: StopHoldback,
    /// Tokens not yet shown in a chunk.
    pending: Pending,
    /// Chat only.
    splitter: Option<ReasoningSplitter>,
    ended: bool,
}

struct StreamState {
    gen: Generation,
    meta: Meta,
    usage: Usage,
    include_usage: bool,
    samples: Vec<Sample>,
    phase: Phase,
    shaper: Shaper,
}

/// The SSE response of a submitted request.
pub fn respond(
    gen: Generation,
    meta: Meta,
    usage: Usage,
    include_usage: bool,
    stops: &[String],
    shaper: Shaper,
) -> Response {
    let opens_think = shaper.opens_think();
    let samples = (0..gen.n())
        .map(|_| Sample {
            hold: StopHoldback::new(stops),
            pending: Pending::default(),
            splitter: (meta.endpoint == Endpoint::Chat)
                .then(|| ReasoningSplitter::new(opens_think)),
            ended: false,
        })
        .collect();
    let state = StreamState {
        gen,
        meta,
        usage,
        include_usage,
        samples,
        phase: Phase::Start,
        shaper,
    };
    let events = stream::unfold(state, |mut st| async move {
        let evs = st.next_events().await?;
        Some((evs, st))
    })
    .flat_map(|evs| stream::iter(evs.into_iter().map(Ok::<Event, Infallible>)));
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

fn data(v: &Value) -> Event {
    Event::default().data(v.to_string())
}

fn done() -> Event {
    Event::default().data("[DONE]")
}

impl StreamState {
    /// The next events to send (never an empty batch); `None` after `[DONE]`.
    async fn next_events(&mut self) -> Option<Vec<Event>> {
        loop {
            match self.phase {
                Phase::Done => return None,
                Phase::Start => {
                    self.phase = Phase::Running;
                    if self.meta.endpoint == Endpoint::Chat {
                        let role = (0..self.samples.len())
                            .map(|i| {
                                let mut d = Map::new();
                                d.insert("role".into(), json!("assistant"));
                                d.insert("content".into(), json!(""));
                                let mut c = chunk(&self.meta, i, d, None, self.include_usage);
                                if let (0, Value::Object(m)) = (i, &mut c) {
                                    self.shaper.top_level(m);
                                }
                                data(&c)
                            })
                            .collect();
                        return Some(role);
                    }
                }
                Phase::Running => {
                    let Some(ev) = self.gen.next().await else {
                        self.phase = Phase::Done;
                        let mut evs = Vec::new();
                        if self.include_usage {
                            evs.push(data(&usage_chunk(&self.meta, &self.usage)));
                        }
                        evs.push(done());
                        return Some(evs);
                    };
                    let evs = self.on_event(ev);
                    if !evs.is_empty() {
                        return Some(evs);
                    }
                }
            }
        }
    }

    fn on_event(&mut self, ev: RequestEvent) -> Vec<Event> {
        let mut evs = Vec::new();
        match ev {
            RequestEvent::Token {
                index,
                token,
                text,
                logprob,
            } => {
                if let Some(s) = self.samples.get_mut(index).filter(|s| !s.ended) {
                    s.pending.push(token, logprob);
                    let now = s.hold.push(&text);
                    let split = split(s, &now);
                    self.text_event(index, split, &mut evs);
                }
            }
            RequestEvent::Finished { index, output } => {
                if let Some(s) = self.samples.get_mut(index).filter(|s| !s.ended) {
                    s.ended = true;
                    let rest = s.hold.finish(&output.text);
                    let mut sp = split(s, &rest);
                    if let Some(r) = s.splitter.as_mut() {
                        let tail = r.finish();
                        sp.reasoning.push_str(&tail.reasoning);
                        sp.content.push_str(&tail.content);
                    }
                    self.text_event(index, sp, &mut evs);
                    self.usage.add(index, &output.stats);
                    let finish = output.finish_reason.as_str();
                    let c = chunk(
                        &self.meta,
                        index,
                        Map::new(),
                        Some(finish),
                        self.include_usage,
                    );
                    evs.push(self.shaped(index, c));
                }
            }
            RequestEvent::Failed { index, error } => {
                let e = ApiError::Internal(format!("generation failed (sample {index}): {error}"));
                evs.push(data(&e.body()));
                evs.push(done());
                self.phase = Phase::Done;
            }
        }
        evs
    }

    /// `c` with the tokens sample `index` received since its last chunk.
    fn shaped(&mut self, index: usize, mut c: Value) -> Event {
        if let Some(s) = self.samples.get_mut(index) {
            if let Some(choice) = c.get_mut("choices").and_then(|v| v.get_mut(0)) {
                self.shaper.stream_choice(index, choice, &mut s.pending);
            }
        }
        data(&c)
    }

    /// A chunk with the text of `sp`, if there is any.
    fn text_event(&mut self, index: usize, sp: Split, evs: &mut Vec<Event>) {
        let mut d = Map::new();
        if !sp.reasoning.is_empty() {
            d.insert("reasoning_content".into(), json!(sp.reasoning));
        }
        if !sp.content.is_empty() {
            d.insert("content".into(), json!(sp.content));
        }
        if !d.is_empty() {
            let c = chunk(&self.meta, index, d, None, self.include_usage);
            evs.push(self.shaped(index, c));
        }
    }
}

/// Divides a piece of a sample's text (completions: all content).
fn split(s: &mut Sample, text: &str) -> Split {
    match s.splitter.as_mut() {
        Some(r) => r.push(text),
        None => Split {
            reasoning: String::new(),
            content: text.to_string(),
        },
    }
}
