//! A non-streamed answer: waits for every sample of a request and builds the whole
//! `chat.completion` / `text_completion` object. A failed sample fails the request (500).
//!
//! Must not know: HTTP routing, SSE.

use rkv_engine::handle::RequestEvent;
use rkv_engine::GenerationOutput;
use serde_json::Value;

use crate::error::ApiError;
use crate::generation::Generation;
use crate::response::{whole, Meta, Usage};
use crate::shaper::Shaper;

pub async fn collect(
    mut gen: Generation,
    meta: &Meta,
    mut usage: Usage,
    shaper: &Shaper,
) -> Result<Value, ApiError> {
    let mut outputs: Vec<Option<GenerationOutput>> = vec![None; gen.n()];
    while let Some(ev) = gen.next().await {
        match ev {
            RequestEvent::Token { .. } => {}
            RequestEvent::Finished { index, output } => {
                if let Some(slot) = outputs.get_mut(index) {
                    usage.add(index, &output.stats);
                    *slot = Some(output);
                }
            }
            RequestEvent::Failed { index, error } => {
                return Err(ApiError::Internal(format!(
                    "generation failed (sample {index}): {error}"
                )));
            }
        }
    }
    let mut choices = Vec::with_capacity(outputs.len());
    for (i, out) in outputs.iter().enumerate() {
        let out = out
            .as_ref()
            .ok_or_else(|| ApiError::Internal(format!("sample {i} ended without an output")))?;
        choices.push(shaper.choice(i, out));
    }
    if shaper.score_only() {
        usage.completion_tokens = 0;
    }
    let mut body = whole(meta, choices, &usage);
    if let Value::Object(m) = &mut body {
        shaper.top_level(m);
    }
    Ok(body)
}
