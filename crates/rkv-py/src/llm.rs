//! The engine a Python `LLM` drives: the model loaded once, its engine thread, prompts
//! turned into requests and the chat template applied.
//!
//! Owns the engine's configuration from Python's arguments (validated here, a
//! `ValueError` naming the argument) and the mapping of prompts to submissions. Waiting
//! for them is [`crate::run`]'s. Must not know: tqdm, Ray, how Python shapes its calls.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rkv_core::config::CompressionConfig;
use rkv_engine::kv::parse_size;
use rkv_engine::{Admission, EngineConfig, EngineHandle, HandleConfig, KvDtype, Submission};
use rkv_model::WeightMode;

use crate::outputs::{completion, prompt_logprobs, CompletionOutput, RequestOutput};
use crate::params::{compression_of, SamplingParams};
use crate::run::run;

/// A prompt: text (encoded with the model's tokenizer) or token ids as they are.
#[derive(FromPyObject)]
pub enum PromptIn {
    Text(String),
    Tokens(Vec<u32>),
}

/// One model, its KV block pool and the thread that runs it.
#[pyclass(frozen, module = "rkv._rkv")]
pub struct Engine {
    handle: EngineHandle,
    kv_blocks: usize,
    bytes_per_block: usize,
    next_request: AtomicU64,
}

fn arg(name: &str, msg: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("{name}: {msg}"))
}

/// `kv_memory` as bytes: an int, or a string with a unit (`"256MiB"`).
fn memory_of(v: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(n) = v.extract::<i64>() {
        return u64::try_from(n)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| arg("kv_memory", format!("must be a positive size, got {n}")));
    }
    let s: String = v.extract().map_err(|_| {
        arg(
            "kv_memory",
            "must be an int (bytes) or a str such as \"256MiB\"",
        )
    })?;
    parse_size(&s).map_err(|e| arg("kv_memory", e))
}

