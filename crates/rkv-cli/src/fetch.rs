//! `rkv fetch` and `--model NAME`: the model cache at `$RKV_HOME/models` (default
//! `~/.cache/rkv/models`). The known models and their download live in
//! [`rkv_model::hub`], shared with the Python package; this module only reads the
//! environment that says where the cache is.

use std::path::{Path, PathBuf};

use anyhow::Result;
use rkv_model::hub::ModelCache;
pub use rkv_model::hub::{known, known_names, KnownModel, DEFAULT_MODEL};

/// `$RKV_HOME`, default `~/.cache/rkv`.
pub fn rkv_home() -> PathBuf {
    if let Some(h) = std::env::var_os("RKV_HOME") {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("rkv")
}

/// The cache this process uses.
pub fn cache() -> ModelCache {
    ModelCache::new(rkv_home().join("models"))
}

/// Downloads `m` into the cache (again, with `force`, or when the file there does not
/// match its checksum).
pub fn fetch(m: &KnownModel, force: bool) -> Result<PathBuf> {
    Ok(cache().fetch(m, force)?)
}

/// Makes sure the default model is in the cache; returns its path.
pub fn ensure_default_model() -> Result<PathBuf> {
    Ok(cache().ensure(&DEFAULT_MODEL)?)
}

/// What `--model VALUE` names: an existing path as it is; else a known model's name,
/// fetched if absent; else an error that lists the names.
pub fn resolve_model(value: &Path) -> Result<PathBuf> {
    Ok(cache().resolve(Some(value))?)
}
