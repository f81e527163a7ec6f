//! The one definition of the redundancy's cosine entries `S[i][j]` (R-KV, arXiv
//! 2505.24133, `cal_similarity` of Zefan-Cai/R-KV `rkv/utils.py`).
//!
//! Owns: key normalisation `k / (||k|| + 1e-8)` and the f32 dot product of two normalised
//! keys, with one fixed summation order. The oracle and the incremental path both call
//! these, so every threshold decision `S[i][j] > threshold` is bit-identical between
//! them and `S[i][j] == S[j][i]` exactly.
//!
//! Must not know: thresholds, column sums, selection, the schedule.

/// Lanes of the dot product's partial sums (a fixed order, vectorisable).
const LANES: usize = 8;

/// Normalise `len` keys of width `dim`: `k / (||k||_2 + 1e-8)`, norm accumulated in f64.
///
/// `keys`: `[len, dim]`. Returns `[len, dim]`.
pub fn normalize_keys(keys: &[f32], dim: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(keys.len());
    if dim == 0 {
        return out;
    }
    for key in keys.chunks_exact(dim) {
        let norm = key
            .iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>()
            .sqrt() as f32;
        let denom = norm + 1e-8;
        out.extend(key.iter().map(|&x| x / denom));
    }
    out
}

/// Dot product of two equal-length f32 vectors in a fixed order: `LANES` partial sums,
/// then the tail, then the lanes left to right. Symmetric: `dot(a, b) == dot(b, a)`.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; LANES];
    let chunks_a = a.chunks_exact(LANES);
    let chunks_b = b.chunks_exact(LANES);
    let (rest_a, rest_b) = (chunks_a.remainder(), chunks_b.remainder());
    for (ca, cb) in chunks_a.zip(chunks_b) {
        for l in 0..LANES {
            acc[l] += ca[l] * cb[l];
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in rest_a.iter().zip(rest_b) {
        tail += x * y;
    }
    acc.iter().sum::<f32>() + tail
}

/// Normalised keys of one head with the entry function `S[i][j]` (diagonal 0).
pub struct CosineRows<'a> {
    /// `[len, dim]` normalised keys.
    pub normed: &'a [f32],
    pub dim: usize,
}

impl CosineRows<'_> {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.normed.len().checked_div(self.dim).unwrap_or(0)
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `i` of the normalised keys.
    #[inline]
    pub fn row(&self, i: usize) -> &[f32] {
        &self.normed[i * self.dim..(i + 1) * self.dim]
    }

    /// `S[i][j]`: the cosine of slots `i` and `j`, 0 on the diagonal.
    #[inline]
    pub fn entry(&self, i: usize, j: usize) -> f32 {
        if i == j {
            0.0
        } else {
            dot(self.row(i), self.row(j))
        }
    }

    /// The largest `j` in `candidates` (scanned in the iterator's order, which must be
    /// descending) with `S[i][j] > threshold`; stops at the first hit.
    #[inline]
    pub fn latest_match(
        &self,
        i: usize,
        threshold: f32,
        candidates: impl Iterator<Item = usize>,
    ) -> Option<usize> {
        let mut candidates = candidates;
        candidates.find(|&j| self.entry(i, j) > threshold)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_unit_and_zero() {
        let k = [3.0, 4.0, 0.0, 0.0];
        let n = normalize_keys(&k, 2);
        assert!((n[0] - 0.6).abs() < 1e-6 && (n[1] - 0.8).abs() < 1e-6);
        assert_eq!(&n[2..], &[0.0, 0.0]);
        assert!(normalize_keys(&k, 0).is_empty());
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
    }

    #[test]
    fn entry_diagonal_zero_and_latest_match() {
        let keys = [1.0, 0.0, 1.0, 0.1, 0.0, 1.0, 1.0, 0.05];
        let normed = normalize_keys(&keys, 2);
        let s = CosineRows {
            normed: &normed,
            dim: 2,
        };
        assert_eq!(s.len(), 4);
        assert_eq!(s.entry(1, 1), 0.0);
        assert!(s.entry(0, 1) > 0.9);
        assert_eq!(s.latest_match(0, 0.5, (0..4).rev()), Some(3));
        assert_eq!(s.latest_match(2, 0.5, (0..4).rev()), None);
        // Negative threshold: the zero diagonal counts as a match.
        assert_eq!(s.latest_match(2, -0.5, (0..4).rev()), Some(3));
        assert_eq!(s.latest_match(2, -0.5, (0..3).rev()), Some(2));
    }
}
