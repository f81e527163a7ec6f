//! Requantising a GGUF model into another llama.cpp file type (`rkv quantize`), with
//! llama.cpp's per-tensor type choice (`quant_layout.rs`): every matrix is dequantised
//! and quantised again with candle's ports of ggml's reference quantisers (a matrix
//! already of its target type is copied as stored, as `llama-quantize` does); vectors
//! and metadata are copied, `general.file_type` set.
//!
//! What `llama-quantize --allow-requantize IN OUT TYPE` does, without importance
//! matrices. The quantised values can differ from llama.cpp's where candle's quantiser
//! is an older ggml's (K-quant scale search); the layout is the same.
//!
//! Must not know: how a model runs, the CLI.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::Device;

use crate::error::{ModelError, Result};
use crate::weights::gguf::GgufSource;
use crate::weights::quant_layout::{target_type, FileType};
use crate::weights::WeightMode;

/// What a requantisation wrote: tensors by type, and how many were converted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequantSummary {
    pub by_type: BTreeMap<String, usize>,
    pub converted: usize,
    pub kept: usize,
}

/// Writes `src` requantised to `ft` at `dst`.
///
/// # Errors
/// When `src` is not a readable GGUF model, a tensor cannot be converted, or `dst`
/// cannot be written (nothing is left at `dst` then).
pub fn requantize(src: &Path, dst: &Path, ft: FileType) -> Result<RequantSummary> {
    let mut g = GgufSource::open(src, WeightMode::Native)?;
    let content = g.content();
    let arch = content
        .metadata
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .ok_or_else(|| ModelError::BadConfig("GGUF has no general.architecture".into()))?;
    let n_layers = match content.metadata.get(&format!("{arch}.block_count")) {
        Some(v) => v
            .to_u32()
            .map_err(|_| ModelError::BadConfig(format!("{arch}.block_count is not a count")))?
            as usize,
        None => 0,
    };
    let has_output = content.tensor_infos.contains_key("output.weight");
    // The file's own order (by data offset), so the output reads like the input.
    let mut names: Vec<(u64, String)> = content
        .tensor_infos
        .iter()
        .map(|(n, i)| (i.offset, n.clone()))
        .collect();
    names.sort();
    let mut meta: Vec<(String, gguf_file::Value)> = content
        .metadata
        .iter()
        .filter(|(k, _)| k.as_str() != "general.file_type")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    meta.push((
        "general.file_type".into(),
        gguf_file::Value::U32(ft.gguf_code()),
    ));
    meta.sort_by(|a, b| a.0.cmp(&b.0));

    let mut summary = RequantSummary::default();
    let mut tensors: Vec<(String, QTensor)> = Vec::with_capacity(names.len());
    for (_, name) in names {
        let q = g.qtensor(&name)?;
        let dims = q.shape().dims().to_vec();
        let t = match target_type(ft, &name, &dims, n_layers, has_output) {
            Some(to) if to != q.dtype() => {
                summary.converted += 1;
                convert(&name, &q, to)?
            }
            _ => {
                summary.kept += 1;
                q
            }
        };
        *summary
            .by_type
            .entry(format!("{:?}", t.dtype()).to_lowercase())
            .or_default() += 1;
        tensors.push((name, t));
    }
    write(dst, &meta, &tensors)?;
    Ok(summary)
}

/// `q` dequantised and quantised again as `to`.
fn convert(name: &str, q: &QTensor, to: GgmlDType) -> Result<QTensor> {
    let f = q.dequantize(&Device::Cpu)?;
    QTensor::quantize(&f, to).map_err(|e| {
        ModelError::BadInput(format!(
            "tensor `{name}` cannot be quantised to {to:?}: {}",
            crate::error::candle_message(&e)
        ))
    })
}

/// Writes the GGUF file, removing a partial one on failure.
fn write(
    dst: &Path,
    meta: &[(String, gguf_file::Value)],
    tensors: &[(String, QTensor)],
) -> Result<()> {
    let io = |source| ModelError::Io {
        path: dst.to_path_buf(),
        source,
    };
    let meta_refs: Vec<(&str, &gguf_file::Value)> =
        meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    let result = (|| {
        let mut w = BufWriter::new(File::create(dst).map_err(io)?);
        gguf_file::write(&mut w, &meta_refs, &tensor_refs)?;
        std::io::Write::flush(&mut w).map_err(io)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(dst);
    }
    result
}
