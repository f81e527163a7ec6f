//! What `generate` returns, in the shapes of vLLM's `RequestOutput`, `CompletionOutput`
//! and `Logprob`, with rkv's KV usage of each sample (`KvUsage`).
//!
//! Must not know: the engine thread, how requests were submitted.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use rkv_core::config::CompressionConfig;
use rkv_engine::{GenerationOutput, TokenLogprob};
use rkv_model::Tokenizer;

/// One token's log-probability (vLLM's `Logprob`).
#[pyclass(frozen, get_all, module = "rkv")]
#[derive(Debug, Clone)]
pub struct Logprob {
    pub logprob: f32,
    /// 1 + how many tokens were more likely.
    pub rank: u32,
    pub decoded_token: Option<String>,
}

#[pymethods]
impl Logprob {
    fn __repr__(&self) -> String {
        format!(
            "Logprob(logprob={}, rank={}, decoded_token={:?})",
            self.logprob,
            self.rank,
            self.decoded_token.as_deref().unwrap_or("")
        )
    }
}

/// The KV memory one sample used and what compression did to it.
#[pyclass(frozen, get_all, module = "rkv")]
#[derive(Debug, Clone)]
pub struct KvUsage {
    pub policy: String,
    /// `None` for FullKV.
    pub budget: Option<usize>,
    /// Most slots any layer and KV head held at once.
    pub slots_peak: usize,
    /// Most KV bytes held at once, in whole blocks.
    pub bytes_peak: usize,
    pub compressions: usize,
    /// Tokens evicted over all compressions (per layer and head).
    pub evicted_tokens: usize,
    /// Prompt tokens whose keys and values came from the prefix cache.
    pub cached_tokens: usize,
}

#[pymethods]
impl KvUsage {
    fn __repr__(&self) -> String {
        format!(
            "KvUsage(policy={:?}, budget={}, slots_peak={}, bytes_peak={}, compressions={}, \
             evicted_tokens={}, cached_tokens={})",
            self.policy,
            self.budget.map_or_else(|| "None".into(), |b| b.to_string()),
            self.slots_peak,
            self.bytes_peak,
            self.compressions,
            self.evicted_tokens,
            self.cached_tokens
        )
    }

    /// The fields as a dict (a Ray Data column holds dicts).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("policy", &self.policy)?;
        d.set_item("budget", self.budget)?;
        d.set_item("slots_peak", self.slots_peak)?;
        d.set_item("bytes_peak", self.bytes_peak)?;
        d.set_item("compressions", self.compressions)?;
        d.set_item("evicted_tokens", self.evicted_tokens)?;
        d.set_item("cached_tokens", self.cached_tokens)?;
        Ok(d)
    }
}

/// One sample of a prompt (vLLM's `CompletionOutput`).
#[pyclass(frozen, get_all, module = "rkv")]
pub struct CompletionOutput {
    pub index: usize,
    pub text: String,
    pub token_ids: Vec<u32>,
    /// Sum of the generated tokens' log-probabilities, when they were asked for.
    pub cumulative_logprob: Option<f64>,
    /// Per generated token: `{token_id: Logprob}` for the token and its alternatives.
    pub logprobs: Option<Vec<Py<PyDict>>>,
    /// `"stop"` (end of sequence or a stop string) or `"length"`.
    pub finish_reason: String,
    pub kv: Py<KvUsage>,
}

#[pymethods]
impl CompletionOutput {
    /// True once the sample is done (always, in an offline `generate`).
    fn finished(&self) -> bool {
        true
    }

    fn __repr__(&self) -> String {
        format!(
            "CompletionOutput(index={}, text={:?}, token_ids={:?}, cumulative_logprob={}, \
             finish_reason={:?}, kv={})",
            self.index,
            self.text,
            self.token_ids,
            self.cumulative_logprob
                .map_or_else(|| "None".into(), |c| c.to_string()),
            self.finish_reason,
            self.kv.get().__repr__(),
        )
    }
}

