//! `SamplingParams` and `KvCompression`: what a Python caller asks for, validated once
//! when the object is built (a `ValueError` naming the field), so that `generate` only
//! turns them into the engine's request types.
//!
//! Must not know: the engine thread, prompts, outputs.

use std::collections::BTreeMap;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rkv_core::config::CompressionConfig;
use rkv_core::CompressionOverrides;
use rkv_engine::logprobs::MAX_TOP_LOGPROBS;
use rkv_engine::{GenerationRequest, LogprobsRequest};

fn bad(field: &str, msg: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("{field} {msg}"))
}

/// Sampling settings of one `generate` call, as vLLM's `SamplingParams`.
#[pyclass(frozen, get_all, module = "rkv")]
#[derive(Debug, Clone)]
pub struct SamplingParams {
    /// Samples per prompt (they share the prompt's prefill; sample `i` is seeded `seed + i`).
    pub n: usize,
    /// 0: greedy.
    pub temperature: f32,
    pub top_p: f32,
    /// 0 or -1: no top-k cut.
    pub top_k: i64,
    /// `None`: a random seed per call.
    pub seed: Option<u64>,
    /// `None`: up to the model's context.
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    /// Alternatives reported with each generated token's log-probability (`None`: none).
    pub logprobs: Option<usize>,
    /// The same for each prompt token after the first.
    pub prompt_logprobs: Option<usize>,
}

/// Counts that must be at least `min`.
fn at_least(field: &str, v: i64, min: i64) -> PyResult<usize> {
    if v < min {
        return Err(bad(field, format!("must be at least {min}, got {v}")));
    }
    usize::try_from(v).map_err(|_| bad(field, format!("is too large: {v}")))
}

fn top(field: &str, v: Option<i64>) -> PyResult<Option<usize>> {
    v.map(|k| {
        let k = at_least(field, k, 0)?;
        if k > MAX_TOP_LOGPROBS {
            return Err(bad(
                field,
                format!("must be at most {MAX_TOP_LOGPROBS}, got {k}"),
            ));
        }
        Ok(k)
    })
    .transpose()
}

#[pymethods]
impl SamplingParams {
    #[new]
    #[pyo3(signature = (n=1, temperature=1.0, top_p=1.0, top_k=0, seed=None, max_tokens=Some(16),
                        stop=None, ignore_eos=false, logprobs=None, prompt_logprobs=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        n: i64,
        temperature: f64,
        top_p: f64,
        top_k: i64,
        seed: Option<u64>,
        max_tokens: Option<i64>,
        stop: Option<&Bound<'_, PyAny>>,
        ignore_eos: bool,
        logprobs: Option<i64>,
        prompt_logprobs: Option<i64>,
    ) -> PyResult<Self> {
        let n = at_least("SamplingParams.n", n, 1)?;
        if !(temperature.is_finite() && temperature >= 0.0) {
            return Err(bad(
                "SamplingParams.temperature",
                format!("must be a finite number >= 0, got {temperature}"),
            ));
        }
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(bad(
                "SamplingParams.top_p",
                format!("must be in (0, 1], got {top_p}"),
            ));
        }
        if top_k < -1 {
            return Err(bad(
                "SamplingParams.top_k",
                format!("must be -1 or 0 (off) or a positive count, got {top_k}"),
            ));
        }
        let max_tokens = max_tokens
            .map(|m| at_least("SamplingParams.max_tokens", m, 1))
            .transpose()?;
        let stop = match stop {
            None => Vec::new(),
            Some(s) => {
                if let Ok(one) = s.extract::<String>() {
                    vec![one]
                } else {
                    s.extract::<Vec<String>>().map_err(|_| {
                        PyTypeError::new_err("SamplingParams.stop must be a str or a list of str")
                    })?
                }
            }
        };
        if stop.iter().any(String::is_empty) {
            return Err(bad("SamplingParams.stop", "must not hold an empty string"));
        }
        Ok(Self {
            n,
            temperature: temperature as f32,
            top_p: top_p as f32,
            top_k,
            seed,
            max_tokens,
            stop,
            ignore_eos,
            logprobs: top("SamplingParams.logprobs", logprobs)?,
            prompt_logprobs: top("SamplingParams.prompt_logprobs", prompt_logprobs)?,
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "SamplingParams(n={}, temperature={}, top_p={}, top_k={}, seed={}, max_tokens={}, \
             stop={:?}, ignore_eos={}, logprobs={}, prompt_logprobs={})",
            self.n,
            self.temperature,
            self.top_p,
            self.top_k,
            opt(self.seed),
            opt(self.max_tokens),
            self.stop,
            if self.ignore_eos { "True" } else { "False" },
            opt(self.logprobs),
            opt(self.prompt_logprobs),
        )
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "None".to_string(), |v| v.to_string())
}

impl SamplingParams {
    /// The engine's request for `prompt` with at most `room` tokens left in the context;
    /// `seed` is this call's seed when the parameters name none.
    pub fn request(&self, prompt: Vec<u32>, room: usize, seed: u64) -> GenerationRequest {
        GenerationRequest {
            max_tokens: self.max_tokens.unwrap_or(room.max(1)),
            prompt,
            sampling: rkv_engine::SamplingParams {
                temperature: self.temperature,
                top_k: usize::try_from(self.top_k).unwrap_or(0),
                top_p: self.top_p,
                seed: self.seed.unwrap_or(seed),
            },
            ignore_eos: self.ignore_eos,
            stop: self.stop.clone(),
            logprobs: LogprobsRequest {
                generated: self.logprobs,
                prompt: self.prompt_logprobs,
            },
            grammar: None,
        }
    }
}

