//! Writes a tokenizer as a Hugging Face tokenizer directory that transformers'
//! `AutoTokenizer.from_pretrained(dir)` loads offline and [`Tokenizer::from_hf_dir`] reads
//! back: `tokenizer.json` (the tokenizers crate's own serialisation), `tokenizer_config.json`
//! (special tokens, BOS/EOS policy, chat template, `model_max_length`),
//! `special_tokens_map.json` and `generation_config.json` (every EOS id, which a
//! tokenizer config can name only one of).
//!
//! `tokenizer(text)` in transformers (`add_special_tokens=True`) gives the ids of
//! [`Tokenizer::encode`], `add_special_tokens=False` those of [`Tokenizer::encode_raw`]:
//! when the BOS/EOS policy differs from what `tokenizer.json`'s post-processor adds, the
//! export replaces the post-processor with one that adds exactly BOS/EOS. One difference
//! stays: rkv does not add BOS to a text that already starts with it, transformers does.
//!
//! Where it writes: the directory is created when missing; an existing one must be empty
//! or hold only files of an earlier export ([`EXPORT_FILES`]), which are overwritten.
//! Anything else there (a model directory's weights, `config.json`, ...) is refused
//! before a file is written.
//!
//! Owns: the exported file set, their contents and the rule of where it may write.
//! Must not know: GGUF, weights, model architectures, the command line.

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::{tk_err, Tokenizer, TokenizerError};

/// The files an export writes, and the only ones a directory may hold to be written to.
pub const EXPORT_FILES: [&str; 4] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
];

