//! rkv-py: the Python package's native module `rkv._rkv` (PyO3). vLLM's offline API
//! (`LLM`, `SamplingParams`, `RequestOutput`) is the Python layer in `python/rkv`; this
//! crate gives it the engine, the validated parameter types and the output types.
//!
//! Must not know: HTTP, the environment (the Python layer says where the model cache
//! is), tqdm or Ray.

mod llm;
mod math;
mod outputs;
mod params;
mod run;

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rkv_model::hub::{known_names, ModelCache, DEFAULT_MODEL};

/// The model file `model` names: `None` the default model, a known model's name, or a
/// path; a named model absent from `cache_dir` is downloaded there with `python`'s pip.
#[pyfunction]
#[pyo3(signature = (model, cache_dir, python))]
fn resolve_model(
    py: Python<'_>,
    model: Option<PathBuf>,
    cache_dir: PathBuf,
    python: String,
) -> PyResult<PathBuf> {
    let cache = ModelCache::new(cache_dir).with_python(python);
    py.detach(|| cache.resolve(model.as_deref()))
        .map_err(|e| PyValueError::new_err(format!("model: {e}")))
}

#[pymodule]
fn _rkv(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<llm::Engine>()?;
    m.add_class::<params::SamplingParams>()?;
    m.add_class::<params::KvCompression>()?;
    m.add_class::<outputs::RequestOutput>()?;
    m.add_class::<outputs::CompletionOutput>()?;
    m.add_class::<outputs::Logprob>()?;
    m.add_class::<outputs::KvUsage>()?;
    m.add_function(wrap_pyfunction!(resolve_model, m)?)?;
    m.add_function(wrap_pyfunction!(math::read_math_problems, m)?)?;
    m.add_function(wrap_pyfunction!(math::r1_prompt, m)?)?;
    m.add_function(wrap_pyfunction!(math::grade, m)?)?;
    m.add("DEFAULT_MODEL", DEFAULT_MODEL.name)?;
    m.add("KNOWN_MODELS", known_names())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
