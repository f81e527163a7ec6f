//! The keys a policy reads, where they already are: rows of `d` values, f32 or f16, either
//! one contiguous `[L, d]` slice or runs of `2^k` rows each (a paged cache's blocks), so
//! that the engine need not gather or widen them before a compression.
//!
//! Owns: [`KeyElem`] (how an element widens to f32, also 8 at a time on AVX2 and 16 on
//! AVX-512, for the SIMD paths the CPU is checked for at run time: f16 to f32 is exact,
//! so every computation on f16 keys equals the same computation on their widened f32
//! copies bit for bit), [`Rows`] (row `i` of either layout, and asking the
//! memory ahead for rows read in place) and [`KeyRows`] (the element type chosen at run
//! time, [`each_rows!`] to run one generic body on either) with their shape checks.
//!
//! Must not know: what the keys are used for, the engine's block tables.

use half::f16;
use std::ops::Range;

use super::PolicyError;

/// `each_rows!(key_rows, r => body)`: `body` with `r` bound to the [`Rows`] of whichever
/// element type `key_rows` holds (one generic body, monomorphised for each).
macro_rules! each_rows {
    ($keys:expr, $r:ident => $body:expr) => {
        match $keys {
            $crate::policy::keys::KeyRows::F32($r) => $body,
            $crate::policy::keys::KeyRows::F16($r) => $body,
        }
    };
}
pub(crate) use each_rows;

/// An element of a key row: f32, or f16 widened exactly.
pub trait KeyElem: Copy + Send + Sync + std::fmt::Debug + 'static {
    /// Zero.
    const ZERO: Self;

    /// The value as f32 (exact).
    fn widen(self) -> f32;

    /// `dst[k] = src[k].widen()` for the shorter length (vectorised where it can be).
    fn widen_into(src: &[Self], dst: &mut [f32]);

    /// Sixteen consecutive elements at `p`, widened. For the AVX-512 paths: fast only
    /// inlined into a function with their target features (`crate::simd`).
    ///
    /// # Safety
    /// The CPU must have AVX-512F (the caller's run-time check) and `p` must point to 16
    /// readable elements.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512;

    /// Eight consecutive elements at `p`, widened. For the 256-bit paths: fast only
    /// inlined into a function with their target features (`crate::simd`).
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C (x86-64-v3; the caller's run-time check) and
    /// `p` must point to 8 readable elements.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;

    /// The first `n < 8` elements at `p`, widened, the other lanes zero.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C and `p` must point to `n` readable elements.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8_first(p: *const Self, n: usize) -> std::arch::x86_64::__m256 {
        let mut tail = [Self::ZERO; 8];
        std::ptr::copy_nonoverlapping(p, tail.as_mut_ptr(), n);
        Self::load8(tail.as_ptr())
    }
}

impl KeyElem for f32 {
    const ZERO: f32 = 0.0;

    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }

    #[inline]
    fn widen_into(src: &[f32], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        dst[..n].copy_from_slice(&src[..n]);
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> std::arch::x86_64::__m512 {
        std::arch::x86_64::_mm512_loadu_ps(p)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        std::arch::x86_64::_mm256_loadu_ps(p)
    }
}

impl KeyElem for f16 {
    const ZERO: f16 = f16::ZERO;

    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }

    #[inline]
    fn widen_into(src: &[f16], dst: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        let n = src.len().min(dst.len());
        src[..n].convert_to_f32_slice(&mut dst[..n]);
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const f16) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }
}

/// Rows `0..len` of `dim` elements: one slice `[len, dim]`, or runs of `2^shift` rows
/// (row `i` is row `i % 2^shift` of run `i >> shift`).
#[derive(Debug, Clone, Copy)]
pub struct Rows<'a, E> {
    /// `[len, dim]` when `runs` is empty.
    flat: &'a [E],
    /// `[runs, 2^shift, dim]` (the last run may be shorter).
    runs: &'a [&'a [E]],
    shift: u32,
    len: usize,
    dim: usize,
}

impl<'a, E: KeyElem> Rows<'a, E> {
    /// One contiguous `[len, dim]` slice (`len = data.len() / dim`).
    pub fn flat(data: &'a [E], dim: usize) -> Self {
        Self {
            flat: data,
            runs: &[],
            shift: 0,
            len: data.len().checked_div(dim).unwrap_or(0),
            dim,
        }
    }

