//! Elementwise building blocks: RMSNorm (Zhang & Sennrich 2019) and SiLU gating.
//!
//! Many rows (a prompt chunk) run in parallel on the installed rayon pool; each value is
//! computed as it would be alone. Must not know: layers, weights formats, caches.

use rayon::prelude::*;

/// Values one parallel task takes; fewer run on the calling thread.
const TASK_VALUES: usize = 16 * 1024;

/// `1 / sqrt(mean(x^2) + eps)`, with squares summed in f64 as ggml does.
fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let ss: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let mean = (ss / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// `out = x / sqrt(mean(x^2) + eps) * w`, row by row. `x`, `out`: [n, dim], `w`: [dim].
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let dim = w.len();
    let row = |(xr, or): (&[f32], &mut [f32])| {
        let scale = inv_rms(xr, eps);
        for ((o, &xv), &wv) in or.iter_mut().zip(xr).zip(w) {
            *o = xv * scale * wv;
        }
    };
    if x.len() < 2 * TASK_VALUES {
        x.chunks_exact(dim)
            .zip(out.chunks_exact_mut(dim))
            .for_each(row);
    } else {
        x.par_chunks_exact(dim)
            .zip(out.par_chunks_exact_mut(dim))
            .for_each(row);
    }
}

/// In place RMSNorm of each `w.len()`-sized chunk (used for per-head q/k norms).
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let dim = w.len();
    for xr in x.chunks_exact_mut(dim) {
        let scale = inv_rms(xr, eps);
        for (xv, &wv) in xr.iter_mut().zip(w) {
            *xv = *xv * scale * wv;
        }
    }
}

/// `gate = silu(gate) * up`, elementwise.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    let run = |(gs, us): (&mut [f32], &[f32])| {
        for (g, &u) in gs.iter_mut().zip(us) {
            *g = *g / (1.0 + (-*g).exp()) * u;
        }
    };
    if gate.len() < 2 * TASK_VALUES {
        run((gate, up));
    } else {
        gate.par_chunks_mut(TASK_VALUES)
            .zip(up.par_chunks(TASK_VALUES))
            .for_each(run);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_unit_rows() {
        let x = [3.0, 4.0, 0.0, 0.0];
        let mut out = [0.0; 4];
        rms_norm(&x, &[1.0, 2.0], 1e-12, &mut out);
        let s = (12.5f32).sqrt();
        assert!((out[0] - 3.0 / s).abs() < 1e-6);
        assert!((out[1] - 8.0 / s).abs() < 1e-6);
        assert_eq!(&out[2..], &[0.0, 0.0]);
    }

    #[test]
    fn silu_mul_values() {
        let mut g = [0.0, 1.0];
        silu_mul(&mut g, &[5.0, 2.0]);
        assert_eq!(g[0], 0.0);
        assert!((g[1] - 2.0 / (1.0 + (-1.0f32).exp())).abs() < 1e-6);
    }
}
