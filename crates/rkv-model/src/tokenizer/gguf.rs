//! Builds a tokenizer from GGUF `tokenizer.ggml.*` metadata: `gpt2` (byte-level BPE with
//! merges) and `llama` (SentencePiece vocabulary with scores, run as BPE with byte
//! fallback, merges derived from the scores). Control (type 3) tokens become special added
//! tokens, user-defined (type 4) tokens non-special added tokens, so both parse as single
//! ids in text, and only control tokens are dropped by `decode(.., skip_special = true)`,
//! as in llama.cpp.
//!
//! Owns: reading tokenizer metadata values and the special-token/BOS/EOS policy of GGUF.
//! Must not know: tensors, model architectures, file I/O (it gets parsed metadata).

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormSequence};
use tokenizers::{AddedToken, DecoderWrapper, NormalizerWrapper};

use super::{pretokenizer::PreTokenizerKind, tk_err, Inner, TokenizerError};
use crate::chat_template::ChatTemplate;

/// Longest SentencePiece token (in bytes) given merges; real vocabularies stay far below.
const MAX_MERGED_TOKEN_BYTES: usize = 1024;

type Metadata = HashMap<String, Value>;

const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

fn invalid(key: &str, reason: impl Into<String>) -> TokenizerError {
    TokenizerError::InvalidMetadata {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

fn as_i64(v: &Value) -> Option<i64> {
    Some(match v {
        Value::U8(x) => i64::from(*x),
        Value::I8(x) => i64::from(*x),
        Value::U16(x) => i64::from(*x),
        Value::I16(x) => i64::from(*x),
        Value::U32(x) => i64::from(*x),
        Value::I32(x) => i64::from(*x),
        Value::U64(x) => i64::try_from(*x).ok()?,
        Value::I64(x) => *x,
        _ => return None,
    })
}

fn get_str<'a>(md: &'a Metadata, key: &str) -> Result<Option<&'a str>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(key, "expected a string")),
    }
}

fn get_bool(md: &Metadata, key: &str) -> Result<Option<bool>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => as_i64(v)
            .map(|x| Some(x != 0))
            .ok_or_else(|| invalid(key, "expected a bool")),
    }
}

/// A token id; ids outside the vocabulary are ignored (llama.cpp warns and ignores them).
fn get_id(md: &Metadata, key: &str, n_vocab: usize) -> Result<Option<u32>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(v) => {
            let id = as_i64(v).ok_or_else(|| invalid(key, "expected an integer"))?;
            Ok(u32::try_from(id).ok().filter(|&id| (id as usize) < n_vocab))
        }
    }
}

fn get_array<'a>(md: &'a Metadata, key: &str) -> Result<Option<&'a [Value]>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(_) => Err(invalid(key, "expected an array")),
    }
}

