//! Which ggml type llama.cpp's `llama-quantize` gives each tensor of a dense model for a
//! file type: its `llama_tensor_get_type` for the mixtures Q4_K_M and Q5_K_M and the
//! plain Q6_K and Q8_0, as of llama.cpp `0c1e57098`; and the dense F16 and BF16 files
//! (every matrix in that type, as `llama-quantize … F16` writes them).
//!
//! - The output head (`output.weight`, or a tied `token_embd.weight`): Q6_K, Q8_0 in a
//!   Q8_0 file.
//! - `attn_v` and `ffn_down` in the layers `use_more_bits` picks (the first and last
//!   eighth, and every third between): Q6_K in Q4_K_M and Q5_K_M.
//! - Everything else of two or more dimensions: the file type's base (Q4_K, Q5_K, Q6_K,
//!   Q8_0); vectors (norms, biases) stay as stored.
//! - A K-quant that does not fit the rows (a row length not a multiple of 256, as
//!   SmolLM2's 576) falls back as llama.cpp's does: Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to
//!   Q8_0.
//!
//! Must not know: how tensors are stored or quantised, how a model runs.

use candle_core::quantized::GgmlDType;

use crate::error::{ModelError, Result};

/// A llama.cpp file type (`llama_ftype`) this module lays out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    Q4KM,
    Q5KM,
    Q6K,
    Q8_0,
    F16,
    Bf16,
}

/// Every file type, with its `llama-quantize` name.
pub const FILE_TYPES: [(FileType, &str); 6] = [
    (FileType::Q4KM, "q4_k_m"),
    (FileType::Q5KM, "q5_k_m"),
    (FileType::Q6K, "q6_k"),
    (FileType::Q8_0, "q8_0"),
    (FileType::F16, "f16"),
    (FileType::Bf16, "bf16"),
];

impl FileType {
    /// The file type called `name` (`q4_k_m`, `Q4_K_M`, ...), or an error naming the known
    /// ones.
    pub fn by_name(name: &str) -> Result<Self> {
        let lower = name.to_ascii_lowercase();
        FILE_TYPES
            .iter()
            .find(|(_, n)| *n == lower)
            .map(|(t, _)| *t)
            .ok_or_else(|| {
                let known: Vec<&str> = FILE_TYPES.iter().map(|(_, n)| *n).collect();
                ModelError::BadConfig(format!(
                    "unknown file type `{name}` (known: {})",
                    known.join(", ")
                ))
            })
    }

    /// The `llama-quantize` name.
    pub fn name(self) -> &'static str {
        FILE_TYPES
            .iter()
            .find(|(t, _)| *t == self)
            .map_or("?", |(_, n)| n)
    }

    /// llama.cpp's `general.file_type` code.
    pub fn gguf_code(self) -> u32 {
        match self {
            Self::Q4KM => 15,
            Self::Q5KM => 17,
            Self::Q6K => 18,
            Self::Q8_0 => 7,
            Self::F16 => 1,
            Self::Bf16 => 32,
        }
    }

    fn base(self) -> GgmlDType {
        match self {
            Self::Q4KM => GgmlDType::Q4K,
            Self::Q5KM => GgmlDType::Q5K,
            Self::Q6K => GgmlDType::Q6K,
            Self::Q8_0 => GgmlDType::Q8_0,
            Self::F16 => GgmlDType::F16,
            Self::Bf16 => GgmlDType::BF16,
        }
    }
}