#[pymethods]
impl Engine {
    #[new]
    #[pyo3(signature = (model_path, kv_memory, threads=None, kv_compression=None,
                        kv_dtype="f16", max_num_seqs=64, max_batch_tokens=512,
                        enable_prefix_caching=true, kv_admission="grow"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model_path: PathBuf,
        kv_memory: &Bound<'_, PyAny>,
        threads: Option<i64>,
        kv_compression: Option<&Bound<'_, PyAny>>,
        kv_dtype: &str,
        max_num_seqs: i64,
        max_batch_tokens: i64,
        enable_prefix_caching: bool,
        kv_admission: &str,
    ) -> PyResult<Self> {
        let memory = memory_of(kv_memory)?;
        let threads = match threads {
            None => None,
            Some(t) if (1..=512).contains(&t) => Some(t as usize),
            Some(t) => return Err(arg("threads", format!("must be 1 to 512, got {t}"))),
        };
        let compression = match kv_compression {
            Some(c) if !c.is_none() => compression_of(c)?,
            _ => CompressionConfig::full(),
        };
        let kv_dtype = KvDtype::parse(kv_dtype).map_err(|e| arg("kv_dtype", e))?;
        let admission: Admission = kv_admission
            .parse()
            .map_err(|e: rkv_engine::EngineError| arg("kv_admission", e))?;
        let positive = |name: &str, v: i64| {
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| arg(name, format!("must be at least 1, got {v}")))
        };
        let max_num_seqs = positive("max_num_seqs", max_num_seqs)?;
        let max_batch_tokens = positive("max_batch_tokens", max_batch_tokens)?;
        let model = py
            .detach(|| rkv_model::load(&model_path, WeightMode::Native))
            .map_err(|e| {
                arg(
                    "model",
                    format!("cannot load {}: {e}", model_path.display()),
                )
            })?;
        let default = EngineConfig::default();
        let shape = model.transformer.attention_shape();
        let bytes_per_block = EngineConfig::bytes_per_block(shape, kv_dtype, default.block_size);
        let kv_blocks = EngineConfig::blocks_in(memory, shape, kv_dtype, default.block_size);
        if kv_blocks == 0 {
            return Err(arg(
                "kv_memory",
                format!(
                    "{memory} bytes hold no KV block ({bytes_per_block} bytes each for this model)"
                ),
            ));
        }
        let cfg = EngineConfig {
            kv_dtype,
            compression,
            kv_blocks,
            max_batch_tokens,
            max_num_seqs: max_num_seqs.min(max_batch_tokens),
            admission,
            prefix_cache: enable_prefix_caching,
            ..default
        };
        // Offline: every prompt of a call is queued at once; memory-aware admission,
        // not the queue bound, decides what runs.
        let hc = HandleConfig {
            max_queue: usize::MAX,
            threads,
        };
        let handle = py
            .detach(|| EngineHandle::spawn(model, cfg, hc))
            .map_err(|e| PyRuntimeError::new_err(format!("cannot start the engine: {e}")))?;
        Ok(Self {
            handle,
            kv_blocks,
            bytes_per_block,
            next_request: AtomicU64::new(0),
        })
    }

    /// Blocks in the KV pool, and bytes each holds.
    #[getter]
    fn kv_blocks(&self) -> usize {
        self.kv_blocks
    }

    /// KV memory the pool holds, in bytes (at most `kv_memory`).
    #[getter]
    fn kv_capacity_bytes(&self) -> usize {
        self.kv_blocks * self.bytes_per_block
    }

    /// Prompt plus generated tokens the model accepts.
    #[getter]
    fn max_context(&self) -> usize {
        self.handle.max_context()
    }

    /// The engine's gauges and counters as of its last step.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.handle.metrics().counters;
        let d = PyDict::new(py);
        d.set_item("running", c.running)?;
        d.set_item("waiting", c.waiting)?;
        d.set_item("kv_blocks_used", c.kv_blocks_used)?;
        d.set_item("kv_blocks_total", c.kv_blocks_total)?;
        d.set_item("kv_blocks_cached", c.kv_blocks_cached)?;
        d.set_item("preemptions_total", c.preemptions_total)?;
        d.set_item("prompt_tokens_total", c.prompt_tokens_total)?;
        d.set_item("generated_tokens_total", c.generated_tokens_total)?;
        d.set_item("compressions_total", c.compressions_total)?;
        Ok(d)
    }

    /// Token ids of `text`, as a text prompt is encoded.
    fn encode(&self, text: &str) -> PyResult<Vec<u32>> {
        self.handle
            .tokenizer()
            .encode(text)
            .map_err(|e| arg("prompt", e))
    }

    /// Text of `ids`, special tokens skipped.
    fn decode(&self, ids: Vec<u32>) -> PyResult<String> {
        self.handle
            .tokenizer()
            .decode(&ids, true)
            .map_err(|e| arg("token_ids", e))
    }

    /// Each conversation (a JSON array of messages) rendered with the model's chat
    /// template; `tools` (a JSON array) as transformers passes them.
    #[pyo3(signature = (conversations, add_generation_prompt=true, tools=None))]
    fn render_chat(
        &self,
        conversations: Vec<String>,
        add_generation_prompt: bool,
        tools: Option<String>,
    ) -> PyResult<Vec<String>> {
        let json = |what: &str, s: &str| {
            serde_json::from_str::<serde_json::Value>(s).map_err(|e| arg(what, e))
        };
        let tools = tools.map(|t| json("tools", &t)).transpose()?;
        conversations
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let what = format!("messages[{i}]");
                let msgs = json(&what, c)?;
                if msgs.as_array().is_none_or(Vec::is_empty) {
                    return Err(arg(&what, "must be a non-empty list of messages"));
                }
                self.handle
                    .tokenizer()
                    .apply_chat_template_json(&msgs, tools.as_ref(), add_generation_prompt)
                    .map_err(|e| arg(&what, format!("cannot render the chat: {e}")))
            })
            .collect()
    }

    /// Runs every prompt with its parameters (`params[i]` for `prompts[i]`), all queued
    /// at once; `progress(k)` hears of each `k` samples finished. Nothing is submitted
    /// unless every prompt is valid; Ctrl-C cancels them all.
    #[pyo3(signature = (prompts, params, kv_compression=None, progress=None))]
    fn generate(
        &self,
        py: Python<'_>,
        prompts: Vec<PromptIn>,
        params: Vec<PyRef<'_, SamplingParams>>,
        kv_compression: Option<&Bound<'_, PyAny>>,
        progress: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Vec<RequestOutput>> {
        if params.len() != prompts.len() {
            return Err(arg(
                "sampling_params",
                format!("{} given for {} prompts", params.len(), prompts.len()),
            ));
        }
        let comp = match kv_compression {
            Some(c) if !c.is_none() => compression_of(c)?,
            _ => self.handle.default_compression(),
        };
        let tok = self.handle.tokenizer();
        let call_seed: u64 = rand::random();
        let mut subs = Vec::with_capacity(prompts.len());
        let mut texts = Vec::with_capacity(prompts.len());
        for (i, (p, sp)) in prompts.into_iter().zip(&params).enumerate() {
            let (ids, text) = match p {
                PromptIn::Text(t) => (
                    tok.encode(&t)
                        .map_err(|e| arg(&format!("prompts[{i}]"), e))?,
                    Some(t),
                ),
                PromptIn::Tokens(ids) => (ids, None),
            };
            let room = self.handle.max_context().saturating_sub(ids.len());
            let sub = Submission {
                request: sp.request(ids, room, call_seed.wrapping_add(i as u64 * 1_000_003)),
                compression: Some(comp),
                n: sp.n,
            };
            self.handle
                .check(&sub)
                .map_err(|e| arg(&format!("prompts[{i}]"), e))?;
            subs.push(sub);
            texts.push(text);
        }
        let first = self
            .next_request
            .fetch_add(subs.len() as u64, Ordering::Relaxed);
        let prompt_ids: Vec<Vec<u32>> = subs.iter().map(|s| s.request.prompt.clone()).collect();
        let outputs = run(py, &self.handle, subs, progress.as_ref())?;
        let mut res = Vec::with_capacity(outputs.len());
        for (i, ((samples, text), ids)) in
            outputs.into_iter().zip(texts).zip(prompt_ids).enumerate()
        {
            let prompt_lps = match samples.first() {
                Some(s) => prompt_logprobs(py, tok, s)?,
                None => None,
            };
            let cached = samples.first().map_or(0, |s| s.stats.cached_tokens);
            let outs = samples
                .iter()
                .enumerate()
                .map(|(j, s)| Py::new(py, completion(py, tok, j, s, &comp)?))
                .collect::<PyResult<Vec<Py<CompletionOutput>>>>()?;
            res.push(RequestOutput {
                request_id: (first + i as u64).to_string(),
                prompt: text,
                prompt_token_ids: ids,
                prompt_logprobs: prompt_lps,
                outputs: outs,
                finished: true,
                num_cached_tokens: cached,
            });
        }
        Ok(res)
    }

    /// Lets queued and running requests finish, then stops the engine thread. Later
    /// calls fail; dropping the engine does the same.
    fn shutdown(&self, py: Python<'_>) {
        py.detach(|| self.handle.shutdown());
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}