    /// `len` rows in runs of `run_len` rows (a power of two); every run but the last
    /// holds at least `run_len * dim` elements, the last enough for the rows it holds.
    pub fn runs(
        runs: &'a [&'a [E]],
        run_len: usize,
        len: usize,
        dim: usize,
    ) -> Result<Self, PolicyError> {
        if !run_len.is_power_of_two() {
            return Err(PolicyError::KeyRuns {
                why: format!("run length {run_len} is not a power of two"),
            });
        }
        let needed = len.div_ceil(run_len);
        if runs.len() < needed {
            return Err(PolicyError::KeyRuns {
                why: format!("{} runs of {run_len} rows for {len} rows", runs.len()),
            });
        }
        for (r, run) in runs[..needed].iter().enumerate() {
            let rows = run_len.min(len - r * run_len);
            // Checked: a wrapped product would pass the check and let rows reach past
            // their run.
            let Some(need) = rows.checked_mul(dim) else {
                return Err(PolicyError::KeyRuns {
                    why: format!("{rows} rows of {dim} values overflow"),
                });
            };
            if run.len() < need {
                return Err(PolicyError::KeyRuns {
                    why: format!("run {r} holds {} values, needs {need}", run.len()),
                });
            }
        }
        Ok(Self {
            flat: &[],
            runs: &runs[..needed],
            shift: run_len.trailing_zeros(),
            len,
            dim,
        })
    }

    /// Number of rows.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no rows.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements per row.
    #[inline]
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Values described: the slice's length when flat (so that a slice that is not a
    /// whole number of rows shows), `len * dim` in runs.
    pub fn values(&self) -> usize {
        if self.runs.is_empty() {
            self.flat.len()
        } else {
            self.len * self.dim
        }
    }

    /// Row `i` (`i < len`, else the call panics).
    #[inline(always)]
    pub fn row(&self, i: usize) -> &'a [E] {
        // SAFETY: `row_ptr` points at the `dim` elements of row `i`.
        unsafe { std::slice::from_raw_parts(self.row_ptr(i), self.dim) }
    }

    /// The first element of row `i` (`i < len`, else the call panics): one check of the
    /// index instead of the slices' bounds on every row of the hot scans.
    #[inline(always)]
    fn row_ptr(&self, i: usize) -> *const E {
        assert!(i < self.len, "row {i} of {}", self.len);
        let d = self.dim;
        // SAFETY: `i < len`, and the constructors checked that the flat slice or the runs
        // hold `dim` elements for every row below `len`.
        unsafe {
            if self.runs.is_empty() {
                self.flat.as_ptr().add(i * d)
            } else {
                let run = self.runs.get_unchecked(i >> self.shift);
                run.as_ptr().add((i & ((1 << self.shift) - 1)) * d)
            }
        }
    }

    /// Rows `index(0), .., index(N - 1)`. A plain loop: `std::array::from_fn` puts closure
    /// adapters between the caller and [`Self::row`] that the compiler at times leaves
    /// out of line, a call per row in the hot scans.
    #[inline(always)]
    pub fn rows_at<const N: usize>(&self, index: impl Fn(usize) -> usize) -> [&'a [E]; N] {
        let mut out: [&'a [E]; N] = [&[]; N];
        for (k, o) in out.iter_mut().enumerate() {
            *o = self.row(index(k));
        }
        out
    }

    /// [`Self::rows_at`] as pointers to the rows' first elements.
    #[inline(always)]
    pub fn ptrs_at<const N: usize>(&self, index: impl Fn(usize) -> usize) -> [*const E; N] {
        let mut out = [std::ptr::null(); N];
        for (k, o) in out.iter_mut().enumerate() {
            *o = self.row_ptr(index(k));
        }
        out
    }

    /// Asks the memory for rows `i..i + n` (those before `len`) ahead of their use, run by
    /// run, when the rows lie in runs (a paged cache read in place, so likely cold, and
    /// whose 4 KB runs the hardware prefetcher does not cross); a no-op for a flat slice
    /// (typically a copy just made, warm, where prefetching only costs). A hint: no effect
    /// on any result.
    #[inline(always)]
    pub fn prefetch(&self, i: usize, n: usize) {
        if self.runs.is_empty() {
            return;
        }
        let end = (i + n).min(self.len);
        let mut at = i;
        while at < end {
            // To the end of `at`'s run.
            let rest = ((((at >> self.shift) + 1) << self.shift).min(end)) - at;
            if let Some(span) = self.span(at, rest) {
                prefetch_lines(span);
            }
            at += rest;
        }
    }

    /// Rows `i..i + n` as one slice when they lie contiguously (`None` otherwise, or when
    /// they pass `len`).
    #[inline(always)]
    fn span(&self, i: usize, n: usize) -> Option<&'a [E]> {
        let d = self.dim;
        if i + n > self.len {
            return None;
        }
        if self.runs.is_empty() {
            return self.flat.get(i * d..(i + n) * d);
        }
        let off = i & ((1 << self.shift) - 1);
        if off + n > 1 << self.shift {
            return None;
        }
        self.runs[i >> self.shift].get(off * d..(off + n) * d)
    }

    /// Every row widened to f32, `[len, dim]`.
    pub fn to_f32(&self) -> Vec<f32> {
        (0..self.len)
            .flat_map(|i| self.row(i).iter().map(|x| x.widen()))
            .collect()
    }
}

