//! The JSON the server answers with, in OpenAI's shapes: `chat.completion`,
//! `chat.completion.chunk`, `text_completion` (whole and streamed), and `usage` with
//! rkv's `usage.kv` (the request's policy and budget, compressions and evicted tokens
//! summed over samples, peak slots and bytes the largest of any sample).
//!
//! Must not know: HTTP, the engine's internals (it reads finished outputs only).

use rkv_core::config::CompressionConfig;
use rkv_engine::{GenerationOutput, SeqStats};
use serde_json::{json, Map, Value};

use crate::reasoning::split_reasoning;
use crate::state::{random_u64, unix_now};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completion,
}

/// What every object of one response carries.
#[derive(Debug, Clone)]
pub struct Meta {
    pub endpoint: Endpoint,
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Meta {
    pub fn new(endpoint: Endpoint, model: &str) -> Self {
        let prefix = match endpoint {
            Endpoint::Chat => "chatcmpl",
            Endpoint::Completion => "cmpl",
        };
        Self {
            endpoint,
            id: format!("{prefix}-{:016x}{:016x}", random_u64(), random_u64()),
            created: unix_now(),
            model: model.to_string(),
        }
    }

    fn header(&self, object: &str) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("id".into(), json!(self.id));
        m.insert("object".into(), json!(object));
        m.insert("created".into(), json!(self.created));
        m.insert("model".into(), json!(self.model));
        m
    }

    fn chunk_object(&self) -> &'static str {
        match self.endpoint {
            Endpoint::Chat => "chat.completion.chunk",
            Endpoint::Completion => "text_completion",
        }
    }
}

/// Token counts and KV figures of a request, over its samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Per prompt, the prompt tokens taken from the prefix cache (its samples share them).
    cached: Vec<usize>,
    /// Samples per prompt: choice `i` belongs to prompt `i / n`.
    n: usize,
    pub completion_tokens: usize,
    pub compressions: usize,
    pub evicted_tokens: usize,
    pub slots_peak: usize,
    pub bytes_peak: usize,
    pub compression: CompressionConfig,
}

impl Usage {
    /// A request of `prompts` prompts of `prompt_tokens` tokens in all, `n` samples each.
    pub fn new(
        prompt_tokens: usize,
        compression: CompressionConfig,
        prompts: usize,
        n: usize,
    ) -> Self {
        Self {
            prompt_tokens,
            cached: vec![0; prompts.max(1)],
            n: n.max(1),
            completion_tokens: 0,
            compressions: 0,
            evicted_tokens: 0,
            slots_peak: 0,
            bytes_peak: 0,
            compression,
        }
    }

    /// Adds finished choice `index`.
    pub fn add(&mut self, index: usize, s: &SeqStats) {
        self.completion_tokens += s.generated_tokens;
        if let Some(c) = self.cached.get_mut(index / self.n) {
            *c = (*c).max(s.cached_tokens);
        }
        self.compressions += s.compressions;
        self.evicted_tokens += s.evicted_tokens;
        self.slots_peak = self.slots_peak.max(s.kv_slots_peak);
        self.bytes_peak = self.bytes_peak.max(s.kv_bytes_peak);
    }

    pub fn to_json(&self) -> Value {
        let c = &self.compression;
        let budget = c.policy.compresses().then_some(c.budget);
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached.iter().sum::<usize>()},
            "kv": {
                "policy": c.policy.name(),
                "budget": budget,
                "compressions": self.compressions,
                "evicted_tokens": self.evicted_tokens,
                "slots_peak": self.slots_peak,
                "bytes_peak": self.bytes_peak,
            }
        })
    }
}

/// One choice of a whole (non-streamed) response.
pub fn choice(
    endpoint: Endpoint,
    index: usize,
    out: &GenerationOutput,
    opens_think: bool,
) -> Value {
    let finish = out.finish_reason.as_str();
    match endpoint {
        Endpoint::Chat => {
            let (reasoning, content) = split_reasoning(&out.text, opens_think);
            let mut message = Map::new();
            message.insert("role".into(), json!("assistant"));
            message.insert("content".into(), json!(content));
            if let Some(r) = reasoning {
                message.insert("reasoning_content".into(), json!(r));
            }
            json!({"index": index, "message": message, "logprobs": null, "finish_reason": finish})
        }
        Endpoint::Completion => {
            json!({"index": index, "text": out.text, "logprobs": null, "finish_reason": finish})
        }
    }
}

