//! The quantisation-agnostic linear layer: `y = x W^T (+ b)`, whatever stores `W`.
//!
//! Owns the weight storage variants and their dispatch. Architectures call
//! [`Linear::forward`] and never see how a weight is stored (unlike candle, which keeps one
//! model file per weight format).
//! Must not know: layers, caches.

use std::sync::Arc;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use rayon::prelude::*;

use candle_core::quantized::GgmlDType;
use rkv_kernels as k;
use rkv_kernels::{
    BlockQ4_0, PackedQ4K, PackedQ4_1, PackedQ5K, PackedQ5_0, PackedQ5_1, PackedQ6K, PackedQ8_0, QK,
    QK_K,
};

use crate::error::{ModelError, Result};

/// How a weight matrix `[rows, cols]` is stored.
pub enum Weight {
    /// ggml Q4_0 blocks, rkv's own kernels (activations quantised to Q8_0). `[rows, cols/32]`
    Q4_0(Vec<BlockQ4_0>),
    /// ggml Q4_1 blocks repacked eight rows at a time for rkv's blocked product
    /// (activations quantised to Q8_1). `[rows/8, cols/32]` of eight-row blocks
    Q4_1(PackedQ4_1),
    /// ggml Q8_0 blocks repacked eight rows at a time for rkv's blocked product
    /// (activations quantised to Q8_0). `[rows/8, cols/32]` of eight-row blocks
    Q8_0(PackedQ8_0),
    /// ggml Q5_0 blocks repacked eight rows at a time (activations quantised to Q8_0).
    /// `[rows/8, cols/32]` of eight-row blocks
    Q5_0(PackedQ5_0),
    /// ggml Q5_1 blocks repacked eight rows at a time (activations quantised to Q8_1).
    /// `[rows/8, cols/32]` of eight-row blocks
    Q5_1(PackedQ5_1),
    /// ggml Q4_K super-blocks repacked eight rows at a time for rkv's blocked product
    /// (activations quantised to Q8_K). `[rows/8, cols/256]` of eight-row blocks
    Q4K(PackedQ4K),
    /// ggml Q5_K super-blocks repacked eight rows at a time (activations quantised to
    /// Q8_K). `[rows/8, cols/256]` of eight-row blocks
    Q5K(PackedQ5K),
    /// ggml Q6_K super-blocks repacked eight rows at a time (activations quantised to
    /// Q8_K). `[rows/8, cols/256]` of eight-row blocks
    Q6K(PackedQ6K),
    /// Any other GGML-quantised tensor (Q2_K, Q3_K, IQ types), run through candle's quantised matmul.
    Quant(Arc<QTensor>),
    /// Dense f32, row-major. `[rows, cols]`
    F32(Vec<f32>),
    /// Dense f16 as stored (GGUF F16, safetensors f16), row-major. `[rows, cols]`
    F16(Vec<k::f16>),
    /// Dense bf16 as stored (GGUF BF16, safetensors bf16), row-major. `[rows, cols]`
    BF16(Vec<k::bf16>),
}

impl Weight {
    /// Picks rkv's own kernels for the block types they cover, candle's otherwise.
    pub fn from_qtensor(t: QTensor) -> Result<Self> {
        if !Self::native(t.dtype()) {
            return Ok(Weight::Quant(Arc::new(t)));
        }
        // [.., rows, cols]: rows is the second-to-last dimension.
        let dims = t.shape().dims();
        let rows = if dims.len() >= 2 {
            dims[dims.len() - 2]
        } else {
            1
        };
        Self::from_ggml_bytes(t.dtype(), &t.data()?, rows)
    }

    /// Whether rkv's own kernels take GGUF blocks of `dtype` ([`Self::from_ggml_bytes`]).
    pub fn native(dtype: GgmlDType) -> bool {
        use GgmlDType::*;
        matches!(dtype, Q4_0 | Q4_1 | Q8_0 | Q5_0 | Q5_1 | Q4K | Q5K | Q6K)
    }

    /// A `[rows, cols]` weight from its GGUF bytes (row-major blocks of `dtype`), packed
    /// for rkv's kernels as each block is decoded.
    ///
    /// # Errors
    /// When `dtype` is not [`Self::native`], or the bytes are not `rows` whole rows of
    /// blocks.
    pub fn from_ggml_bytes(dtype: GgmlDType, bytes: &[u8], rows: usize) -> Result<Self> {
        let kerr = |e: k::KernelError| ModelError::BadInput(format!("quantised weight: {e}"));
        Ok(match dtype {
            GgmlDType::Q4_0 => Weight::Q4_0(k::blocks_from_bytes(bytes).map_err(kerr)?),
            GgmlDType::Q4_1 => Weight::Q4_1(PackedQ4_1::pack_bytes(bytes, rows).map_err(kerr)?),
            GgmlDType::Q8_0 => Weight::Q8_0(PackedQ8_0::pack_bytes(bytes, rows).map_err(kerr)?),
            GgmlDType::Q5_0 => Weight::Q5_0(PackedQ5_0::pack_bytes(bytes, rows).map_err(kerr)?),
            GgmlDType::Q5_1 => Weight::Q5_1(PackedQ5_1::pack_bytes(bytes, rows).map_err(kerr)?),
            GgmlDType::Q4K => Weight::Q4K(PackedQ4K::pack_bytes(bytes, rows).map_err(kerr)?),
            GgmlDType::Q5K => Weight::Q5K(PackedQ5K::pack_bytes(bytes, rows).map_err(kerr)?),
            GgmlDType::Q6K => Weight::Q6K(PackedQ6K::pack_bytes(bytes, rows).map_err(kerr)?),
            other => {
                return Err(ModelError::BadInput(format!(
                    "{other:?} weights are not one of rkv's own block types"
                )))
            }
        })
    }
}