/// Asks the memory for every cache line of `span`.
#[inline(always)]
fn prefetch_lines<E>(span: &[E]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let start = span.as_ptr() as *const i8;
        for line in (0..std::mem::size_of_val(span)).step_by(64) {
            // SAFETY: a prefetch reads nothing architecturally and never faults; the
            // address is inside `span`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.add(line)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = span;
}

/// The keys of one KV head, `[L, d]`, in the element type the cache stores.
#[derive(Debug, Clone, Copy)]
pub enum KeyRows<'a> {
    F32(Rows<'a, f32>),
    F16(Rows<'a, f16>),
}

impl<'a> KeyRows<'a> {
    /// Contiguous f32 keys `[len, dim]`.
    pub fn flat_f32(data: &'a [f32], dim: usize) -> Self {
        KeyRows::F32(Rows::flat(data, dim))
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        each_rows!(self, r => r.len())
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements per row.
    pub fn dim(&self) -> usize {
        each_rows!(self, r => r.dim())
    }

    /// Values described (see [`Rows::values`]).
    pub fn values(&self) -> usize {
        each_rows!(self, r => r.values())
    }

    /// Every row widened to f32, `[len, dim]`.
    pub fn to_f32(&self) -> Vec<f32> {
        each_rows!(self, r => r.to_f32())
    }

    /// Asks the memory for rows `i..i + n`: see [`Rows::prefetch`].
    pub fn prefetch(&self, i: usize, n: usize) {
        each_rows!(self, r => r.prefetch(i, n))
    }
}

/// A cursor asking the memory for rows of a head, a few at a time between other work,
/// in the order a compression first reads them: for a state that has not described every
/// row, all of them, those appended since the last compression (from `first`) first,
/// then the rest from row 0 ([`Prefetcher::new`]); for one that has, only the rows its
/// re-searches will read ([`Prefetcher::rows`]).
#[derive(Debug)]
pub struct Prefetcher<'a> {
    keys: KeyRows<'a>,
    /// Row ranges still to ask for, the next one last (each non-empty).
    ranges: Vec<Range<usize>>,
    /// Rows still to ask for, in all the ranges.
    left: usize,
}

impl<'a> Prefetcher<'a> {
    /// A cursor over `rows` rows of `keys` (at most all of them), starting at row `first`
    /// and wrapping to row 0.
    pub fn new(keys: KeyRows<'a>, first: usize, rows: usize) -> Self {
        let len = keys.len();
        let first = first.min(len);
        let upper = rows.min(len - first);
        let lower = (rows - upper).min(first);
        Self::rows(keys, vec![first..first + upper, 0..lower])
    }

    /// A cursor over the rows of `ranges`, in order (clamped to the rows `keys` has).
    pub fn rows(keys: KeyRows<'a>, ranges: Vec<Range<usize>>) -> Self {
        let len = keys.len();
        let ranges: Vec<Range<usize>> = ranges
            .into_iter()
            .rev()
            .map(|r| r.start.min(len)..r.end.min(len))
            .filter(|r| !r.is_empty())
            .collect();
        let left = ranges.iter().map(ExactSizeIterator::len).sum();
        Self { keys, ranges, left }
    }

    /// Rows not yet asked for.
    pub fn left(&self) -> usize {
        self.left
    }

    /// Asks for the next `n` rows (fewer at the end).
    pub fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let Some(r) = self.ranges.last_mut() else {
                return;
            };
            let take = n.min(r.len());
            self.keys.prefetch(r.start, take);
            r.start += take;
            self.left -= take;
            n -= take;
            if r.start == r.end {
                self.ranges.pop();
            }
        }
    }

    /// The row the next [`Self::advance`] starts at.
    #[cfg(test)]
    fn next_row(&self) -> Option<usize> {
        self.ranges.last().map(|r| r.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetcher_visits_every_row_once_new_rows_first() {
        let data = vec![0.0f32; 40 * 2];
        let runs: Vec<&[f32]> = data.chunks(8 * 2).collect();
        for keys in [
            KeyRows::flat_f32(&data, 2),
            KeyRows::F32(Rows::runs(&runs, 8, 40, 2).unwrap()),
        ] {
            for (first, step) in [(30usize, 3usize), (0, 7), (40, 5), (55, 1)] {
                // A cursor over fewer rows stops after them.
                let mut p = Prefetcher::new(keys, first, 12);
                p.advance(5);
                p.advance(10);
                assert_eq!(p.left, 0);
                let mut p = Prefetcher::new(keys, first, usize::MAX);
                assert_eq!(p.left(), 40);
                let mut order = Vec::new();
                while p.left > 0 {
                    let before = (p.next_row(), p.left);
                    p.advance(step);
                    let took = before.1 - p.left;
                    assert!(took == step.min(before.1), "{first} {step}");
                    order.push(before.0);
                }
                // Starts at `first` (clamped), wraps to 0, stops after all 40 rows.
                assert_eq!(order[0], Some(first.min(40) % 40));
                p.advance(3);
                assert_eq!(p.left, 0);
                // Chosen ranges, clamped to the rows, in the order given.
                let mut p = Prefetcher::rows(keys, vec![35..50, 2..5, 7..7, 60..70]);
                assert_eq!(p.left(), 8);
                assert_eq!(p.next_row(), Some(35));
                p.advance(6);
                assert_eq!((p.next_row(), p.left()), (Some(3), 2));
                p.advance(9);
                assert_eq!((p.next_row(), p.left()), (None, 0));
            }
            keys.prefetch(5, 30);
            keys.prefetch(38, 10);
        }
    }

    #[test]
    fn flat_and_runs_give_the_same_rows() {
        let dim = 3;
        let data: Vec<f32> = (0..7 * dim).map(|x| x as f32).collect();
        let flat = Rows::flat(&data, dim);
        let halves: Vec<f16> = data.iter().map(|&x| f16::from_f32(x)).collect();
        // Runs of 2 rows, the last holding one row (and spare room is allowed).
        let runs: Vec<&[f16]> = halves.chunks(2 * dim).collect();
        let paged = Rows::runs(&runs, 2, 7, dim).unwrap();
        assert_eq!(paged.len(), 7);
        for i in 0..7 {
            let a: Vec<f32> = paged.row(i).iter().map(|x| x.widen()).collect();
            assert_eq!(a, flat.row(i));
        }
        assert_eq!(KeyRows::F16(paged).to_f32(), data);
        // Spans: within one run, or anywhere when flat; never past the rows.
        assert_eq!(paged.span(2, 2).map(<[f16]>::len), Some(2 * dim));
        assert!(paged.span(1, 2).is_none(), "crosses a run");
        assert!(paged.span(6, 2).is_none(), "past the rows");
        assert_eq!(flat.span(1, 5), Some(&data[dim..6 * dim]));
        assert_eq!(KeyRows::flat_f32(&data, dim).len(), 7);
    }

    #[test]
    fn bad_runs_are_errors() {
        let data = [0.0f32; 12];
        let runs: Vec<&[f32]> = data.chunks(3).collect();
        assert!(
            Rows::runs(&runs, 3, 4, 1).is_err(),
            "run length not a power of two"
        );
        assert!(Rows::runs(&runs[..1], 2, 4, 1).is_err(), "too few runs");
        assert!(Rows::runs(&runs, 2, 8, 2).is_err(), "a run too short");
        assert!(Rows::runs(&runs, 2, 8, 1).is_ok());
        // 4 rows of usize::MAX / 4 + 2 values: the product wraps to a few values
        // without the check.
        let four: Vec<&[f32]> = data.chunks(4).take(1).collect();
        assert!(
            Rows::runs(&four, 4, 4, usize::MAX / 4 + 2).is_err(),
            "rows x dim overflows"
        );
    }
}
