//! The one definition of the redundancy's cosine entries `S[i][j]` (R-KV, arXiv
//! 2505.24133, `cal_similarity` of Zefan-Cai/R-KV `rkv/utils.py`).
//!
//! Owns: the inverse norms `1 / (||k|| + 1e-8)` and the entry
//! `S[i][j] = (k_i . k_j) * (inv_i * inv_j)` (the cosine of the normalised keys, computed
//! without materialising them), with one fixed summation order. The oracle and the
//! incremental path both call these, so every threshold decision `S[i][j] > threshold`
//! is bit-identical between them and `S[i][j] == S[j][i]` exactly. Also the lane-parallel
//! f64 dot products the column sums use.
//!
//! Must not know: thresholds, column sums, selection, the schedule.

/// Lanes of the dot product's partial sums (a fixed order, vectorisable).
const LANES: usize = 8;

/// Inverse norms `1 / (||k||_2 + 1e-8)` of `len` keys (norm accumulated in f64).
///
/// `keys`: `[len, dim]`. Returns `[len]`.
pub fn inv_norms(keys: &[f32], dim: usize) -> Vec<f32> {
    if dim == 0 {
        return Vec::new();
    }
    keys.chunks_exact(dim).map(inv_norm).collect()
}

/// `1 / (||k||_2 + 1e-8)` of one key.
#[inline]
pub fn inv_norm(key: &[f32]) -> f32 {
    1.0 / (dot_f64(key, key).sqrt() as f32 + 1e-8)
}

/// Dot product of two equal-length f32 vectors in a fixed order: two sets of `LANES`
/// partial sums over alternating blocks of `LANES` (two independent chains), added
/// lane-wise, reduced as a tree (8 -> 4 -> 2 -> 1), then the tail. Symmetric:
/// `dot(a, b) == dot(b, a)` bit for bit.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc0 = [0.0f32; LANES];
    let mut acc1 = [0.0f32; LANES];
    let pairs_a = a.chunks_exact(2 * LANES);
    let pairs_b = b.chunks_exact(2 * LANES);
    let (rest_a, rest_b) = (pairs_a.remainder(), pairs_b.remainder());
    for (ca, cb) in pairs_a.zip(pairs_b) {
        for l in 0..LANES {
            acc0[l] += ca[l] * cb[l];
            acc1[l] += ca[LANES + l] * cb[LANES + l];
        }
    }
    let singles_a = rest_a.chunks_exact(LANES);
    let singles_b = rest_b.chunks_exact(LANES);
    let (tail_a, tail_b) = (singles_a.remainder(), singles_b.remainder());
    for (ca, cb) in singles_a.zip(singles_b) {
        for l in 0..LANES {
            acc0[l] += ca[l] * cb[l];
        }
    }
    let mut v = [0.0f32; LANES];
    for l in 0..LANES {
        v[l] = acc0[l] + acc1[l];
    }
    let q = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    let mut tail = 0.0f32;
    for (&x, &y) in tail_a.iter().zip(tail_b) {
        tail += x * y;
    }
    ((q[0] + q[2]) + (q[1] + q[3])) + tail
}

/// Dot product of two f32 vectors accumulated in f64, in `LANES` independent partial
/// sums (so the loop is not bound by the add latency), then the tail.
#[inline]
pub fn dot_f64(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f64; LANES];
    let chunks_a = a.chunks_exact(LANES);
    let chunks_b = b.chunks_exact(LANES);
    let (rest_a, rest_b) = (chunks_a.remainder(), chunks_b.remainder());
    for (ca, cb) in chunks_a.zip(chunks_b) {
        for l in 0..LANES {
            acc[l] += f64::from(ca[l]) * f64::from(cb[l]);
        }
    }
    let tail: f64 = rest_a
        .iter()
        .zip(rest_b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    acc.iter().sum::<f64>() + tail
}

