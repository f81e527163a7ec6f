//! Loads a tokenizer from a Hugging Face model directory: `tokenizer.json`, and when present
//! `tokenizer_config.json` (`bos_token`, `eos_token`, `add_bos_token`, `add_eos_token`,
//! `chat_template` as a string or a `[{name, template}]` list), `chat_template.jinja` /
//! `chat_template.json`, and `generation_config.json` (`eos_token_id`, int or list).
//!
//! Owns: reading and interpreting those files.
//! Must not know: GGUF, weights, model architectures.

use std::path::Path;

use serde_json::Value;

use super::{tk_err, Inner, TokenizerError};
use crate::chat_template::ChatTemplate;

fn read_bytes(path: &Path) -> Result<Vec<u8>, TokenizerError> {
    std::fs::read(path).map_err(|source| TokenizerError::Io {
        path: path.to_owned(),
        source,
    })
}

/// Reads a JSON file; `Ok(None)` when it does not exist.
fn read_json(path: &Path) -> Result<Option<Value>, TokenizerError> {
    if !path.exists() {
        return Ok(None);
    }
    let bytes = read_bytes(path)?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| TokenizerError::Parse {
            path: path.to_owned(),
            reason: e.to_string(),
        })
}

/// A token given as `"<s>"` or as an AddedToken object `{"content": "<s>", ...}`.
fn token_text(v: Option<&Value>) -> Option<&str> {
    match v? {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("content")?.as_str(),
        _ => None,
    }
}

/// Token ids given as a number or a list; ids that do not fit `u32` are dropped (a cast
/// would wrap them onto real tokens).
fn ids_of(v: Option<&Value>) -> Vec<u32> {
    let id = |x: &Value| x.as_u64().and_then(|x| u32::try_from(x).ok());
    match v {
        Some(n @ Value::Number(_)) => id(n).into_iter().collect(),
        Some(Value::Array(a)) => a.iter().filter_map(id).collect(),
        _ => Vec::new(),
    }
}

/// Checks what tokenizers would panic on later: every `TemplateProcessing` post-processor
/// in a `tokenizer.json` (nested ones too, and any object with its `single` or `pair`
/// fields, whatever its `type` says) must define each special token its templates name,
/// with as many ids as tokens; and a `Strip` decoder may strip only at the start.
/// The tokenizers crate checks this when a template is built in code but not when one is
/// read from JSON, and indexes its map with the names while encoding, which panics on a
/// missing one (found by fuzzing).
///
/// Only the `decoder` and `post_processor` fields are looked at: tokenizers reads decoders
/// and post-processors from nowhere else, and elsewhere a vocabulary holding the words
/// `content`, `start` and `stop` (most real ones) would look like a Strip decoder.
fn check_templates(doc: &Value) -> Result<(), String> {
    ["decoder", "post_processor"]
        .iter()
        .filter_map(|k| doc.get(k))
        .try_for_each(check_node)
}

fn check_node(v: &Value) -> Result<(), String> {
    match v {
        Value::Array(items) => items.iter().try_for_each(check_node),
        Value::Object(o) => {
            // tokenizers 0.22's Strip decoder indexes before the start of a token shorter
            // than `stop` and slices backwards when the cuts overlap (found by fuzzing);
            // real files strip only at the start. Matched by fields, as tokenizers does.
            if ["content", "start", "stop"]
                .iter()
                .all(|k| o.contains_key(*k))
                && o.get("stop").and_then(Value::as_u64) != Some(0)
            {
                return Err("a Strip decoder with a `stop` other than 0 is not supported".into());
            }
            // tokenizers matches post-processors by their fields, not by `type`.
            if o.contains_key("single") || o.contains_key("pair") {
                let specials = o.get("special_tokens").and_then(Value::as_object);
                for (name, t) in specials.into_iter().flatten() {
                    let len = |k: &str| t.get(k).and_then(Value::as_array).map(Vec::len);
                    if len("ids") != len("tokens") {
                        return Err(format!(
                            "post-processor special token `{name}` has ids and tokens of \
                             different lengths"
                        ));
                    }
                }
                for key in ["single", "pair"] {
                    for id in template_specials(o.get(key)) {
                        if !specials.is_some_and(|m| m.contains_key(&id)) {
                            return Err(format!(
                                "post-processor template `{key}` names special token `{id}`, \
                                 which its special_tokens do not define"
                            ));
                        }
                    }
                }
            }
            o.values().try_for_each(check_node)
        }
        _ => Ok(()),
    }
}

