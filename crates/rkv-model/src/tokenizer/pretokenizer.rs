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
// Cased letters, written as escapes: the literal characters do not survive Unicode
// normalisation (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126 and U+212A would change).
const DEEPSEEK_LLM_LETTERS: &str = r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+";

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
                r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+",
                r"\s+$",
                r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
                r"\p{N}+",
            ],
            Self::DeepseekCoder => vec![
                "[\r\n]",
                r"\s?\p{L}+",
                r"\s?\p{P}+",
                r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
                r"\p{N}",
            ],
            Self::Deepseek3 => vec![
                r"\p{N}{1,3}",
                r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+",
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
            if let Err(e) = kind.build() {
                panic!("{kind:?}: {e}");
            }
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