fn kernel_err(e: k::KernelError) -> ModelError {
    ModelError::BadInput(format!("kernel: {e}"))
}

/// A row quantiser of activations into blocks `B`.
type Quantiser<B> = fn(&[f32], &mut [B]) -> std::result::Result<(), k::KernelError>;

/// Values one parallel task of [`quantize`] takes (a prompt chunk's activations are
/// many of these; one token's are a few).
const QUANTIZE_TASK_VALUES: usize = 16 * 1024;

/// Activations `x` (rows of a multiple of `per` columns, so no block spans two rows)
/// quantised block by block with `f`, `per` values to a block, in parallel over runs
/// of whole blocks (each block's result is its own, so the split changes nothing).
fn quantize<B: Clone + Default + Send>(x: &[f32], per: usize, f: Quantiser<B>) -> Result<Vec<B>> {
    let mut q = vec![B::default(); x.len() / per];
    let task = (QUANTIZE_TASK_VALUES / per).max(1);
    if q.len() < 2 * task || !x.len().is_multiple_of(per) {
        f(x, &mut q).map_err(kernel_err)?;
    } else {
        q.par_chunks_mut(task)
            .zip(x.par_chunks(task * per))
            .try_for_each(|(qc, xc)| f(xc, qc))
            .map_err(kernel_err)?;
    }
    Ok(q)
}

/// `out = w x` for a packed weight: `x` quantised to the format's activation blocks
/// (`per` values each) with `f`, then the blocked product.
fn packed<P: k::Interleaved>(
    w: &k::Packed<P>,
    x: &[f32],
    n: usize,
    out: &mut [f32],
    per: usize,
    f: Quantiser<P::Act>,
) -> Result<()>
where
    P::Act: Clone + Default + Send,
{
    let xq = quantize(x, per, f)?;
    k::matmul_packed(w, &xq, n, out).map_err(kernel_err)
}

pub struct Linear {
    rows: usize, // output features
    cols: usize, // input features
    weight: Weight,
    bias: Option<Vec<f32>>, // [rows]
}

impl Linear {
    pub fn new(rows: usize, cols: usize, weight: Weight, bias: Option<Vec<f32>>) -> Result<Self> {
        let (have, want) = match &weight {
            Weight::F32(w) => (w.len(), rows * cols),
            Weight::F16(w) => (w.len(), rows * cols),
            Weight::BF16(w) => (w.len(), rows * cols),
            Weight::Q4_0(w) => (w.len() * QK, rows * cols),
            Weight::Q4_1(w) => (w.rows() * w.blocks_per_row() * QK, rows * cols),
            Weight::Q8_0(w) => (w.rows() * w.blocks_per_row() * QK, rows * cols),
            Weight::Q5_0(w) => (w.rows() * w.blocks_per_row() * QK, rows * cols),
            Weight::Q5_1(w) => (w.rows() * w.blocks_per_row() * QK, rows * cols),
            Weight::Q4K(w) => (w.rows() * w.blocks_per_row() * QK_K, rows * cols),
            Weight::Q5K(w) => (w.rows() * w.blocks_per_row() * QK_K, rows * cols),
            Weight::Q6K(w) => (w.rows() * w.blocks_per_row() * QK_K, rows * cols),
            Weight::Quant(_) => (0, 0),
        };
        let packed_rows_differ = match &weight {
            Weight::Q4_1(w) => w.rows() != rows,
            Weight::Q8_0(w) => w.rows() != rows,
            Weight::Q5_0(w) => w.rows() != rows,
            Weight::Q5_1(w) => w.rows() != rows,
            Weight::Q4K(w) => w.rows() != rows,
            Weight::Q5K(w) => w.rows() != rows,
            Weight::Q6K(w) => w.rows() != rows,
            _ => false,
        };
        if have != want
            || packed_rows_differ
            || (!matches!(weight, Weight::F32(_) | Weight::F16(_) | Weight::BF16(_))
                && !cols.is_multiple_of(QK))
        {
            return Err(ModelError::BadInput(format!(
                "weight holds {have} values, expected {rows} x {cols}"
            )));
        }
        if let Some(b) = &bias {
            if b.len() != rows {
                return Err(ModelError::BadInput(format!(
                    "bias has {} values, expected {rows}",
                    b.len()
                )));
            }
        }
        Ok(Self {
            rows,
            cols,
            weight,
            bias,
        })
    }

