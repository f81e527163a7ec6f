//! Rotary position embedding (Su et al. 2021, arXiv 2104.09864): the one RoPE of rkv.
//!
//! Owns the frequency table (with Llama 3 style per-frequency factors) and both pairings:
//! adjacent pairs (GGUF llama files, ggml's mode 0) and half-split pairs (Hugging Face and
//! GGUF qwen files, ggml's NEOX mode).
//! Must not know: layers, caches. Positions are absolute and given per token.

/// How the rotated pairs are laid out inside a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(2i, 2i + 1)`.
    Interleaved,
    /// Pairs `(i, i + d/2)` (`rotate_half`).
    Half,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RopeConfig {
    pub theta: f32,
    pub style: RopeStyle,
    /// Divisors of each inverse frequency (GGUF `rope_freqs.weight`, or derived from a
    /// Hugging Face `rope_scaling` of type `llama3`). `[head_dim / 2]`.
    pub freq_factors: Option<Vec<f32>>,
}

/// Llama 3.1 frequency factors from a Hugging Face `rope_scaling` block.
pub fn llama3_freq_factors(
    theta: f32,
    head_dim: usize,
    factor: f32,
    low_freq_factor: f32,
    high_freq_factor: f32,
    original_max_position: f32,
) -> Vec<f32> {
    let low_wavelen = original_max_position / low_freq_factor;
    let high_wavelen = original_max_position / high_freq_factor;
    (0..head_dim / 2)
        .map(|i| {
            let inv = 1.0 / theta.powf(2.0 * i as f32 / head_dim as f32);
            let wavelen = 2.0 * std::f32::consts::PI / inv;
            let scaled = if wavelen < high_wavelen {
                inv
            } else if wavelen > low_wavelen {
                inv / factor
            } else {
                let smooth = (original_max_position / wavelen - low_freq_factor)
                    / (high_freq_factor - low_freq_factor);
                (1.0 - smooth) * inv / factor + smooth * inv
            };
            inv / scaled
        })
        .collect()
}

/// Cos/sin tables for the tokens of one forward, shared by all layers.
pub struct RopeTable {
    style: RopeStyle,
    half: usize,
    cos: Vec<f32>, // [n_tokens, head_dim / 2]
    sin: Vec<f32>, // [n_tokens, head_dim / 2]
}

impl RopeTable {
    pub fn new(cfg: &RopeConfig, head_dim: usize, positions: &[usize]) -> Self {
        let half = head_dim / 2;
        // Angles as ggml forms them: theta_i = p * s^i by repeated multiplication with
        // s = base^(-2/d), divided by the frequency factor when there is one.
        let scale = cfg.theta.powf(-2.0 / head_dim as f32);
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for &p in positions {
            let mut theta = p as f32;
            for i in 0..half {
                let a = match &cfg.freq_factors {
                    Some(ff) => theta / ff.get(i).copied().unwrap_or(1.0),
                    None => theta,
                };
                cos.push(a.cos());
                sin.push(a.sin());
                theta *= scale;
            }
        }
        Self {
            style: cfg.style,
            half,
            cos,
            sin,
        }
    }

    /// Rotates `x`: [n_tokens, n_heads, head_dim] in place.
    pub fn apply(&self, x: &mut [f32], n_heads: usize) {
        let d = self.half * 2;
        for (t, tok) in x.chunks_exact_mut(n_heads * d).enumerate() {
            let cos = &self.cos[t * self.half..(t + 1) * self.half];
            let sin = &self.sin[t * self.half..(t + 1) * self.half];
            for head in tok.chunks_exact_mut(d) {
                match self.style {
                    RopeStyle::Interleaved => {
                        for (i, pair) in head.chunks_exact_mut(2).enumerate() {
                            let (a, b) = (pair[0], pair[1]);
                            pair[0] = a * cos[i] - b * sin[i];
                            pair[1] = a * sin[i] + b * cos[i];
                        }
                    }
                    RopeStyle::Half => {
                        let (lo, hi) = head.split_at_mut(self.half);
                        for i in 0..self.half {
                            let (a, b) = (lo[i], hi[i]);
                            lo[i] = a * cos[i] - b * sin[i];
                            hi[i] = a * sin[i] + b * cos[i];
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(style: RopeStyle) -> RopeConfig {
        RopeConfig {
            theta: 10000.0,
            style,
            freq_factors: None,
        }
    }

    #[test]
    fn position_zero_is_identity() {
        for style in [RopeStyle::Interleaved, RopeStyle::Half] {
            let t = RopeTable::new(&cfg(style), 4, &[0]);
            let mut x = vec![1.0, 2.0, 3.0, 4.0];
            t.apply(&mut x, 1);
            assert_eq!(x, vec![1.0, 2.0, 3.0, 4.0]);
        }
    }

    #[test]
    fn pairings_differ_as_specified() {
        // d = 4: inv freqs [1, 0.01]. Position 1 rotates pair 0 by 1 rad.
        let (c, s) = (1f32.cos(), 1f32.sin());
        let t = RopeTable::new(&cfg(RopeStyle::Interleaved), 4, &[1]);
        let mut x = vec![1.0, 0.0, 0.0, 0.0];
        t.apply(&mut x, 1);
        assert!((x[0] - c).abs() < 1e-6 && (x[1] - s).abs() < 1e-6);
        let t = RopeTable::new(&cfg(RopeStyle::Half), 4, &[1]);
        let mut x = vec![1.0, 0.0, 0.0, 0.0];
        t.apply(&mut x, 1);
        assert!((x[0] - c).abs() < 1e-6 && (x[2] - s).abs() < 1e-6 && x[1] == 0.0);
    }

    #[test]
    fn rotation_preserves_dot_of_relative_positions() {
        let t = RopeTable::new(&cfg(RopeStyle::Half), 8, &[3, 5, 10, 12]);
        let base: Vec<f32> = (0..8).map(|i| (i as f32 * 0.7).sin()).collect();
        let mut x: Vec<f32> = base
            .iter()
            .chain(&base)
            .chain(&base)
            .chain(&base)
            .copied()
            .collect();
        t.apply(&mut x, 1);
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        let d1 = dot(&x[0..8], &x[8..16]);
        let d2 = dot(&x[16..24], &x[24..32]);
        assert!((d1 - d2).abs() < 1e-4);
    }

    #[test]
    fn llama3_factors_keep_high_frequencies() {
        let f = llama3_freq_factors(500000.0, 128, 8.0, 1.0, 4.0, 8192.0);
        assert_eq!(f.len(), 64);
        assert!((f[0] - 1.0).abs() < 1e-6);
        assert!((f[63] - 8.0).abs() < 1e-4);
    }
}
