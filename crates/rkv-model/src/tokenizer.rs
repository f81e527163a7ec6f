//! Tokenizer: text <-> token ids for a model, built from a GGUF file's `tokenizer.ggml.*`
//! metadata or from a Hugging Face directory (`tokenizer.json` + `tokenizer_config.json`),
//! plus the model's special tokens (BOS/EOS), its chat template and streaming decoding;
//! and written back out as a Hugging Face directory ([`Tokenizer::export_hf`]).
//!
//! Owns: vocabulary/merges loading, pre-tokenizer choice, BOS/EOS policy, decoding.
//! Must not know: model weights, tensors, sampling, KV caches, HTTP.

mod export;
mod gguf;
mod hf;
mod pretokenizer;
mod stream;
mod token_bytes;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::quantized::gguf_file;

use crate::chat_template::{ChatMessage, ChatTemplate, ChatTemplateError};

pub use export::EXPORT_FILES;
pub use pretokenizer::PreTokenizerKind;
pub use stream::TokenStream;

/// Errors of loading a tokenizer, encoding/decoding and chat-template use.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("GGUF tokenizer metadata: missing key `{0}`")]
    MissingMetadata(String),
    #[error("GGUF tokenizer metadata: key `{key}` is invalid: {reason}")]
    InvalidMetadata { key: String, reason: String },
    #[error(
        "unsupported tokenizer model `{0}` (supported: gpt2 byte-level BPE, llama SentencePiece)"
    )]
    Unsupported(String),
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot parse {path}: {reason}")]
    Parse { path: PathBuf, reason: String },
    #[error("cannot export the tokenizer to {path}: {reason}")]
    Export { path: PathBuf, reason: String },
    #[error("tokenizer: {0}")]
    Tokenizers(String),
    #[error("token id {0} is out of the vocabulary")]
    UnknownId(u32),
    #[error("the model has no chat template (no `tokenizer.chat_template` in the GGUF, no `chat_template` in tokenizer_config.json)")]
    NoChatTemplate,
    #[error(transparent)]
    ChatTemplate(#[from] ChatTemplateError),
}

fn tk_err(e: tokenizers::Error) -> TokenizerError {
    TokenizerError::Tokenizers(e.to_string())
}

/// Everything a loader produces; [`Tokenizer`] wraps it in an `Arc`.
struct Inner {
    hf: tokenizers::Tokenizer,
    /// Number of ids (GGUF: the token list length, even if some strings repeat).
    n_vocab: usize,
    bos_id: Option<u32>,
    /// EOS first (the one `add_eos` appends and templates see as `eos_token`).
    eos_ids: Vec<u32>,
    add_bos: bool,
    add_eos: bool,
    /// The model's chat template, or why it did not compile; `None` when it has none.
    chat_template: Option<Result<ChatTemplate, ChatTemplateError>>,
}

/// A model's tokenizer. Cheap to clone (shared, immutable).
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("bos_id", &self.inner.bos_id)
            .field("eos_ids", &self.inner.eos_ids)
            .field("add_bos", &self.inner.add_bos)
            .finish()
    }
}

impl Tokenizer {
    /// Builds the tokenizer described by a GGUF file's metadata (`tokenizer.ggml.model`
    /// `gpt2` = byte-level BPE with the pre-tokenizer of `tokenizer.ggml.pre`, or `llama` =
    /// SentencePiece-style BPE with byte fallback).
    pub fn from_gguf(content: &gguf_file::Content) -> Result<Self, TokenizerError> {
        gguf::build(&content.metadata).map(Self::from_inner)
    }

    /// Loads `dir/tokenizer.json`, plus `tokenizer_config.json` (BOS/EOS, `add_bos_token`,
    /// `chat_template`), `chat_template.jinja` and `generation_config.json` (`eos_token_id`)
    /// when present.
    pub fn from_hf_dir(dir: &Path) -> Result<Self, TokenizerError> {
        hf::load(dir).map(Self::from_inner)
    }

