//! The request bodies the server accepts, as JSON: OpenAI's chat and completion fields
//! (`response_format` included) plus rkv's extensions (`kv_compression`, `ignore_eos`, `top_k`) and vLLM's
//! `return_token_ids`.
//!
//! Owns only the wire shapes and the JSON extractor that turns axum's rejections into
//! OpenAI error bodies. Fields whose JSON type varies (`stop`, `prompt`, `content`,
//! `seed`) stay [`Value`]s here and are checked in `params` and `prompt`, where the
//! error can name the field. Fields the server does not use are ignored.
//! Must not know: the engine, tokenizers.

use axum::extract::{FromRequest, Request};
use axum::Json;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;

/// `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<ChatMessageIn>,
    /// Alternatives per token (0-20) with `logprobs: true`.
    #[serde(default)]
    pub top_logprobs: Option<Value>,
    /// Function tools, checked in `tools`.
    #[serde(default)]
    pub tools: Option<Value>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(flatten)]
    pub common: CommonFields,
}

/// One chat message: `content` is a string or an array of `{"type": "text", "text"}`.
#[derive(Debug, Deserialize)]
pub struct ChatMessageIn {
    pub role: String,
    #[serde(default)]
    pub content: Option<Value>,
    /// An assistant message's calls: `[{id, type, function: {name, arguments}}]`.
    #[serde(default)]
    pub tool_calls: Option<Value>,
    /// A `tool` message's answer to this call.
    #[serde(default)]
    pub tool_call_id: Option<Value>,
    #[serde(default)]
    pub name: Option<Value>,
}

/// `POST /v1/completions`.
#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    /// A string, an array of one string, or an array of token ids.
    pub prompt: Value,
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub best_of: Option<u64>,
    #[serde(default)]
    pub suffix: Option<String>,
    #[serde(flatten)]
    pub common: CommonFields,
}

/// The sampling, length, stop and streaming fields both endpoints share.
#[derive(Debug, Default, Deserialize)]
pub struct CommonFields {
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default)]
    pub max_completion_tokens: Option<u64>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    /// rkv extension (also vLLM's): 0 or -1 = off.
    #[serde(default)]
    pub top_k: Option<i64>,
    #[serde(default)]
    pub seed: Option<Value>,
    /// A string or an array of strings.
    #[serde(default)]
    pub stop: Option<Value>,
    #[serde(default)]
    pub n: Option<u64>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// rkv extension: keep generating through end-of-sequence tokens.
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// rkv extension: this request's KV compression.
    #[serde(default)]
    pub kv_compression: Option<KvCompressionIn>,
    /// Chat: a boolean; completions: alternatives per token (0-20). Checked per endpoint.
    #[serde(default)]
    pub logprobs: Option<Value>,
    /// vLLM's extension: the prompt's and each choice's token ids in the answer.
    /// A boolean, checked where the error can name it (flattened fields lose their path
    /// in serde's errors).
    #[serde(default)]
    pub return_token_ids: Option<Value>,
    /// Structured outputs: `{"type": "text" | "json_object" | "json_schema", ...}`,
    /// checked in `response_format`.
    #[serde(default)]
    pub response_format: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// `kv_compression`: every field optional (the server's default fills it in); unknown
/// fields are refused so that a misspelt one is not silently ignored.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvCompressionIn {
    #[serde(default)]
    pub policy: Option<String>,
    #[serde(default)]
    pub budget: Option<u64>,
    #[serde(default)]
    pub buffer: Option<u64>,
    #[serde(default)]
    pub window: Option<u64>,
    #[serde(default)]
    pub lambda: Option<f64>,
    #[serde(default)]
    pub threshold: Option<f64>,
    #[serde(default)]
    pub kernel: Option<u64>,
    #[serde(default)]
    pub sinks: Option<u64>,
    /// The policy's own parameters by name (`{"alpha": 0.8}` for G-KV); a name the
    /// policy does not declare, or a value outside its range, is refused.
    #[serde(default)]
    pub params: Option<std::collections::BTreeMap<String, f64>>,
    /// `"keep"` (the prompt held whole, compressed once after it) or `"compress"` (the
    /// schedule runs after every `prompt_chunk` prompt tokens).
    #[serde(default)]
    pub prompt: Option<String>,
    #[serde(default)]
    pub prompt_chunk: Option<u64>,
}

/// A JSON body whose rejections (missing content type, syntax, wrong types) come back
/// as OpenAI error bodies.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(r) => Err(r.into()),
        }
    }
}