fn get_strings(md: &Metadata, key: &str) -> Result<Option<Vec<String>>, TokenizerError> {
    let Some(arr) = get_array(md, key)? else {
        return Ok(None);
    };
    arr.iter()
        .map(|v| match v {
            Value::String(s) => Ok(s.clone()),
            _ => Err(invalid(key, "expected an array of strings")),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Token texts; empty ones are renamed `[EMPTY_i]` as llama.cpp does.
fn read_tokens(md: &Metadata) -> Result<Vec<String>, TokenizerError> {
    let key = "tokenizer.ggml.tokens";
    let mut tokens =
        get_strings(md, key)?.ok_or_else(|| TokenizerError::MissingMetadata(key.into()))?;
    if tokens.is_empty() {
        return Err(invalid(key, "empty vocabulary"));
    }
    for (i, t) in tokens.iter_mut().enumerate() {
        if t.is_empty() {
            *t = format!("[EMPTY_{i}]");
        }
    }
    Ok(tokens)
}

fn read_types(md: &Metadata, n: usize) -> Result<Vec<i64>, TokenizerError> {
    let key = "tokenizer.ggml.token_type";
    match get_array(md, key)? {
        None => Ok(vec![1; n]),
        Some(a) if a.len() == n => a
            .iter()
            .map(|v| as_i64(v).ok_or_else(|| invalid(key, "expected integers")))
            .collect(),
        Some(a) => Err(invalid(key, format!("{} types for {n} tokens", a.len()))),
    }
}

fn vocab_map(tokens: &[String]) -> Vocab {
    tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect()
}

pub(super) fn build(md: &Metadata) -> Result<Inner, TokenizerError> {
    let model_key = "tokenizer.ggml.model";
    let model =
        get_str(md, model_key)?.ok_or_else(|| TokenizerError::MissingMetadata(model_key.into()))?;
    let tokens = read_tokens(md)?;
    let types = read_types(md, tokens.len())?;
    let n = tokens.len();
    let pre = PreTokenizerKind::from_gguf_name(get_str(md, "tokenizer.ggml.pre")?);

    let (mut hf, default_add_bos) = match model {
        "gpt2" => (build_gpt2(md, &tokens, pre)?, pre.ignore_merges()),
        "llama" => (build_spm(md, &tokens, &types)?, true),
        other => return Err(TokenizerError::Unsupported(other.to_owned())),
    };

    let mut specials = Vec::new();
    let mut user_defined = Vec::new();
    for (tok, &ty) in tokens.iter().zip(&types) {
        match ty {
            TOKEN_TYPE_CONTROL => specials.push(AddedToken::from(tok.clone(), true)),
            TOKEN_TYPE_USER_DEFINED => {
                user_defined.push(AddedToken::from(tok.clone(), false).normalized(false))
            }
            _ => {}
        }
    }
    hf.add_special_tokens(&specials);
    hf.add_tokens(&user_defined);

    let bos_id = get_id(md, "tokenizer.ggml.bos_token_id", n)?;
    let mut eos_ids = Vec::new();
    for key in [
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id",
    ] {
        if let Some(id) = get_id(md, key, n)? {
            if !eos_ids.contains(&id) {
                eos_ids.push(id);
            }
        }
    }
    let add_bos = get_bool(md, "tokenizer.ggml.add_bos_token")?.unwrap_or(default_add_bos)
        && bos_id.is_some();
    let add_eos =
        get_bool(md, "tokenizer.ggml.add_eos_token")?.unwrap_or(false) && !eos_ids.is_empty();

    let chat_template = get_str(md, "tokenizer.chat_template")?.map(ChatTemplate::new);

    Ok(Inner {
        hf,
        n_vocab: n,
        bos_id,
        eos_ids,
        add_bos,
        add_eos,
        chat_template,
    })
}

fn build_gpt2(
    md: &Metadata,
    tokens: &[String],
    pre: PreTokenizerKind,
) -> Result<tokenizers::Tokenizer, TokenizerError> {
    let key = "tokenizer.ggml.merges";
    let raw = get_strings(md, key)?.ok_or_else(|| TokenizerError::MissingMetadata(key.into()))?;
    let vocab = vocab_map(tokens);
    // Keep only merges whose parts and result are in the vocabulary (tokenizers rejects
    // others; llama.cpp can never apply them). Rank order is preserved.
    let merges: Vec<(String, String)> = raw
        .iter()
        .filter_map(|m| m.split_once(' '))
        .filter(|(a, b)| {
            vocab.contains_key(*a)
                && vocab.contains_key(*b)
                && vocab.contains_key(&[*a, *b].concat())
        })
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(pre.ignore_merges())
        .build()
        .map_err(tk_err)?;
    let mut hf = tokenizers::Tokenizer::new(bpe);
    hf.with_pre_tokenizer(Some(pre.build()?));
    hf.with_decoder(Some(ByteLevel::new(false, false, false)));
    Ok(hf)
}

/// SentencePiece vocabulary as BPE: a pair (a, b) may merge when `a + b` is a token, with
/// priority given by that token's score (higher first), which is llama.cpp's SPM rule.
fn build_spm(
    md: &Metadata,
    tokens: &[String],
    types: &[i64],
) -> Result<tokenizers::Tokenizer, TokenizerError> {
    let key = "tokenizer.ggml.scores";
    let scores: Vec<f32> = match get_array(md, key)? {
        None => vec![0.0; tokens.len()],
        Some(a) if a.len() == tokens.len() => a
            .iter()
            .map(|v| match v {
                Value::F32(x) => Ok(*x),
                Value::F64(x) => Ok(*x as f32),
                _ => Err(invalid(key, "expected floats")),
            })
            .collect::<Result<_, _>>()?,
        Some(a) => {
            return Err(invalid(
                key,
                format!("{} scores for {} tokens", a.len(), tokens.len()),
            ))
        }
    };
    let vocab = vocab_map(tokens);
    let mut cands: Vec<(f32, u32, u32, u32)> = Vec::new();
    for (id, tok) in tokens.iter().enumerate() {
        // Only normal tokens are merge results. Finding a token's splits costs its
        // length squared: tokens far longer than any real vocabulary's are left without
        // merges (a crafted file could otherwise make loading take hours).
        if types[id] != 1 || tok.len() > MAX_MERGED_TOKEN_BYTES {
            continue;
        }
        for (k, _) in tok.char_indices().skip(1) {
            if let (Some(&l), Some(&r)) = (vocab.get(&tok[..k]), vocab.get(&tok[k..])) {
                cands.push((scores[id], id as u32, l, r));
            }
        }
    }
    cands.sort_by(|a, b| b.0.total_cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    let merges = cands
        .into_iter()
        .map(|(_, _, l, r)| (tokens[l as usize].clone(), tokens[r as usize].clone()))
        .collect();

    let unk = get_id(md, "tokenizer.ggml.unknown_token_id", tokens.len())?
        .map(|id| tokens[id as usize].clone());
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = unk {
        builder = builder.unk_token(unk);
    }
    let bpe = builder.build().map_err(tk_err)?;

    let add_space_prefix = get_bool(md, "tokenizer.ggml.add_space_prefix")?.unwrap_or(true);
    let replace = Replace::new(" ", "\u{2581}").map_err(tk_err)?;
    let mut norm: Vec<NormalizerWrapper> = Vec::new();
    if add_space_prefix {
        norm.push(Prepend::new("\u{2581}".to_owned()).into());
    }
    norm.push(replace.into());
    let mut dec: Vec<DecoderWrapper> = vec![
        Replace::new("\u{2581}", " ").map_err(tk_err)?.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if add_space_prefix {
        dec.push(Strip::new(' ', 1, 0).into());
    }
    let mut hf = tokenizers::Tokenizer::new(bpe);
    hf.with_normalizer(Some(NormSequence::new(norm)));
    hf.with_decoder(Some(DecoderSequence::new(dec)));
    Ok(hf)
}
