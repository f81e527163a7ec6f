//! Golden-vector plumbing for the conformance tests (format: `shared/golden/README.md`).
//!
//! Owns: locating the vectors, reading safetensors (F32, I64, `__metadata__`), turning
//! metadata into a [`CompressionConfig`], and computing window logits from stored
//! queries. Must not know: what a policy computes (that is the library's job).

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rkv_core::{CompressionConfig, PolicyKind};
use safetensors::{Dtype, SafeTensors};

/// The workspace's default vectors: `<repo>/../shared/golden`.
pub const DEFAULT_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/golden");
/// The small committed subset (in rkv-core, whichever crate includes this module).
pub const FALLBACK_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../rkv-core/tests/golden");

/// Where the vectors come from: `$RKV_GOLDEN_DIR`, else the shared folder, else the
/// committed subset. The string says which, for the log.
pub fn golden_root() -> Result<(PathBuf, String), String> {
    if let Ok(dir) = std::env::var("RKV_GOLDEN_DIR") {
        let p = PathBuf::from(&dir);
        return if p.is_dir() {
            Ok((p, format!("RKV_GOLDEN_DIR={dir}")))
        } else {
            Err(format!("RKV_GOLDEN_DIR={dir} is not a directory; point it at a folder holding kv-select/ and kv-stream/"))
        };
    }
    let shared = PathBuf::from(DEFAULT_DIR);
    if shared.is_dir() {
        return Ok((shared, format!("the full shared set at {DEFAULT_DIR}")));
    }
    let fallback = PathBuf::from(FALLBACK_DIR);
    if fallback.is_dir() {
        // Straight to the stream, so that a normal (captured) test run shows it too.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("fallback: golden vectors: the committed subset ({DEFAULT_DIR} is missing)\n")
                .as_bytes(),
        );
        return Ok((
            fallback,
            format!("the committed subset at {FALLBACK_DIR} ({DEFAULT_DIR} is missing)"),
        ));
    }
    Err(format!(
        "no golden vectors: expected {DEFAULT_DIR} (shared/golden beside the repo), the committed subset \
         {FALLBACK_DIR}, or RKV_GOLDEN_DIR pointing at a folder with kv-select/ and kv-stream/"
    ))
}

/// Every `*.safetensors` in `root/sub`, sorted; an error when there are none.
pub fn vector_files(root: &Path, sub: &str) -> Result<Vec<PathBuf>, String> {
    let dir = root.join(sub);
    let entries =
        std::fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("no *.safetensors files in {}", dir.display()));
    }
    Ok(files)
}

/// One golden file, fully decoded.
pub struct Case {
    pub name: String,
    pub meta: HashMap<String, String>,
    f32s: HashMap<String, (Vec<usize>, Vec<f32>)>,
    i64s: HashMap<String, (Vec<usize>, Vec<i64>)>,
}

impl Case {
    pub fn load(path: &Path) -> Result<Case, String> {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bytes = std::fs::read(path).map_err(|e| format!("{name}: {e}"))?;
        let (_, header) = SafeTensors::read_metadata(&bytes).map_err(|e| format!("{name}: {e}"))?;
        let meta = header.metadata().clone().unwrap_or_default();
        let st = SafeTensors::deserialize(&bytes).map_err(|e| format!("{name}: {e}"))?;
        let mut f32s = HashMap::new();
        let mut i64s = HashMap::new();
        for (tname, view) in st.tensors() {
            let shape = view.shape().to_vec();
            match view.dtype() {
                Dtype::F32 => {
                    let v = view
                        .data()
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect();
                    f32s.insert(tname, (shape, v));
                }
                Dtype::I64 => {
                    let v = view
                        .data()
                        .chunks_exact(8)
                        .map(|c| {
                            i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
                        })
                        .collect();
                    i64s.insert(tname, (shape, v));
                }
                other => {
                    return Err(format!(
                        "{name}: tensor {tname} has unsupported dtype {other:?}"
                    ))
                }
            }
        }
        Ok(Case {
            name,
            meta,
            f32s,
            i64s,
        })
    }