/// llama.cpp's `use_more_bits(i_layer, n_layers)` of `llama_tensor_get_type`.
pub fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The layer of a `blk.{i}.…` tensor name.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// The type llama.cpp gives tensor `name` of shape `dims` (`[rows, cols]`, or one
/// dimension) in a file of type `ft`, for a model of `n_layers` layers with or without an
/// untied `output.weight`. `None`: the tensor is kept as stored (a vector).
pub fn target_type(
    ft: FileType,
    name: &str,
    dims: &[usize],
    n_layers: usize,
    has_output: bool,
) -> Option<GgmlDType> {
    if dims.len() < 2 {
        return None;
    }
    let cols = dims[dims.len() - 1];
    let head = name == "output.weight" || (!has_output && name == "token_embd.weight");
    let more = |kind: &str| {
        name.ends_with(kind)
            && matches!(ft, FileType::Q4KM | FileType::Q5KM)
            && layer_of(name).is_some_and(|i| use_more_bits(i, n_layers))
    };
    let t = if matches!(ft, FileType::F16 | FileType::Bf16) {
        ft.base()
    } else if head {
        match ft {
            FileType::Q8_0 => GgmlDType::Q8_0,
            _ => GgmlDType::Q6K,
        }
    } else if more(".attn_v.weight") || more(".ffn_down.weight") {
        GgmlDType::Q6K
    } else {
        ft.base()
    };
    Some(fallback(t, cols))
}

/// llama.cpp's fallback for a K-quant whose super-block does not divide `cols`.
fn fallback(t: GgmlDType, cols: usize) -> GgmlDType {
    if cols.is_multiple_of(t.block_size()) {
        return t;
    }
    match t {
        GgmlDType::Q4K => GgmlDType::Q5_0,
        GgmlDType::Q5K => GgmlDType::Q5_1,
        _ => GgmlDType::Q8_0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default model's layout under `llama-quantize --allow-requantize … Q4_K_M` (its
    /// log, llama.cpp `0c1e57098`): 576-wide rows fall back; only `ffn_down` (1536 wide)
    /// gets K-quants; the tied head stays Q8_0.
    #[test]
    fn smollm2_q4_k_m_follows_llama_quantize() {
        let t = |name: &str, dims: &[usize]| target_type(FileType::Q4KM, name, dims, 30, false);
        assert_eq!(t("token_embd.weight", &[49152, 576]), Some(GgmlDType::Q8_0));
        assert_eq!(t("blk.3.attn_q.weight", &[576, 576]), Some(GgmlDType::Q5_0));
        assert_eq!(t("blk.0.attn_v.weight", &[192, 576]), Some(GgmlDType::Q8_0));
        assert_eq!(t("blk.3.attn_v.weight", &[192, 576]), Some(GgmlDType::Q5_0));
        assert_eq!(
            t("blk.0.ffn_down.weight", &[576, 1536]),
            Some(GgmlDType::Q6K)
        );
        assert_eq!(
            t("blk.3.ffn_down.weight", &[576, 1536]),
            Some(GgmlDType::Q4K)
        );
        assert_eq!(t("blk.3.attn_norm.weight", &[576]), None);
        // llama-quantize's log: 14 layers of attn_v at Q8_0 and of ffn_down at Q6_K.
        let more = (0..30).filter(|&i| use_more_bits(i, 30)).count();
        assert_eq!(more, 14);
        let q5 = |name: &str| target_type(FileType::Q5KM, name, &[576, 576], 30, false);
        assert_eq!(q5("blk.4.ffn_up.weight"), Some(GgmlDType::Q5_1));
    }

    #[test]
    fn dense_files_hold_every_matrix_in_their_type() {
        for (ft, ty) in [
            (FileType::F16, GgmlDType::F16),
            (FileType::Bf16, GgmlDType::BF16),
        ] {
            let t = |name: &str, dims: &[usize]| target_type(ft, name, dims, 30, false);
            assert_eq!(t("token_embd.weight", &[49152, 576]), Some(ty));
            assert_eq!(t("blk.0.attn_v.weight", &[192, 576]), Some(ty));
            assert_eq!(t("blk.0.ffn_down.weight", &[576, 1536]), Some(ty));
            assert_eq!(t("blk.3.attn_norm.weight", &[576]), None);
        }
    }

    #[test]
    fn file_types_parse_by_llama_quantize_name() {
        for (t, n) in FILE_TYPES {
            assert_eq!(FileType::by_name(n).unwrap(), t);
            assert_eq!(FileType::by_name(&n.to_uppercase()).unwrap(), t);
            assert_eq!(t.name(), n);
        }
        let e = FileType::by_name("q3_k_xl").unwrap_err().to_string();
        assert!(e.contains("q4_k_m") && e.contains("q8_0"), "{e}");
    }
}