/// The special-token names of a template, given as pieces (`[{"SpecialToken": {"id":
/// ...}}, ...]`) or as a string (`"<s> $A:0"`).
fn template_specials(template: Option<&Value>) -> Vec<String> {
    match template {
        Some(Value::Array(pieces)) => pieces
            .iter()
            .filter_map(|p| p.get("SpecialToken")?.get("id")?.as_str())
            .map(str::to_owned)
            .collect(),
        Some(Value::String(s)) => s
            .split_whitespace()
            .filter(|p| !p.starts_with('$'))
            .map(|p| p.split_once(':').map_or(p, |(id, _)| id).to_owned())
            .collect(),
        _ => Vec::new(),
    }
}

pub(super) fn load(dir: &Path) -> Result<Inner, TokenizerError> {
    let tok_path = dir.join("tokenizer.json");
    let tokenizer_json = read_bytes(&tok_path)?;
    let config = read_json(&dir.join("tokenizer_config.json"))?.unwrap_or(Value::Null);
    let gen = read_json(&dir.join("generation_config.json"))?.unwrap_or(Value::Null);
    let mut template_src = config.get("chat_template").cloned();
    if template_src.is_none() {
        let jinja = dir.join("chat_template.jinja");
        if jinja.exists() {
            let bytes = read_bytes(&jinja)?;
            template_src = Some(Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        } else if let Some(v) = read_json(&dir.join("chat_template.json"))? {
            template_src = v.get("chat_template").cloned();
        }
    }
    from_parts(&tok_path, &tokenizer_json, &config, &gen, template_src)
}

/// Builds the tokenizer from the files' contents: `tokenizer.json` (named `tok_path` in
/// errors), the parsed `tokenizer_config.json` and `generation_config.json` (`Null` when
/// absent) and the chat template's JSON value, if any.
pub(super) fn from_parts(
    tok_path: &Path,
    tokenizer_json: &[u8],
    config: &Value,
    gen: &Value,
    template_src: Option<Value>,
) -> Result<Inner, TokenizerError> {
    let parse_error = |reason: String| TokenizerError::Parse {
        path: tok_path.to_path_buf(),
        reason,
    };
    // The tokenizers crate panics (an `expect` in its decoder's deserializer) on some
    // malformed JSON inside `"decoder"`, such as a `\u` escape of a lone surrogate (found by
    // fuzzing): a document that is not JSON at all is refused here first.
    let json: Value =
        serde_json::from_slice(tokenizer_json).map_err(|e| parse_error(e.to_string()))?;
    check_templates(&json).map_err(parse_error)?;
    let hf = tokenizers::Tokenizer::from_bytes(tokenizer_json)
        .map_err(|e| parse_error(e.to_string()))?;
    let n_vocab = hf.get_vocab_size(true);
    let id_of = |v: Option<&Value>| token_text(v).and_then(|t| hf.token_to_id(t));

    let bos_id =
        id_of(config.get("bos_token")).or_else(|| ids_of(gen.get("bos_token_id")).first().copied());
    let mut eos_ids: Vec<u32> = id_of(config.get("eos_token")).into_iter().collect();
    for id in ids_of(gen.get("eos_token_id")) {
        if !eos_ids.contains(&id) {
            eos_ids.push(id);
        }
    }
    eos_ids.retain(|&id| (id as usize) < n_vocab);

    // Without an explicit flag, follow what the tokenizer.json post-processor does.
    let with = hf.encode_fast("a", true).map_err(tk_err)?;
    let without = hf.encode_fast("a", false).map_err(tk_err)?;
    let (with, without) = (with.get_ids(), without.get_ids());
    let grew = with.len() > without.len();
    let add_bos = match config.get("add_bos_token").and_then(Value::as_bool) {
        Some(b) => b,
        None => grew && bos_id.is_some() && with.first() == bos_id.as_ref(),
    } && bos_id.is_some();
    let add_eos = match config.get("add_eos_token").and_then(Value::as_bool) {
        Some(b) => b,
        None => grew && !eos_ids.is_empty() && with.last() == eos_ids.first(),
    } && !eos_ids.is_empty();

    let chat_template = match template_src {
        None | Some(Value::Null) => None,
        Some(v) => Some(ChatTemplate::from_json(&v)),
    };

    Ok(Inner {
        hf,
        n_vocab,
        bos_id,
        eos_ids,
        add_bos,
        add_eos,
        chat_template,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Template post-processors naming undefined special tokens, or defining one with
    /// more ids than tokens, are refused (nested in a sequence too); sound ones pass.
    #[test]
    fn template_post_processors_are_checked() {
        let tp = |single: Value, specials: Value| {
            serde_json::json!({"post_processor": {"type": "Sequence", "processors": [
                {"type": "TemplateProcessing", "single": single, "pair": "$A $B",
                 "special_tokens": specials}]}})
        };
        let s = serde_json::json!({"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}});
        let pieces = serde_json::json!([{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                        {"Sequence": {"id": "A", "type_id": 0}}]);
        assert_eq!(check_templates(&tp(pieces.clone(), s.clone())), Ok(()));
        assert_eq!(
            check_templates(&tp(serde_json::json!("<s>:0 $A"), s.clone())),
            Ok(())
        );
        let err = check_templates(&tp(serde_json::json!("<x> $A"), s.clone())).unwrap_err();
        assert!(err.contains("`<x>`"), "{err}");
        // Found by fuzzing: a misspelt type still deserializes as a template.
        let mut odd = tp(serde_json::json!("<x> $A"), s);
        odd["post_processor"]["processors"][0]["type"] = "TemplateProcessnormaling".into();
        assert!(check_templates(&odd).is_err());
        let strip = |stop: u64| {
            serde_json::json!({"decoder": {"type": "Sequence", "decoders": [
                {"type": "Strip", "content": " ", "start": 1, "stop": stop}]}})
        };
        assert_eq!(check_templates(&strip(0)), Ok(()));
        let err = check_templates(&strip(1)).unwrap_err();
        assert!(err.contains("Strip"), "{err}");
        let uneven = serde_json::json!({"<s>": {"id": "<s>", "ids": [1, 2], "tokens": ["<s>"]}});
        let err = check_templates(&tp(pieces, uneven)).unwrap_err();
        assert!(err.contains("different lengths"), "{err}");
    }

    /// A vocabulary is data: one with the words of a Strip decoder's or a template's
    /// fields (SmolLM2's and Qwen2.5's have them) is not checked as one.
    #[test]
    fn vocabulary_words_are_not_decoders() {
        let vocab = serde_json::json!({"content": 5, "start": 6, "stop": 7, "single": 8,
                                       "pair": 9, "special_tokens": 10});
        let doc = serde_json::json!({"model": {"type": "BPE", "vocab": vocab},
                                     "decoder": null, "post_processor": null});
        assert_eq!(check_templates(&doc), Ok(()));
    }

    #[test]
    fn ids_that_do_not_fit_u32_are_dropped() {
        let v = serde_json::json!([2, 1099511627776u64, 7]);
        assert_eq!(ids_of(Some(&v)), vec![2, 7]);
        let big = serde_json::json!(4294967296u64);
        assert!(ids_of(Some(&big)).is_empty());
        assert_eq!(ids_of(Some(&serde_json::json!(5))), vec![5]);
    }
}