/// Dot product of an f32 vector with an f64 vector, in f64 with `LANES` partial sums.
#[inline]
pub fn dot_mixed(a: &[f32], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f64; LANES];
    let chunks_a = a.chunks_exact(LANES);
    let chunks_b = b.chunks_exact(LANES);
    let (rest_a, rest_b) = (chunks_a.remainder(), chunks_b.remainder());
    for (ca, cb) in chunks_a.zip(chunks_b) {
        for l in 0..LANES {
            acc[l] += f64::from(ca[l]) * cb[l];
        }
    }
    let tail: f64 = rest_a
        .iter()
        .zip(rest_b)
        .map(|(&x, &y)| f64::from(x) * y)
        .sum();
    acc.iter().sum::<f64>() + tail
}

/// The keys of one head with their inverse norms: the entry function `S[i][j]`.
pub struct CosineRows<'a> {
    /// `[len, dim]` raw keys.
    pub keys: &'a [f32],
    /// `[len]` inverse norms ([`inv_norms`]).
    pub inv_norm: &'a [f32],
    pub dim: usize,
}

impl CosineRows<'_> {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.inv_norm.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.inv_norm.is_empty()
    }

    /// Row `i` of the raw keys.
    #[inline]
    pub fn row(&self, i: usize) -> &[f32] {
        &self.keys[i * self.dim..(i + 1) * self.dim]
    }

    /// `S[i][j]`: the cosine of slots `i` and `j`, 0 on the diagonal.
    #[inline(always)]
    pub fn entry(&self, i: usize, j: usize) -> f32 {
        if i == j {
            0.0
        } else {
            dot(self.row(i), self.row(j)) * (self.inv_norm[i] * self.inv_norm[j])
        }
    }

    /// The largest `j` in `candidates` (scanned in the iterator's order, which must be
    /// descending) with `S[i][j] > threshold`, with that entry; stops at the first hit.
    #[inline]
    pub fn latest_match(
        &self,
        i: usize,
        threshold: f32,
        candidates: impl Iterator<Item = usize>,
    ) -> Option<(usize, f32)> {
        candidates
            .map(|j| (j, self.entry(i, j)))
            .find(|&(_, v)| v > threshold)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_norms() {
        let k = [3.0, 4.0, 0.0, 0.0];
        let inv = inv_norms(&k, 2);
        assert!((inv[0] - 0.2).abs() < 1e-7);
        assert_eq!(inv[1], 1e8);
        assert!(inv_norms(&k, 0).is_empty());
        // A zero key has cosine 0 with everything.
        let s = CosineRows {
            keys: &k,
            inv_norm: &inv,
            dim: 2,
        };
        assert_eq!(s.entry(0, 1), 0.0);
    }

    #[test]
    fn dot_symmetric_and_correct() {
        let a: Vec<f32> = (0..19).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..19).map(|i| (i as f32 * 0.11).cos()).collect();
        let exact: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        assert_eq!(dot(&a, &b).to_bits(), dot(&b, &a).to_bits());
        assert!((f64::from(dot(&a, &b)) - exact).abs() < 1e-5);
        assert!((dot_f64(&a, &b) - exact).abs() < 1e-12);
        let b64: Vec<f64> = b.iter().map(|&x| f64::from(x)).collect();
        assert!((dot_mixed(&a, &b64) - exact).abs() < 1e-12);
    }

    #[test]
    fn entry_diagonal_zero_and_latest_match() {
        let keys = [1.0, 0.0, 1.0, 0.1, 0.0, 1.0, 1.0, 0.05];
        let inv = inv_norms(&keys, 2);
        let s = CosineRows {
            keys: &keys,
            inv_norm: &inv,
            dim: 2,
        };
        assert_eq!(s.len(), 4);
        assert_eq!(s.entry(1, 1), 0.0);
        assert!(s.entry(0, 1) > 0.9);
        assert_eq!(s.entry(0, 3).to_bits(), s.entry(3, 0).to_bits());
        let hit = |i, thr, top| s.latest_match(i, thr, (0..top).rev()).map(|(j, _)| j);
        assert_eq!(hit(0, 0.5, 4), Some(3));
        assert_eq!(
            s.latest_match(0, 0.5, (0..4).rev()).map(|(_, v)| v),
            Some(s.entry(0, 3))
        );
        assert_eq!(hit(2, 0.5, 4), None);
        // Negative threshold: the zero diagonal counts as a match.
        assert_eq!(hit(2, -0.5, 4), Some(3));
        assert_eq!(hit(2, -0.5, 3), Some(2));
    }
}