/// A KV compression: a policy and its budget (slots kept per layer and KV head), with
/// rkv's defaults for every field not given. Validated when built.
#[pyclass(frozen, module = "rkv")]
#[derive(Debug, Clone)]
pub struct KvCompression {
    pub config: CompressionConfig,
}

#[pymethods]
impl KvCompression {
    #[new]
    #[pyo3(signature = (policy, budget=None, *, buffer=None, window=None, lambda_=None,
                        threshold=None, kernel=None, sinks=None, prompt=None, prompt_chunk=None,
                        params=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        policy: String,
        budget: Option<u64>,
        buffer: Option<u64>,
        window: Option<u64>,
        lambda_: Option<f64>,
        threshold: Option<f64>,
        kernel: Option<u64>,
        sinks: Option<u64>,
        prompt: Option<String>,
        prompt_chunk: Option<u64>,
        params: Option<BTreeMap<String, f64>>,
    ) -> PyResult<Self> {
        Self::resolve(CompressionOverrides {
            policy: Some(policy),
            budget,
            buffer,
            window,
            lambda: lambda_,
            threshold,
            kernel,
            sinks,
            params: params.unwrap_or_default(),
            prompt,
            prompt_chunk,
        })
    }

    /// The same from a dict of those fields (`lambda` may be spelt as it is), as Ray's
    /// `fn_constructor_kwargs` and JSON configurations give it.
    #[staticmethod]
    fn from_dict(d: &Bound<'_, PyDict>) -> PyResult<Self> {
        const FIELDS: [&str; 11] = [
            "policy",
            "budget",
            "buffer",
            "window",
            "lambda",
            "threshold",
            "kernel",
            "sinks",
            "prompt",
            "prompt_chunk",
            "params",
        ];
        for k in d.keys() {
            let k: String = k.extract()?;
            if !FIELDS.contains(&k.as_str()) {
                return Err(bad(
                    "KvCompression",
                    format!("has no field {k:?} (fields: {})", FIELDS.join(", ")),
                ));
            }
        }
        let get = |k: &str| d.get_item(k);
        let policy: String = get("policy")?
            .ok_or_else(|| bad("KvCompression.policy", "is required"))?
            .extract()?;
        macro_rules! field {
            ($k:literal) => {
                match get($k)? {
                    Some(v) if !v.is_none() => Some(v.extract().map_err(|_| {
                        PyTypeError::new_err(format!("KvCompression.{} has the wrong type", $k))
                    })?),
                    _ => None,
                }
            };
        }
        Self::resolve(CompressionOverrides {
            policy: Some(policy),
            budget: field!("budget"),
            buffer: field!("buffer"),
            window: field!("window"),
            lambda: field!("lambda"),
            threshold: field!("threshold"),
            kernel: field!("kernel"),
            sinks: field!("sinks"),
            params: field!("params").unwrap_or_default(),
            prompt: field!("prompt"),
            prompt_chunk: field!("prompt_chunk"),
        })
    }

    #[getter]
    fn policy(&self) -> &'static str {
        self.config.policy.name()
    }

    /// `None` for FullKV, which keeps everything.
    #[getter]
    fn budget(&self) -> Option<usize> {
        self.config
            .policy
            .compresses()
            .then_some(self.config.budget)
    }

    #[getter]
    fn buffer(&self) -> usize {
        self.config.buffer
    }

    #[getter]
    fn window(&self) -> usize {
        self.config.window
    }

    fn __repr__(&self) -> String {
        match self.budget() {
            Some(b) => format!(
                "KvCompression(policy={:?}, budget={b}, buffer={}, window={})",
                self.policy(),
                self.config.buffer,
                self.config.window
            ),
            None => format!("KvCompression(policy={:?})", self.policy()),
        }
    }
}

impl KvCompression {
    /// `o` over rkv's default compression, validated: a `ValueError` naming the field.
    fn resolve(o: CompressionOverrides) -> PyResult<Self> {
        let config = o
            .resolve(CompressionConfig::default())
            .map_err(|e| match &e.field {
                Some(_) => PyValueError::new_err(format!("KvCompression.{e}")),
                None => PyValueError::new_err(format!("KvCompression ({})", e.message)),
            })?;
        Ok(Self { config })
    }
}

/// A `KvCompression`, a dict of its fields, or a policy name (at rkv's default budget).
pub fn compression_of(v: &Bound<'_, PyAny>) -> PyResult<CompressionConfig> {
    if let Ok(k) = v.cast::<KvCompression>() {
        return Ok(k.get().config);
    }
    if let Ok(d) = v.cast::<PyDict>() {
        return Ok(KvCompression::from_dict(d)?.config);
    }
    if let Ok(name) = v.extract::<String>() {
        return Ok(KvCompression::resolve(CompressionOverrides {
            policy: Some(name),
            ..CompressionOverrides::default()
        })?
        .config);
    }
    Err(PyTypeError::new_err(
        "kv_compression must be a KvCompression, a dict of its fields or a policy name",
    ))
}