fn refuse(dir: &Path, reason: impl Into<String>) -> TokenizerError {
    TokenizerError::Export {
        path: dir.to_owned(),
        reason: reason.into(),
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> TokenizerError + '_ {
    move |source| TokenizerError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Checks that `dir` is missing, empty, or holds only files of an earlier export.
fn check_target(dir: &Path) -> Result<(), TokenizerError> {
    let meta = match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        other => other.map_err(io_error(dir))?,
    };
    if !dir.is_dir() {
        let what = if meta.is_file() {
            "a file"
        } else {
            "not a directory"
        };
        return Err(refuse(dir, format!("it is {what}")));
    }
    for entry in std::fs::read_dir(dir).map_err(io_error(dir))? {
        let entry = entry.map_err(io_error(dir))?;
        let name = entry.file_name();
        let known = name.to_str().is_some_and(|n| EXPORT_FILES.contains(&n));
        if !known || !entry.path().is_file() {
            return Err(refuse(
                dir,
                format!(
                    "the directory holds {:?}, which a tokenizer export does not write (an \
                     export goes to a new or empty directory, or over an earlier export)",
                    name.to_string_lossy()
                ),
            ));
        }
    }
    Ok(())
}

impl Tokenizer {
    /// Writes the tokenizer to `dir` as a Hugging Face tokenizer directory (see the module
    /// documentation for the files and the directory rule); `model_max_length` is the
    /// model's context length, when known. Returns the paths written.
    ///
    /// A model whose chat template does not compile in rkv is refused: the export would
    /// not render chats as rkv does.
    pub fn export_hf(
        &self,
        dir: &Path,
        model_max_length: Option<usize>,
    ) -> Result<Vec<PathBuf>, TokenizerError> {
        check_target(dir)?;
        let contents = [
            self.tokenizer_json()?,
            pretty(&self.tokenizer_config(model_max_length)?)?,
            pretty(&self.special_tokens_map())?,
            pretty(&self.generation_config())?,
        ];
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        let mut written = Vec::new();
        for (name, text) in EXPORT_FILES.iter().zip(contents) {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(io_error(&path))?;
            written.push(path);
        }
        Ok(written)
    }

    /// `tokenizer.json`, with a post-processor that adds BOS/EOS as [`Tokenizer::encode`]
    /// does, checked by encoding a probe both ways.
    fn tokenizer_json(&self) -> Result<String, TokenizerError> {
        let inner = &self.inner;
        let text = inner.hf.to_string(true).map_err(tk_err)?;
        if self.post_processor_agrees(&inner.hf)? {
            return Ok(text);
        }
        let mut doc: Value = serde_json::from_str(&text)
            .map_err(|e| TokenizerError::Tokenizers(format!("tokenizer.json: {e}")))?;
        doc["post_processor"] = self.bos_eos_processor();
        let text = serde_json::to_string_pretty(&doc)
            .map_err(|e| TokenizerError::Tokenizers(format!("tokenizer.json: {e}")))?;
        let rebuilt = tokenizers::Tokenizer::from_bytes(text.as_bytes()).map_err(tk_err)?;
        if !self.post_processor_agrees(&rebuilt)? {
            return Err(TokenizerError::Tokenizers(
                "the exported post-processor does not add BOS/EOS as rkv does".into(),
            ));
        }
        Ok(text)
    }

    /// Whether `hf` with its special tokens encodes a probe as [`Tokenizer::encode`] does.
    fn post_processor_agrees(&self, hf: &tokenizers::Tokenizer) -> Result<bool, TokenizerError> {
        let probe = "a";
        let theirs = hf.encode_fast(probe, true).map_err(tk_err)?;
        Ok(theirs.get_ids() == self.encode(probe)?.as_slice())
    }

    /// A `TemplateProcessing` post-processor adding BOS and/or EOS (each only when the
    /// policy adds it; with neither it adds nothing), in the layout transformers' Llama
    /// tokenizer builds for a pair.
    fn bos_eos_processor(&self) -> Value {
        let inner = &self.inner;
        let named = |id: Option<u32>| id.and_then(|id| Some((self.token_str(id)?, id)));
        let bos = named(inner.bos_id).filter(|_| inner.add_bos);
        let eos = named(inner.eos_ids.first().copied()).filter(|_| inner.add_eos);
        let special =
            |name: &str, type_id: u32| json!({"SpecialToken": {"id": name, "type_id": type_id}});
        let template = |seq: &str, type_id: u32| {
            let mut pieces = Vec::new();
            pieces.extend(bos.iter().map(|(t, _)| special(t, type_id)));
            pieces.push(json!({"Sequence": {"id": seq, "type_id": type_id}}));
            pieces.extend(eos.iter().map(|(t, _)| special(t, type_id)));
            pieces
        };
        let single = template("A", 0);
        let mut pair = single.clone();
        pair.extend(template("B", 1));
        let mut specials = Map::new();
        for (t, id) in bos.iter().chain(eos.iter()) {
            specials.insert(t.clone(), json!({"id": t, "ids": [id], "tokens": [t]}));
        }
        json!({"type": "TemplateProcessing", "single": single, "pair": pair,
               "special_tokens": specials})
    }

    fn bos_eos_strings(&self) -> (Option<String>, Option<String>) {
        let inner = &self.inner;
        let bos = inner.bos_id.and_then(|id| self.token_str(id));
        let eos = inner.eos_ids.first().and_then(|&id| self.token_str(id));
        (bos, eos)
    }

    fn tokenizer_config(&self, model_max_length: Option<usize>) -> Result<Value, TokenizerError> {
        let inner = &self.inner;
        let (bos, eos) = self.bos_eos_strings();
        let mut added: Vec<_> = inner.hf.get_added_tokens_decoder().into_iter().collect();
        added.sort_by_key(|(id, _)| *id);
        let decoder: Map<String, Value> = added
            .into_iter()
            .map(|(id, t)| {
                let v = json!({"content": t.content, "lstrip": t.lstrip,
                    "normalized": t.normalized, "rstrip": t.rstrip,
                    "single_word": t.single_word, "special": t.special});
                (id.to_string(), v)
            })
            .collect();
        let mut config = json!({
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": bos,
            "eos_token": eos,
            "add_bos_token": inner.add_bos,
            "add_eos_token": inner.add_eos,
            // transformers' default would rewrite " ." as "." when decoding.
            "clean_up_tokenization_spaces": false,
            "added_tokens_decoder": decoder,
        });
        if let Some(n) = model_max_length {
            config["model_max_length"] = json!(n);
        }
        match &inner.chat_template {
            None => {}
            Some(Ok(t)) => config["chat_template"] = json!(t.source()),
            Some(Err(e)) => return Err(e.clone().into()),
        }
        Ok(config)
    }

    fn special_tokens_map(&self) -> Value {
        let (bos, eos) = self.bos_eos_strings();
        let mut map = Map::new();
        if let Some(b) = bos {
            map.insert("bos_token".into(), json!(b));
        }
        if let Some(e) = eos {
            map.insert("eos_token".into(), json!(e));
        }
        Value::Object(map)
    }

    /// Every id that ends generation (transformers' `generation_config.json`), which
    /// [`Tokenizer::from_hf_dir`] reads back.
    fn generation_config(&self) -> Value {
        json!({"bos_token_id": self.inner.bos_id, "eos_token_id": self.inner.eos_ids})
    }
}

fn pretty(v: &Value) -> Result<String, TokenizerError> {
    serde_json::to_string_pretty(v).map_err(|e| TokenizerError::Tokenizers(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_rule() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("a/b");
        assert!(check_target(&missing).is_ok());
        let dir = tmp.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        assert!(check_target(&dir).is_ok());
        for name in EXPORT_FILES {
            std::fs::write(dir.join(name), "{}").unwrap();
        }
        assert!(check_target(&dir).is_ok());
        std::fs::write(dir.join("config.json"), "{}").unwrap();
        let err = check_target(&dir).unwrap_err().to_string();
        assert!(err.contains("\"config.json\""), "{err}");
        let file = tmp.path().join("f");
        std::fs::write(&file, "").unwrap();
        let err = check_target(&file).unwrap_err().to_string();
        assert!(err.contains("a file"), "{err}");
    }
}