/// A whole response.
pub fn whole(meta: &Meta, choices: Vec<Value>, usage: &Usage) -> Value {
    let object = match meta.endpoint {
        Endpoint::Chat => "chat.completion",
        Endpoint::Completion => "text_completion",
    };
    let mut m = meta.header(object);
    m.insert("choices".into(), Value::Array(choices));
    m.insert("usage".into(), usage.to_json());
    Value::Object(m)
}

/// A streamed piece of sample `index`: for chat `delta` is the message delta; for
/// completions its `content` is the text.
pub fn chunk(
    meta: &Meta,
    index: usize,
    delta: Map<String, Value>,
    finish: Option<&str>,
    include_usage: bool,
) -> Value {
    let choice = match meta.endpoint {
        Endpoint::Chat => {
            json!({"index": index, "delta": delta, "logprobs": null, "finish_reason": finish})
        }
        Endpoint::Completion => {
            let text = delta.get("content").cloned().unwrap_or(json!(""));
            json!({"index": index, "text": text, "logprobs": null, "finish_reason": finish})
        }
    };
    let mut m = meta.header(meta.chunk_object());
    m.insert("choices".into(), json!([choice]));
    if include_usage {
        m.insert("usage".into(), Value::Null);
    }
    Value::Object(m)
}

/// The last chunk of a stream with `include_usage`: no choices, the usage.
pub fn usage_chunk(meta: &Meta, usage: &Usage) -> Value {
    let mut m = meta.header(meta.chunk_object());
    m.insert("choices".into(), json!([]));
    m.insert("usage".into(), usage.to_json());
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkv_engine::FinishReason;

    fn output(text: &str, tokens: usize, slots: usize) -> GenerationOutput {
        GenerationOutput {
            token_ids: vec![0; tokens],
            text: text.into(),
            finish_reason: FinishReason::Length,
            stats: SeqStats {
                generated_tokens: tokens,
                compressions: 1,
                evicted_tokens: 10,
                kv_slots_peak: slots,
                kv_bytes_peak: slots * 100,
                ..SeqStats::default()
            },
            logprobs: None,
            prompt_logprobs: None,
        }
    }

    #[test]
    fn usage_sums_and_maxes() {
        let mut u = Usage::new(5, CompressionConfig::default(), 1, 2);
        u.add(0, &output("a", 3, 40).stats);
        u.add(1, &output("b", 4, 50).stats);
        let j = u.to_json();
        assert_eq!(j["completion_tokens"], 7);
        assert_eq!(j["total_tokens"], 12);
        assert_eq!(j["kv"]["policy"], "rkv");
        assert_eq!(j["kv"]["budget"], 1024);
        assert_eq!(j["kv"]["compressions"], 2);
        assert_eq!(j["kv"]["evicted_tokens"], 20);
        assert_eq!(j["kv"]["slots_peak"], 50);
        assert_eq!(j["kv"]["bytes_peak"], 5000);
        let full = Usage::new(5, CompressionConfig::full(), 1, 1).to_json();
        assert_eq!(full["kv"]["budget"], Value::Null);
    }

    #[test]
    fn chat_choice_splits_reasoning() {
        let c = choice(
            Endpoint::Chat,
            1,
            &output("<think>hm</think>4", 2, 1),
            false,
        );
        assert_eq!(c["index"], 1);
        assert_eq!(c["message"]["content"], "4");
        assert_eq!(c["message"]["reasoning_content"], "hm");
        assert_eq!(c["finish_reason"], "length");
        let c = choice(Endpoint::Chat, 0, &output("plain", 2, 1), false);
        assert!(c["message"].get("reasoning_content").is_none());
        let c = choice(Endpoint::Completion, 0, &output("<think>x", 2, 1), false);
        assert_eq!(c["text"], "<think>x");
    }

    #[test]
    fn chunks_have_openai_shapes() {
        let meta = Meta::new(Endpoint::Chat, "m");
        assert!(meta.id.starts_with("chatcmpl-"));
        let mut d = Map::new();
        d.insert("content".into(), json!("hi"));
        let c = chunk(&meta, 0, d.clone(), None, true);
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["choices"][0]["delta"]["content"], "hi");
        assert!(c.get("usage").is_some_and(Value::is_null));
        let meta = Meta::new(Endpoint::Completion, "m");
        let c = chunk(&meta, 2, d, Some("stop"), false);
        assert_eq!(c["object"], "text_completion");
        assert_eq!(c["choices"][0]["text"], "hi");
        assert_eq!(c["choices"][0]["index"], 2);
        assert!(c.get("usage").is_none());
        let u = usage_chunk(&meta, &Usage::new(1, CompressionConfig::full(), 1, 1));
        assert_eq!(u["choices"], json!([]));
        assert_eq!(u["usage"]["prompt_tokens"], 1);
    }
}
