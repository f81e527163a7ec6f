//! The model's vocabulary as llguidance sees it: every token id's bytes in a token trie,
//! control tokens marked so that no grammar lets them stand for text, and tokenizing
//! through the model's own tokenizer.
//!
//! `toktrie_hf_tokenizers` does this for a `tokenizers::Tokenizer`, but its releases
//! (1.9) are built against tokenizers 0.21 while rkv uses 0.22, so the two types do not
//! meet; rkv's tokenizer already knows each token's bytes ([`Tokenizer::token_bytes`]),
//! which is the part that crate adds.
//!
//! Owns: building the trie. Must not know: grammars, sampling, sequences.

use std::sync::Arc;

use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv, INVALID_TOKEN};
use rkv_model::Tokenizer;

/// The token environment of one model: its tokenizer and the trie of its `n_vocab`
/// logits (ids past the tokenizer's vocabulary, the padding of an embedding matrix,
/// are special tokens nothing generates).
pub struct RkvTokEnv {
    tokenizer: Tokenizer,
    trie: TokTrie,
    /// Whether the tokenizer spells text back byte for byte (no space put in front, as
    /// SentencePiece-style tokenizers do): only then may llguidance tokenize the bytes a
    /// grammar forces and offer those tokens alone.
    canonical: bool,
}

impl RkvTokEnv {
    /// Builds the trie of `tokenizer` over `n_vocab` ids (the model's logits; at least
    /// the tokenizer's vocabulary). Panics inside the trie builder become errors.
    pub fn build(tokenizer: &Tokenizer, n_vocab: usize) -> Result<TokEnv, String> {
        if n_vocab < tokenizer.vocab_size() {
            return Err(format!(
                "the model has {n_vocab} logits for a vocabulary of {} tokens",
                tokenizer.vocab_size()
            ));
        }
        let n = u32::try_from(n_vocab).map_err(|_| "vocabulary too large".to_string())?;
        let words = token_words(tokenizer, n_vocab);
        let eos = tokenizer.eos_token_ids();
        let info = TokRxInfo::new(n, eos.first().copied().unwrap_or(INVALID_TOKEN));
        let trie = std::panic::catch_unwind(|| {
            let t = TokTrie::from(&info, &words);
            if eos.len() > 1 {
                t.with_eos_tokens(eos)
            } else {
                t
            }
        })
        .map_err(|_| "the token trie could not be built from this vocabulary".to_string())?;
        let probe = "{\"a\": [1, \"b c\"]}";
        let canonical = tokenizer.encode_raw(probe).is_ok_and(|ids| {
            ids.iter()
                .flat_map(|&id| tokenizer.token_bytes(id))
                .eq(probe.bytes())
        });
        Ok(Arc::new(RkvTokEnv {
            tokenizer: tokenizer.clone(),
            trie,
            canonical,
        }))
    }
}

/// Each id's bytes as the trie takes them: added tokens that are control tokens, or that
/// look like one (`<...>`, as `toktrie_hf_tokenizers` decides), and ids the tokenizer
/// does not know get the special-token marker byte first, so they never spell text.
fn token_words(tokenizer: &Tokenizer, n_vocab: usize) -> Vec<Vec<u8>> {
    let mut special = vec![false; n_vocab];
    for (id, is_special) in tokenizer.added_tokens() {
        let looks_special = tokenizer
            .token_str(id)
            .is_some_and(|s| s.len() > 2 && s.starts_with('<') && s.ends_with('>'));
        if let Some(x) = special.get_mut(id as usize) {
            *x = is_special || looks_special;
        }
    }
    (0..n_vocab)
        .map(|id| {
            let name = tokenizer.token_str(id as u32);
            match name {
                Some(name) if special[id] => marked(name.as_bytes()),
                Some(_) => tokenizer.token_bytes(id as u32),
                None => marked(format!("<[{id}]>").as_bytes()),
            }
        })
        .collect()
}

fn marked(name: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(name.len() + 1);
    v.push(TokTrie::SPECIAL_TOKEN_MARKER);
    v.extend_from_slice(name);
    v
}

impl TokenizerEnv for RkvTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Text through the model's tokenizer; bytes that are not UTF-8 greedily through the
    /// trie. (rkv's tokenizer parses control tokens written in the text, as the Hugging
    /// Face one does for `toktrie_hf_tokenizers`.)
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.tokenize_with_greedy_fallback(s, |text| {
            self.tokenizer.encode_raw(text).unwrap_or_else(|_| {
                // The tokenizer refused the text: the trie's greedy split still
                // spells the same bytes.
                self.trie.greedy_tokenize(text.as_bytes())
            })
        })
    }

    fn tokenize_is_canonical(&self) -> bool {
        self.canonical
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A WordLevel tokenizer: `<unk> <s> </s>` (control tokens), then `a`, `b`, `ab`.
    fn tokenizer() -> Tokenizer {
        let specials = ["<unk>", "<s>", "</s>"];
        let added: Vec<_> = specials
            .iter()
            .enumerate()
            .map(|(i, s)| {
                json!({"id": i, "content": s, "single_word": false, "lstrip": false,
                                 "rstrip": false, "normalized": false, "special": true})
            })
            .collect();
        let tok = json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
            "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
            "post_processor": null, "decoder": null,
            "model": {"type": "WordLevel", "unk_token": "<unk>",
                      "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4, "ab": 5}},
        });
        let label = std::path::Path::new("tiny");
        Tokenizer::from_hf_json(label, tok.to_string().as_bytes()).expect("tokenizer")
    }

    #[test]
    fn control_tokens_and_padding_ids_never_spell_text() {
        let t = tokenizer();
        let words = token_words(&t, 8);
        assert_eq!(words.len(), 8);
        for id in [0, 1, 2, 6, 7] {
            assert_eq!(words[id][0], TokTrie::SPECIAL_TOKEN_MARKER, "id {id}");
        }
        assert_eq!(
            &words[3..6],
            &[b"a".to_vec(), b"b".to_vec(), b"ab".to_vec()]
        );
        let env = RkvTokEnv::build(&t, 8).expect("env");
        let trie = env.tok_trie();
        assert_eq!(trie.vocab_size(), 8);
        assert_eq!(trie.token_id(b"ab"), Some(5));
        assert!(trie.is_special_token(2) && !trie.is_special_token(5));
        assert_eq!(env.tokenize_bytes(b"ab"), vec![5]);
        // `{` is `<unk>` here: the text does not come back, so nothing is forced.
        assert!(!env.tokenize_is_canonical());
        // Fewer logits than tokens cannot be masked.
        assert!(RkvTokEnv::build(&t, 4).is_err());
    }
}