    pub fn meta_str(&self, key: &str) -> Result<&str, String> {
        self.meta
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| format!("{}: metadata {key} missing", self.name))
    }

    pub fn meta_usize(&self, key: &str) -> Result<usize, String> {
        let s = self.meta_str(key)?;
        s.parse()
            .map_err(|e| format!("{}: metadata {key}={s}: {e}", self.name))
    }

    /// A numeric parameter that may be `"n/a"` (or absent): `None` then.
    pub fn meta_opt<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>, String> {
        match self.meta.get(key).map(String::as_str) {
            None | Some("n/a") => Ok(None),
            Some(s) => s
                .parse()
                .map(Some)
                .map_err(|_| format!("{}: metadata {key}={s} is not a number", self.name)),
        }
    }

    pub fn f32(&self, key: &str) -> Result<(&[usize], &[f32]), String> {
        self.f32s
            .get(key)
            .map(|(s, v)| (s.as_slice(), v.as_slice()))
            .ok_or_else(|| format!("{}: tensor {key} missing", self.name))
    }

    pub fn has(&self, key: &str) -> bool {
        self.f32s.contains_key(key) || self.i64s.contains_key(key)
    }

    pub fn i64(&self, key: &str) -> Result<(&[usize], &[i64]), String> {
        self.i64s
            .get(key)
            .map(|(s, v)| (s.as_slice(), v.as_slice()))
            .ok_or_else(|| format!("{}: tensor {key} missing", self.name))
    }

    /// The file's compression config; parameters stored as `"n/a"` keep their defaults.
    pub fn config(&self) -> Result<CompressionConfig, String> {
        let policy: PolicyKind = self
            .meta_str("policy")?
            .parse()
            .map_err(|e| format!("{}: {e}", self.name))?;
        let d = CompressionConfig::default();
        let cfg = CompressionConfig {
            policy,
            budget: self.meta_usize("budget")?,
            buffer: self.meta_opt("buffer")?.unwrap_or(d.buffer),
            window: self.meta_opt("window")?.unwrap_or(d.window),
            kernel: self.meta_opt("kernel")?.unwrap_or(d.kernel),
            lambda: self.meta_opt("lambda")?.unwrap_or(d.lambda),
            threshold: self.meta_opt("threshold")?.unwrap_or(d.threshold),
            sinks: self.meta_opt("sinks")?.unwrap_or(d.sinks),
            ..d
        };
        cfg.validate().map_err(|e| format!("{}: {e}", self.name))?;
        Ok(cfg)
    }
}

/// Row `r` of a row-major `[.., width]` array.
pub fn row(data: &[f32], width: usize, r: usize) -> &[f32] {
    &data[r * width..(r + 1) * width]
}

/// Window logits `[g, w, n]` for KV head `h`: `q.k/sqrt(d)` in f32 for query heads
/// `h*g..h*g+g`, the `w` window queries and the first `n` keys.
/// `query_rows(hq, t)` gives window query `t` of query head `hq`; `keys`: `[>= n, d]`.
pub fn window_logits<'a>(
    query_rows: impl Fn(usize, usize) -> &'a [f32],
    keys: &[f32],
    h: usize,
    g: usize,
    w: usize,
    n: usize,
    d: usize,
) -> Vec<f32> {
    let scale = (d as f32).sqrt();
    let mut out = Vec::with_capacity(g * w * n);
    for i in 0..g {
        for t in 0..w {
            let q = query_rows(h * g + i, t);
            for j in 0..n {
                let k = row(keys, d, j);
                let dot: f32 = q.iter().zip(k).map(|(a, b)| a * b).sum();
                out.push(dot / scale);
            }
        }
    }
    out
}

/// The golden score rule: `|a - e| <= 1e-4 * (|e| + mean |e| of the row)`; the first
/// violating index, if any.
pub fn first_score_mismatch(actual: &[f64], expected: &[f32]) -> Option<(usize, f64, f32)> {
    let mean =
        expected.iter().map(|e| f64::from(e.abs())).sum::<f64>() / expected.len().max(1) as f64;
    if actual.len() != expected.len() {
        return Some((actual.len().min(expected.len()), f64::NAN, f32::NAN));
    }
    actual
        .iter()
        .zip(expected)
        .enumerate()
        .find_map(|(j, (&a, &e))| {
            let e64 = f64::from(e);
            ((a - e64).abs() > 1e-4 * (e64.abs() + mean)).then_some((j, a, e))
        })
}
