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
use crate::shaper::{call_id, Pending, Shaper};
use crate::stop_text::StopHoldback;
use crate::tool_calls::{ToolCall, ToolStream};

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
    /// Chat with tools: holds a call's text until the call is whole.
    tools: Option<ToolStream>,
    /// Calls sent so far (the next one's `index`).
    calls: usize,
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
    let calls = shaper.calls().cloned();
    let samples = (0..gen.n())
        .map(|_| Sample {
            tools: calls
                .as_ref()
                .map(|f| ToolStream::new(f.parser, f.names.clone())),
            calls: 0,
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
                    let mut split = split(s, &now);
                    let calls = take_calls(s, &mut split, false);
                    self.text_event(index, split, &mut evs);
                    self.call_events(index, calls, &mut evs);
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
                    let calls = take_calls(s, &mut sp, true);
                    self.text_event(index, sp, &mut evs);
                    self.call_events(index, calls, &mut evs);
                    self.usage.add(index, &output.stats);
                    let called = self.samples.get(index).is_some_and(|s| s.calls > 0);
                    let finish = if called {
                        "tool_calls"
                    } else {
                        output.finish_reason.as_str()
                    };
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

    /// Two chunks per call: its id and name, then its arguments.
    fn call_events(&mut self, index: usize, calls: Vec<ToolCall>, evs: &mut Vec<Event>) {
        for call in calls {
            let Some(s) = self.samples.get_mut(index) else {
                return;
            };
            let k = s.calls;
            s.calls += 1;
            let head = json!([{"index": k, "id": call_id(), "type": "function",
                               "function": {"name": call.name, "arguments": ""}}]);
            let args = json!([{"index": k, "function": {"arguments": call.arguments}}]);
            for piece in [head, args] {
                let mut d = Map::new();
                d.insert("tool_calls".into(), piece);
                let c = chunk(&self.meta, index, d, None, self.include_usage);
                evs.push(self.shaped(index, c));
            }
        }
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

/// Passes a piece of content through the sample's tool-call stream: what may be part of
/// a call is held back, whole calls are taken out. `end`: the output is over.
fn take_calls(s: &mut Sample, sp: &mut Split, end: bool) -> Vec<ToolCall> {
    let Some(t) = s.tools.as_mut() else {
        return Vec::new();
    };
    let mut r = t.push(&sp.content);
    if end {
        let tail = t.finish();
        r.text.push_str(&tail.text);
        r.calls.extend(tail.calls);
    }
    sp.content = r.text;
    r.calls
}