    /// A tokenizer from the bytes of a `tokenizer.json` alone (no `tokenizer_config.json`:
    /// BOS/EOS follow its post-processor); `label` names it in errors.
    pub fn from_hf_json(label: &Path, tokenizer_json: &[u8]) -> Result<Self, TokenizerError> {
        hf::from_parts(
            label,
            tokenizer_json,
            &serde_json::Value::Null,
            &serde_json::Value::Null,
            None,
        )
        .map(Self::from_inner)
    }

    fn from_inner(inner: Inner) -> Self {
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Encodes `text`. Special tokens written in the text (e.g. `<|im_start|>`) become their
    /// ids; BOS (EOS) is added only when the model asks for it, and BOS is not doubled when
    /// the text already starts with it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let inner = &self.inner;
        let mut ids = self.encode_raw(text)?;
        if let (true, Some(bos)) = (inner.add_bos, inner.bos_id) {
            if ids.first() != Some(&bos) {
                ids.insert(0, bos);
            }
        }
        if let (true, Some(&eos)) = (inner.add_eos, inner.eos_ids.first()) {
            ids.push(eos);
        }
        Ok(ids)
    }

    /// Encodes `text` without adding BOS/EOS (special tokens in the text still parse).
    pub fn encode_raw(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let enc = self.inner.hf.encode_fast(text, false).map_err(tk_err)?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decodes ids to text; `skip_special` drops control/special tokens such as `<|im_end|>`.
    /// Ids outside the vocabulary are an error.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        let n = self.vocab_size();
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= n) {
            return Err(TokenizerError::UnknownId(bad));
        }
        self.inner.hf.decode(ids, skip_special).map_err(tk_err)
    }

    /// A streaming decoder that yields text only once it forms complete UTF-8.
    pub fn stream(&self, skip_special: bool) -> TokenStream {
        TokenStream::new(self.clone(), skip_special)
    }

    /// The ids that end generation (EOS, and EOT/EOM where the model defines them).
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.inner.eos_ids
    }

    pub fn is_eos(&self, id: u32) -> bool {
        self.inner.eos_ids.contains(&id)
    }

    pub fn bos_token_id(&self) -> Option<u32> {
        self.inner.bos_id
    }

    /// Whether [`encode`](Self::encode) prepends BOS.
    pub fn adds_bos(&self) -> bool {
        self.inner.add_bos
    }

    /// Number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.n_vocab
    }

    /// The vocabulary string of one id (in the model's internal form, e.g. `Ġthe`).
    pub fn token_str(&self, id: u32) -> Option<String> {
        self.inner.hf.id_to_token(id)
    }

    /// The id of a vocabulary string, e.g. `token_id("<|im_end|>")`.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.hf.token_to_id(token)
    }

    /// The compiled chat template; `None` when the model has none or it did not compile
    /// (then [`apply_chat_template`](Self::apply_chat_template) reports why).
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.inner.chat_template.as_ref()?.as_ref().ok()
    }

    /// Renders messages given as JSON (any fields a template reads: `tool_calls`,
    /// `tool_call_id`, ...) and, when given, `tools`, as transformers'
    /// `apply_chat_template(messages, tools=...)` does.
    pub fn apply_chat_template_json(
        &self,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        let tmpl = match &self.inner.chat_template {
            Some(Ok(t)) => t,
            Some(Err(e)) => return Err(e.clone().into()),
            None => return Err(TokenizerError::NoChatTemplate),
        };
        let bos = self.inner.bos_id.and_then(|id| self.token_str(id));
        let eos = self
            .inner
            .eos_ids
            .first()
            .and_then(|&id| self.token_str(id));
        let mut ctx = serde_json::json!({
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": bos,
            "eos_token": eos,
        });
        if let Some(t) = tools {
            ctx["tools"] = t.clone();
        }
        Ok(tmpl.render_json(&ctx)?)
    }

    /// Renders `messages` with the model's chat template (BOS/EOS token strings are passed
    /// to the template as `bos_token` / `eos_token`).
    pub fn apply_chat_template(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        let messages = serde_json::to_value(messages)
            .map_err(|e| TokenizerError::Tokenizers(format!("chat messages: {e}")))?;
        self.apply_chat_template_json(&messages, None, add_generation_prompt)
    }
}