    pub fn weight(&self) -> &Weight {
        &self.weight
    }

    /// `out[t] = W x[t] + b` for `n` rows. `x`: [n, cols], `out`: [n, rows].
    pub fn forward(&self, x: &[f32], n: usize, out: &mut [f32]) -> Result<()> {
        if x.len() != n * self.cols || out.len() != n * self.rows {
            return Err(ModelError::BadInput(format!(
                "linear {}x{}: input {} / output {} values for {n} rows",
                self.rows,
                self.cols,
                x.len(),
                out.len()
            )));
        }
        let rows = self.rows;
        match &self.weight {
            Weight::Q4_0(w) => {
                let xq = quantize(x, QK, k::quantize_row_q8_0)?;
                k::matmul_q4_0(w, rows, &xq, n, out).map_err(kernel_err)?;
            }
            Weight::Q4_1(w) => packed(w, x, n, out, QK, k::quantize_row_q8_1)?,
            Weight::Q8_0(w) => packed(w, x, n, out, QK, k::quantize_row_q8_0)?,
            Weight::Q5_0(w) => packed(w, x, n, out, QK, k::quantize_row_q8_0)?,
            Weight::Q5_1(w) => packed(w, x, n, out, QK, k::quantize_row_q8_1)?,
            Weight::Q4K(w) => packed(w, x, n, out, QK_K, k::quantize_row_q8_k)?,
            Weight::Q5K(w) => packed(w, x, n, out, QK_K, k::quantize_row_q8_k)?,
            Weight::Q6K(w) => packed(w, x, n, out, QK_K, k::quantize_row_q8_k)?,
            Weight::Quant(q) => {
                let xt = Tensor::from_slice(x, (n, self.cols), &Device::Cpu)?;
                let y = QMatMul::QTensor(q.clone()).forward(&xt)?;
                let y = y.flatten_all()?.to_vec1::<f32>()?;
                out.copy_from_slice(&y);
            }
            Weight::F32(w) => k::matmul_f32(w, rows, x, n, out).map_err(kernel_err)?,
            Weight::F16(w) => k::matmul_f16(w, rows, x, n, out).map_err(kernel_err)?,
            Weight::BF16(w) => k::matmul_bf16(w, rows, x, n, out).map_err(kernel_err)?,
        }
        if let Some(b) = &self.bias {
            for or in out.chunks_exact_mut(self.rows) {
                for (o, &bv) in or.iter_mut().zip(b) {
                    *o += bv;
                }
            }
        }
        Ok(())
    }

    /// Row `r` of `W` as f32 (embedding lookup). `out`: [cols].
    pub fn row(&self, r: usize, out: &mut [f32]) -> Result<()> {
        if r >= self.rows || out.len() != self.cols {
            return Err(ModelError::BadInput(format!(
                "row {r} of a {}x{} weight",
                self.rows, self.cols
            )));
        }
        let nb = self.cols / QK;
        match &self.weight {
            Weight::Q4_0(w) => {
                k::dequantize_row_q4_0(&w[r * nb..(r + 1) * nb], out).map_err(kernel_err)?
            }
            Weight::Q4_1(w) => w.dequantize_row(r, out).map_err(kernel_err)?,
            Weight::Q8_0(w) => w.dequantize_row(r, out).map_err(kernel_err)?,
            Weight::Q5_0(w) => w.dequantize_row(r, out).map_err(kernel_err)?,
            Weight::Q5_1(w) => w.dequantize_row(r, out).map_err(kernel_err)?,
            Weight::Q4K(w) => w.dequantize_row(r, out).map_err(kernel_err)?,
            Weight::Q5K(w) => w.dequantize_row(r, out).map_err(kernel_err)?,
            Weight::Q6K(w) => w.dequantize_row(r, out).map_err(kernel_err)?,
            Weight::Quant(q) => {
                let ids = Tensor::new(&[r as u32], &Device::Cpu)?;
                let y = q.embedding(&ids)?.flatten_all()?.to_vec1::<f32>()?;
                out.copy_from_slice(&y);
            }
            Weight::F32(w) => out.copy_from_slice(&w[r * self.cols..(r + 1) * self.cols]),
            Weight::F16(w) => {
                let row = &w[r * self.cols..(r + 1) * self.cols];
                k::f16_to_f32_slice(row, out);
            }
            Weight::BF16(w) => {
                let row = &w[r * self.cols..(r + 1) * self.cols];
                for (o, v) in out.iter_mut().zip(row) {
                    *o = v.to_f32();
                }
            }
        }
        Ok(())
    }
}