/// One prompt's samples (vLLM's `RequestOutput`).
#[pyclass(frozen, get_all, module = "rkv")]
pub struct RequestOutput {
    pub request_id: String,
    /// The prompt's text, `None` when it was given as token ids.
    pub prompt: Option<String>,
    pub prompt_token_ids: Vec<u32>,
    /// `None` for the first token, then `{token_id: Logprob}` per prompt token, when
    /// asked for.
    pub prompt_logprobs: Option<Vec<Option<Py<PyDict>>>>,
    pub outputs: Vec<Py<CompletionOutput>>,
    pub finished: bool,
    pub num_cached_tokens: usize,
}

#[pymethods]
impl RequestOutput {
    fn __repr__(&self) -> String {
        let outs: Vec<String> = self.outputs.iter().map(|o| o.get().__repr__()).collect();
        format!(
            "RequestOutput(request_id={:?}, prompt={}, prompt_token_ids={:?}, outputs=[{}], \
             finished={}, num_cached_tokens={})",
            self.request_id,
            self.prompt
                .as_ref()
                .map_or_else(|| "None".into(), |p| format!("{p:?}")),
            self.prompt_token_ids,
            outs.join(", "),
            if self.finished { "True" } else { "False" },
            self.num_cached_tokens
        )
    }
}

/// `{token_id: Logprob}` of one position: the token itself and its alternatives.
fn logprob_dict<'py>(
    py: Python<'py>,
    tok: &Tokenizer,
    lp: &TokenLogprob,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let entry = |id: u32, logprob: f32, rank: u32| Logprob {
        logprob,
        rank,
        decoded_token: Some(tok.token_text(id)),
    };
    d.set_item(lp.token, entry(lp.token, lp.logprob, lp.rank))?;
    for (i, &(id, l)) in lp.top.iter().enumerate() {
        if id != lp.token {
            d.set_item(id, entry(id, l, i as u32 + 1))?;
        }
    }
    Ok(d)
}

/// Builds one sample's output.
pub fn completion(
    py: Python<'_>,
    tok: &Tokenizer,
    index: usize,
    out: &GenerationOutput,
    comp: &CompressionConfig,
) -> PyResult<CompletionOutput> {
    let (logprobs, cumulative) = match &out.logprobs {
        Some(lps) => {
            let dicts = lps
                .iter()
                .map(|lp| logprob_dict(py, tok, lp).map(Bound::unbind))
                .collect::<PyResult<Vec<_>>>()?;
            let sum: f64 = lps.iter().map(|lp| f64::from(lp.logprob)).sum();
            (Some(dicts), Some(sum))
        }
        None => (None, None),
    };
    let s = &out.stats;
    let kv = KvUsage {
        policy: comp.policy.name().to_string(),
        budget: comp.policy.compresses().then_some(comp.budget),
        slots_peak: s.kv_slots_peak,
        bytes_peak: s.kv_bytes_peak,
        compressions: s.compressions,
        evicted_tokens: s.evicted_tokens,
        cached_tokens: s.cached_tokens,
    };
    Ok(CompletionOutput {
        index,
        text: out.text.clone(),
        token_ids: out.token_ids.clone(),
        cumulative_logprob: cumulative,
        logprobs,
        finish_reason: out.finish_reason.as_str().to_string(),
        kv: Py::new(py, kv)?,
    })
}

/// The prompt's log-probabilities from a sample's output, vLLM's way (`None` first).
pub fn prompt_logprobs(
    py: Python<'_>,
    tok: &Tokenizer,
    out: &GenerationOutput,
) -> PyResult<Option<Vec<Option<Py<PyDict>>>>> {
    let Some(lps) = &out.prompt_logprobs else {
        return Ok(None);
    };
    let mut v = Vec::with_capacity(lps.len() + 1);
    v.push(None);
    for lp in lps {
        v.push(Some(logprob_dict(py, tok, lp)?.unbind()));
    }
    Ok(Some(v))
}
