//! One entry per loader of untrusted bytes, each taking a whole input as bytes: the fuzz
//! targets under `fuzz/` call these, and so does the test that replays their corpus on
//! stable Rust. Each loads the bytes as rkv loads a model's files and, when that succeeds,
//! uses the result a little (encodes and decodes, renders), so that what a loaded file
//! feeds is searched too.
//!
//! An error is the expected outcome for most inputs; a panic, a hang or an allocation out
//! of proportion to the input is the bug.
//! Must not know: fuzzing engines, files, the CLI.

use std::path::Path;

use crate::chat_template::{ChatMessage, ChatTemplate};
use crate::config::{Arch, ModelConfig};
use crate::error::{ModelError, Result};
use crate::rope::{RopeConfig, RopeStyle};
use crate::tokenizer::{Tokenizer, TokenizerError};
use crate::transformer::Transformer;
use crate::weights::gguf::GgufSource;
use crate::weights::hf::{parse_config, HfSource};
use crate::weights::WeightMode;

/// How inputs are named in errors.
const LABEL: &str = "<untrusted input>";

/// Text the tokenizers are tried on: ASCII, digits, controls, a chat marker, multi-byte
/// characters.
const SAMPLE: &str = "Hello, world! 12 x 7 = 84.\n\t<|im_start|>user <s> ünïcödé 数学 🙂  ";

/// A GGUF file, through the whole of [`crate::load`]'s path: header, metadata, tensor
/// infos and data offsets, config, vocabulary, weights. Then its tokenizer and chat
/// template are used.
pub fn gguf_model(data: &[u8]) -> Result<()> {
    let model = crate::model::load_gguf_bytes(Path::new(LABEL), data.to_vec(), WeightMode::Native)?;
    exercise(&model.tokenizer)
}

/// A GGUF file's header and the tokenizer its `tokenizer.ggml.*` metadata describes (no
/// tensors needed), then used.
pub fn gguf_vocab(data: &[u8]) -> Result<()> {
    let src = GgufSource::from_bytes(Path::new(LABEL), data.to_vec(), WeightMode::Native)?;
    let tokenizer = Tokenizer::from_gguf(src.content())?;
    exercise(&tokenizer)
}

/// A `.safetensors` file: its header, then its tensors loaded into a tiny Llama (the shapes
/// of [`tiny_config`]), as a Hugging Face directory's weights are.
pub fn safetensors(data: &[u8]) -> Result<()> {
    let mut src = HfSource::from_bytes(Path::new(LABEL), data)?;
    Transformer::load(tiny_config(), &mut src).map(drop)
}

/// A `config.json`.
pub fn config_json(data: &[u8]) -> Result<()> {
    let text = std::str::from_utf8(data)
        .map_err(|e| ModelError::BadConfig(format!("config.json is not UTF-8: {e}")))?;
    parse_config(text).map(drop)
}

/// A `tokenizer.json`, then used.
pub fn tokenizer_json(data: &[u8]) -> Result<()> {
    let tokenizer = Tokenizer::from_hf_json(Path::new(LABEL), data)?;
    exercise(&tokenizer)
}

/// A chat template's source, compiled and rendered over a short conversation.
pub fn chat_template(data: &[u8]) -> Result<()> {
    let source = String::from_utf8_lossy(data);
    let template = ChatTemplate::new(&source).map_err(TokenizerError::from)?;
    template
        .render(&conversation(), true, Some("<s>"), Some("</s>"))
        .map_err(TokenizerError::from)?;
    Ok(())
}

fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::system("You are terse."),
        ChatMessage::user(SAMPLE),
        ChatMessage::assistant("<think>\n84\n</think>\n\n84"),
        ChatMessage::user("And 13 x 7?"),
    ]
}

/// Encodes and decodes [`SAMPLE`], decodes the first ids one by one as a stream, and
/// renders the chat template if there is one.
fn exercise(tokenizer: &Tokenizer) -> Result<()> {
    let ids = tokenizer.encode(SAMPLE)?;
    tokenizer.decode(&ids, false)?;
    tokenizer.decode(&ids, true)?;
    let first: Vec<u32> = (0..tokenizer.vocab_size().min(64) as u32).collect();
    let mut stream = tokenizer.stream(false);
    for &id in first.iter().chain(&ids) {
        stream.push(id)?;
    }
    stream.finish()?;
    if tokenizer.chat_template().is_some() {
        tokenizer.apply_chat_template(&conversation(), true)?;
    }
    Ok(())
}

/// The shapes [`safetensors`] loads: a Llama of one layer, hidden size 8, two query heads
/// sharing one KV head of dim 4, 16 tokens, untied `lm_head`.
pub fn tiny_config() -> ModelConfig {
    ModelConfig {
        arch: Arch::Llama,
        vocab_size: 16,
        hidden_size: 8,
        intermediate_size: 16,
        n_layers: 1,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 4,
        rms_norm_eps: 1e-6,
        rope: RopeConfig {
            theta: 10000.0,
            style: RopeStyle::Half,
            freq_factors: None,
        },
        max_context: 64,
        tie_embeddings: false,
    }
}
