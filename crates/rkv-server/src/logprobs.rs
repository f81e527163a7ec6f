//! Log-probabilities in the request and in the answer, in OpenAI's two shapes.
//!
//! Asking: chat takes `logprobs: bool` and `top_logprobs: 0..=20`; completions take
//! `logprobs: 0..=20` (alternatives per token). Answering: chat's `{"content": [{token,
//! logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}`; completions' `{tokens,
//! token_logprobs, top_logprobs: [{token: logprob}], text_offset}`, where the token's own
//! entry joins its alternatives as vLLM does, and an echoed prompt's first token has
//! `null`s. A log-probability of -inf is written as -9999.0 (JSON has no infinity; vLLM's
//! choice).
//!
//! Must not know: HTTP, the engine's internals (it reads [`TokenLogprob`]s).

use rkv_engine::logprobs::MAX_TOP_LOGPROBS;
use rkv_engine::TokenLogprob;
use rkv_model::Tokenizer;
use serde_json::{json, Map, Value};

use crate::error::ApiError;

/// JSON's stand-in for a log-probability of -inf.
const FLOOR: f32 = -9999.0;

fn finite(lp: f32) -> f32 {
    if lp.is_finite() {
        lp
    } else {
        FLOOR
    }
}

fn count(param: &str, v: &Value) -> Result<usize, ApiError> {
    let bad = || {
        ApiError::invalid_param(
            param,
            format!("{param} must be an integer from 0 to {MAX_TOP_LOGPROBS}, got {v}"),
        )
    };
    let n = v.as_u64().ok_or_else(bad)?;
    usize::try_from(n)
        .ok()
        .filter(|&n| n <= MAX_TOP_LOGPROBS)
        .ok_or_else(bad)
}

/// Chat's `logprobs` (bool) and `top_logprobs`: the alternatives per token, or `None`.
pub fn chat_ask(logprobs: Option<&Value>, top: Option<&Value>) -> Result<Option<usize>, ApiError> {
    let on = match logprobs {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(ApiError::invalid_param(
                "logprobs",
                format!("logprobs must be a boolean, got {v}"),
            ))
        }
    };
    let top = match top {
        None | Some(Value::Null) => None,
        Some(v) => Some(count("top_logprobs", v)?),
    };
    match (on, top) {
        (true, top) => Ok(Some(top.unwrap_or(0))),
        (false, Some(_)) => Err(ApiError::invalid_param(
            "top_logprobs",
            "top_logprobs needs logprobs set to true",
        )),
        (false, None) => Ok(None),
    }
}

/// Completions' `logprobs` (an integer): the alternatives per token, or `None`.
pub fn completion_ask(logprobs: Option<&Value>) -> Result<Option<usize>, ApiError> {
    match logprobs {
        None | Some(Value::Null) => Ok(None),
        Some(v) => count("logprobs", v).map(Some),
    }
}

/// Chat's `logprobs.content` entries of `lps`.
pub fn chat_content(tok: &Tokenizer, lps: &[TokenLogprob]) -> Vec<Value> {
    let entry = |id: u32, lp: f32| {
        let bytes = tok.token_bytes(id);
        json!({
            "token": String::from_utf8_lossy(&bytes),
            "logprob": finite(lp),
            "bytes": bytes,
        })
    };
    lps.iter()
        .map(|t| {
            let mut e = entry(t.token, t.logprob);
            let top: Vec<Value> = t.top.iter().map(|&(id, lp)| entry(id, lp)).collect();
            e["top_logprobs"] = Value::Array(top);
            e
        })
        .collect()
}

/// Completions' `logprobs` object, built token by token; `text_offset` counts characters
/// of the choice's text from `offset` on (a stream continues where it left off).
#[derive(Debug, Default)]
pub struct CompletionLogprobs {
    tokens: Vec<Value>,
    token_logprobs: Vec<Value>,
    top_logprobs: Vec<Value>,
    text_offset: Vec<Value>,
    offset: usize,
}

impl CompletionLogprobs {
    /// Starts at character `offset` of the choice's text.
    pub fn at(offset: usize) -> Self {
        Self {
            offset,
            ..Self::default()
        }
    }

    /// A token without a log-probability (an echoed prompt's first).
    pub fn push_bare(&mut self, tok: &Tokenizer, id: u32) {
        self.push_token(tok, id, Value::Null, Value::Null);
    }

    pub fn push(&mut self, tok: &Tokenizer, t: &TokenLogprob) {
        let mut top = Map::new();
        for &(id, lp) in &t.top {
            top.entry(tok.token_text(id))
                .or_insert_with(|| json!(finite(lp)));
        }
        top.entry(tok.token_text(t.token))
            .or_insert_with(|| json!(finite(t.logprob)));
        self.push_token(tok, t.token, json!(finite(t.logprob)), Value::Object(top));
    }

    fn push_token(&mut self, tok: &Tokenizer, id: u32, lp: Value, top: Value) {
        let text = tok.token_text(id);
        self.text_offset.push(json!(self.offset));
        self.offset += text.chars().count();
        self.tokens.push(json!(text));
        self.token_logprobs.push(lp);
        self.top_logprobs.push(top);
    }

    /// Where the next token's text starts.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The object, leaving this builder empty at the same offset.
    pub fn take(&mut self) -> Value {
        json!({
            "tokens": std::mem::take(&mut self.tokens),
            "token_logprobs": std::mem::take(&mut self.token_logprobs),
            "top_logprobs": std::mem::take(&mut self.top_logprobs),
            "text_offset": std::mem::take(&mut self.text_offset),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_asks_are_checked() {
        let t = json!(true);
        assert_eq!(chat_ask(None, None).unwrap(), None);
        assert_eq!(chat_ask(Some(&t), None).unwrap(), Some(0));
        assert_eq!(chat_ask(Some(&t), Some(&json!(20))).unwrap(), Some(20));
        assert_eq!(chat_ask(Some(&json!(false)), None).unwrap(), None);
        for (lp, top, param) in [
            (json!(1), Value::Null, "logprobs"),
            (json!("yes"), Value::Null, "logprobs"),
            (t.clone(), json!(21), "top_logprobs"),
            (t.clone(), json!(-1), "top_logprobs"),
            (t.clone(), json!(1.5), "top_logprobs"),
            (json!(false), json!(2), "top_logprobs"),
        ] {
            let e = chat_ask(Some(&lp), Some(&top)).unwrap_err();
            assert_eq!(e.body()["error"]["param"], param, "{lp} {top}");
        }
    }

    #[test]
    fn completion_asks_are_checked() {
        assert_eq!(completion_ask(None).unwrap(), None);
        assert_eq!(completion_ask(Some(&json!(0))).unwrap(), Some(0));
        assert_eq!(completion_ask(Some(&json!(5))).unwrap(), Some(5));
        for bad in [json!(21), json!(true), json!("1"), json!(-2)] {
            let e = completion_ask(Some(&bad)).unwrap_err();
            assert_eq!(e.body()["error"]["param"], "logprobs", "{bad}");
        }
    }
}
