//! The element types KV rows are stored in (`--kv-dtype`): their names, sizes and the
//! head sizes they can hold.
//! Must not know: blocks, sequences, kernels' loops.

use rkv_kernels::{BlockQ8_0, QK};

use crate::error::{EngineError, Result};

/// Element type of stored keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvDtype {
    #[default]
    F16,
    F32,
    /// ggml's `q8_0`: blocks of 32 signed 8-bit values with one f16 scale (34 bytes).
    Q8_0,
}

impl KvDtype {
    /// Every dtype, in the order error messages list them.
    pub const ALL: [KvDtype; 3] = [KvDtype::F16, KvDtype::F32, KvDtype::Q8_0];

    /// The name `--kv-dtype` takes.
    pub fn name(&self) -> &'static str {
        match self {
            KvDtype::F16 => "f16",
            KvDtype::F32 => "f32",
            KvDtype::Q8_0 => "q8_0",
        }
    }

    /// Bytes `values` values take (for q8_0, whole blocks of 32), `None` on overflow.
    pub fn bytes_of(&self, values: usize) -> Option<usize> {
        match self {
            KvDtype::F16 => values.checked_mul(2),
            KvDtype::F32 => values.checked_mul(4),
            KvDtype::Q8_0 => values
                .div_ceil(QK)
                .checked_mul(std::mem::size_of::<BlockQ8_0>()),
        }
    }

    /// Whether rows of `head_dim` values can be stored: q8_0 needs whole blocks of 32.
    pub fn check_head_dim(&self, head_dim: usize) -> Result<()> {
        match self {
            KvDtype::Q8_0 if !head_dim.is_multiple_of(QK) => Err(EngineError::Config(format!(
                "KV dtype q8_0 stores blocks of {QK} values, and this model's head size \
                 {head_dim} is not a multiple of {QK} (use f16 or f32)"
            ))),
            _ => Ok(()),
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(KvDtype::name).collect();
                EngineError::BadRequest(format!(
                    "unknown KV dtype `{s}` (expected one of {})",
                    names.join(", ")
                ))
            })
    }
}

impl std::fmt::Display for KvDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KvDtype {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}
