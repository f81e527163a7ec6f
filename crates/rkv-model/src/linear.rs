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

use crate::error::{ModelError, Result};

/// How a weight matrix `[rows, cols]` is stored.
pub enum Weight {
    /// A GGML-quantised tensor run through candle's quantised matmul.
    Quant(Arc<QTensor>),
    /// Dense f32, row-major. `[rows, cols]`
    F32(Vec<f32>),
}

pub struct Linear {
    rows: usize, // output features
    cols: usize, // input features
    weight: Weight,
    bias: Option<Vec<f32>>, // [rows]
}

impl Linear {
    pub fn new(rows: usize, cols: usize, weight: Weight, bias: Option<Vec<f32>>) -> Result<Self> {
        if let Weight::F32(w) = &weight {
            if w.len() != rows * cols {
                return Err(ModelError::BadInput(format!(
                    "dense weight has {} values, expected {rows} x {cols}",
                    w.len()
                )));
            }
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

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
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
        match &self.weight {
            Weight::Quant(q) => {
                let xt = Tensor::from_slice(x, (n, self.cols), &Device::Cpu)?;
                let y = QMatMul::QTensor(q.clone()).forward(&xt)?;
                let y = y.flatten_all()?.to_vec1::<f32>()?;
                out.copy_from_slice(&y);
            }
            Weight::F32(w) => {
                let cols = self.cols;
                for (xr, or) in x.chunks_exact(cols).zip(out.chunks_exact_mut(self.rows)) {
                    or.par_iter_mut().enumerate().for_each(|(r, o)| {
                        let wr = &w[r * cols..(r + 1) * cols];
                        *o = wr.iter().zip(xr).map(|(a, b)| a * b).sum();
                    });
                }
            }
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
        match &self.weight {
            Weight::Quant(q) => {
                let ids = Tensor::new(&[r as u32], &Device::Cpu)?;
                let y = q.embedding(&ids)?.flatten_all()?.to_vec1::<f32>()?;
                out.copy_from_slice(&y);
            }
            Weight::F32(w) => out.copy_from_slice(&w[r * self.cols..(r + 1) * self.cols]),
        }
        Ok(())
    }
}
