//! Pre-tokenizer split regexes of byte-level BPE vocabularies, chosen by the GGUF
//! `tokenizer.ggml.pre` name the way llama.cpp's `llama-vocab.cpp` does.
//!
//! Owns: the name -> regex-list table and building the equivalent `tokenizers` pre-tokenizer
//! (each regex splits every piece further, keeping matches and gaps, as llama.cpp's
//! `unicode_regex_split` does; then GPT-2 byte mapping).
//! Must not know: vocabularies, merges, GGUF parsing, special tokens.

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

use super::TokenizerError;

/// The pre-tokenizer families supported (llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizerKind {
    /// llama.cpp's fallback for unknown names.
    Default,
    Gpt2,
    Llama3,
    /// The Llama 3 regex without `ignore_merges` (DBRX, Smaug).
    Dbrx,
    /// Also StarCoder, Refact, Command-R, CodeShell, EXAONE, Minerva.
    Smollm,
    /// Also StableLM2, DeepSeek-R1-Qwen, Megrez, Hunyuan.
    Qwen2,
    DeepseekLlm,
    DeepseekCoder,
    Deepseek3,
    Falcon,
    Gpt4o,
    ChatGlm4,
}

const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const DEEPSEEK_LLM_LETTERS: &str = r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";

impl PreTokenizerKind {
    /// Maps a `tokenizer.ggml.pre` value; unknown or missing names give `Default`, as in
    /// llama.cpp.
    pub fn from_gguf_name(name: Option<&str>) -> Self {
        match name.unwrap_or("default") {
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" => Self::Llama3,
            "dbrx" | "smaug-bpe" => Self::Dbrx,
            "deepseek-llm" => Self::DeepseekLlm,
            "deepseek-coder" => Self::DeepseekCoder,
            "deepseek-v3" => Self::Deepseek3,
            "falcon" => Self::Falcon,
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "a.x-4.0" | "mellum" | "jina-v1-en" | "jina-v2-code"
            | "roberta-bpe" | "mpt" | "olmo" | "jais" | "exaone4" | "trillion"
            | "granite-docling" => Self::Gpt2,
            "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone"
            | "minerva-7b" => Self::Smollm,
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "stablelm2" | "megrez" | "hunyuan" => {
                Self::Qwen2
            }
            "gpt-4o" | "llama4" | "minimax-m2" => Self::Gpt4o,
            "glm4" | "chatglm-bpe" => Self::ChatGlm4,
            _ => Self::Default,
        }
    }

    /// Whether llama.cpp looks a whole pre-token up in the vocabulary before merging.
    pub fn ignore_merges(self) -> bool {
        matches!(self, Self::Llama3)
    }

    /// The regexes applied one after the other (llama.cpp's `regex_exprs`).
    pub fn regexes(self) -> Vec<&'static str> {
        match self {
            Self::Llama3 | Self::Dbrx | Self::ChatGlm4 => vec![LLAMA3],
            Self::Qwen2 => vec![QWEN2],
            Self::Gpt2 => vec![GPT2],
            Self::Smollm => vec![r"\p{N}", GPT2],
            Self::Gpt4o => vec![GPT4O],
            Self::Falcon => vec![r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"],
            Self::DeepseekLlm => vec![
                "[\r\n]",
                DEEPSEEK_LLM_LETTERS,
                r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
                r"\s+$",
                "[一-龥ࠀ-一가-퟿]+",
                r"\p{N}+",
            ],
            Self::DeepseekCoder => vec![
                "[\r\n]",
                r"\s?\p{L}+",
                r"\s?\p{P}+",
                "[一-龥ࠀ-一가-퟿]+",
                r"\p{N}",
            ],
            Self::Deepseek3 => vec![
                r"\p{N}{1,3}",
                "[一-龥぀-ゟ゠-ヿ]+",
                r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
            ],
            Self::Default => vec![r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
        }
    }

    /// The `tokenizers` pre-tokenizer: the regex splits, then GPT-2 byte mapping.
    pub fn build(self) -> Result<PreTokenizerWrapper, TokenizerError> {
        let mut steps: Vec<PreTokenizerWrapper> = Vec::new();
        for re in self.regexes() {
            let split = Split::new(
                SplitPattern::Regex(re.to_owned()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| TokenizerError::Tokenizers(format!("pre-tokenizer regex {re:?}: {e}")))?;
            steps.push(split.into());
        }
        steps.push(ByteLevel::new(false, false, false).into());
        Ok(Sequence::new(steps).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_compiles() {
        for kind in [
            PreTokenizerKind::Default,
            PreTokenizerKind::Gpt2,
            PreTokenizerKind::Llama3,
            PreTokenizerKind::Dbrx,
            PreTokenizerKind::Smollm,
            PreTokenizerKind::Qwen2,
            PreTokenizerKind::DeepseekLlm,
            PreTokenizerKind::DeepseekCoder,
            PreTokenizerKind::Deepseek3,
            PreTokenizerKind::Falcon,
            PreTokenizerKind::Gpt4o,
            PreTokenizerKind::ChatGlm4,
        ] {
            assert!(kind.build().is_ok(), "{kind:?}");
        }
    }

    #[test]
    fn names_map_like_llama_cpp() {
        use PreTokenizerKind as K;
        assert_eq!(K::from_gguf_name(Some("smollm")), K::Smollm);
        assert_eq!(K::from_gguf_name(Some("deepseek-r1-qwen")), K::Qwen2);
        assert_eq!(K::from_gguf_name(Some("llama-bpe")), K::Llama3);
        assert_eq!(K::from_gguf_name(Some("nonsense")), K::Default);
        assert_eq!(K::from_gguf_name(None), K::Default);
    }
}
