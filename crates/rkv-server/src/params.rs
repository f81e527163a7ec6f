//! The shared request fields checked and turned into an engine [`Submission`]: lengths,
//! sampling, stop strings, samples, streaming, compression and `response_format` (read
//! into a grammar spec, compiled by the route), with the server's defaults filled in.
//! Each refusal names its field.
//!
//! Defaults: `max_tokens` = what is left of the context (capped by
//! `ServerOptions::default_max_tokens` when set), `temperature` 1.0 and `top_p` 1.0
//! (OpenAI's), `top_k` off, `seed` random, `n` 1, no stop strings, `stream` false.
//!
//! Must not know: HTTP, tokenizers, the engine's internals (the engine re-checks
//! lengths, sampling and compression against its own limits when the request is
//! submitted).

use rkv_core::config::CompressionConfig;
use rkv_engine::handle::Submission;
use rkv_engine::{GenerationRequest, GrammarSpec, LogprobsRequest, SamplingParams};
use serde_json::Value;

use crate::error::ApiError;
use crate::kv_compression;
use crate::request::CommonFields;
use crate::response_format;
use crate::state::random_u64;

/// Most stop strings one request may give.
pub const MAX_STOPS: usize = 16;

/// What the server fills in.
#[derive(Debug, Clone, Copy)]
pub struct Defaults {
    pub max_context: usize,
    pub compression: CompressionConfig,
    pub max_n: usize,
    pub default_max_tokens: Option<usize>,
}

/// What an answer shows besides the text, as the endpoint's own fields asked for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shown {
    /// Log-probabilities of the generated tokens with this many alternatives each.
    pub logprobs: Option<usize>,
    /// Completions' `echo`: the prompt's text first (and, with `logprobs`, its tokens').
    pub echo: bool,
    /// `return_token_ids`.
    pub token_ids: bool,
}

/// A checked request, ready to submit.
#[derive(Debug, Clone)]
pub struct Plan {
    pub submission: Submission,
    pub shown: Shown,
    /// `max_tokens: 0` with `echo`: the prompt is scored and nothing is generated (the
    /// engine samples one token from the prompt's logits; the answer leaves it out).
    pub score_only: bool,
    /// The compression the request runs with (the submission carries it too).
    pub compression: CompressionConfig,
    pub stream: bool,
    pub include_usage: bool,
    /// `response_format`'s grammar, to compile into the submission's request.
    pub grammar: Option<GrammarSpec>,
}

/// Checks `c` for a prompt of `prompt` tokens; `prompt_param` names the prompt's field in
/// errors.
pub fn plan(
    prompt: Vec<u32>,
    prompt_param: &str,
    c: &CommonFields,
    d: &Defaults,
    shown: Shown,
) -> Result<Plan, ApiError> {
    let n = match c.n {
        None => 1,
        Some(0) => return Err(ApiError::invalid_param("n", "n must be at least 1")),
        Some(n) if n > d.max_n as u64 => {
            return Err(ApiError::invalid_param(
                "n",
                format!("n must be at most {}, got {n}", d.max_n),
            ))
        }
        Some(n) => n as usize,
    };
    if shown.echo && n > 1 {
        return Err(ApiError::invalid_param(
            "echo",
            "echo is supported with n = 1 only",
        ));
    }
    let stream = c.stream.unwrap_or(false);
    if shown.echo && stream {
        return Err(ApiError::invalid_param(
            "echo",
            "echo is not supported with stream",
        ));
    }
    let asked = max_tokens(prompt.len(), prompt_param, c, d, shown.echo)?;
    let score_only = asked == 0;
    let sampling = SamplingParams {
        temperature: c.temperature.unwrap_or(1.0) as f32,
        top_k: top_k(c.top_k)?,
        top_p: c.top_p.unwrap_or(1.0) as f32,
        seed: seed(c.seed.as_ref())?,
    };
    let compression = kv_compression::resolve(c.kv_compression.as_ref(), d.compression)?;
    let grammar = response_format::read(c.response_format.as_ref())?;
    let include_usage = stream
        && c.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
    Ok(Plan {
        submission: Submission {
            request: GenerationRequest {
                prompt,
                sampling,
                max_tokens: asked.max(1),
                ignore_eos: c.ignore_eos.unwrap_or(false),
                stop: stops(c.stop.as_ref())?,
                logprobs: LogprobsRequest {
                    generated: shown.logprobs,
                    prompt: shown.logprobs.filter(|_| shown.echo),
                },
                grammar: None,
            },
            compression: Some(compression),
            n,
        },
        compression,
        stream,
        include_usage,
        shown,
        score_only,
        grammar,
    })
}

fn max_tokens(
    prompt: usize,
    prompt_param: &str,
    c: &CommonFields,
    d: &Defaults,
    echo: bool,
) -> Result<usize, ApiError> {
    let (param, asked) = match (c.max_completion_tokens, c.max_tokens) {
        (Some(v), _) => ("max_completion_tokens", Some(v)),
        (None, v) => ("max_tokens", v),
    };
    match asked {
        Some(0) if echo => Ok(0),
        Some(0) => Err(ApiError::invalid_param(
            param,
            format!("{param} must be at least 1 (0 only with echo)"),
        )),
        // Beyond the context is the engine's refusal (it names the numbers).
        Some(v) => Ok(usize::try_from(v).unwrap_or(usize::MAX)),
        None => {
            let rest = d.max_context.saturating_sub(prompt);
            if rest == 0 {
                return Err(ApiError::invalid_param(
                    prompt_param,
                    format!(
                        "the prompt of {prompt} tokens leaves no room in the context of {} tokens",
                        d.max_context
                    ),
                ));
            }
            Ok(d.default_max_tokens.map_or(rest, |cap| rest.min(cap)))
        }
    }
}

/// An optional boolean field: `null` or absent is `false`.
pub fn flag(param: &str, v: Option<&Value>) -> Result<bool, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(ApiError::invalid_param(
            param,
            format!("{param} must be a boolean, got {v}"),
        )),
    }
}

fn top_k(v: Option<i64>) -> Result<usize, ApiError> {
    match v {
        None | Some(0) | Some(-1) => Ok(0),
        Some(k) if k > 0 => Ok(usize::try_from(k).unwrap_or(usize::MAX)),
        Some(k) => Err(ApiError::invalid_param(
            "top_k",
            format!("top_k must be positive, or 0 or -1 for off; got {k}"),
        )),
    }
}

/// An integer seed (negative ones are taken modulo 2^64, as a C cast would); none: random.
fn seed(v: Option<&Value>) -> Result<u64, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(random_u64()),
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_i64().map(|i| i as u64))
            .ok_or_else(|| {
                ApiError::invalid_param("seed", format!("seed must be an integer, got {n}"))
            }),
        Some(_) => Err(ApiError::invalid_param("seed", "seed must be an integer")),
    }
}

fn stops(v: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let list = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|x| x.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                ApiError::invalid_param("stop", "stop must be a string or an array of strings")
            })?,
        Some(_) => {
            return Err(ApiError::invalid_param(
                "stop",
                "stop must be a string or an array of strings",
            ))
        }
    };
    if list.len() > MAX_STOPS {
        return Err(ApiError::invalid_param(
            "stop",
            format!("at most {MAX_STOPS} stop strings, got {}", list.len()),
        ));
    }
    Ok(list.into_iter().filter(|s| !s.is_empty()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn defaults() -> Defaults {
        Defaults {
            max_context: 100,
            compression: CompressionConfig::full(),
            max_n: 8,
            default_max_tokens: None,
        }
    }

    fn fields(v: Value) -> CommonFields {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn defaults_fill_in() {
        let p = plan(
            vec![1; 30],
            "prompt",
            &fields(json!({})),
            &defaults(),
            Shown::default(),
        )
        .unwrap();
        let r = &p.submission.request;
        assert_eq!(r.max_tokens, 70);
        assert_eq!(r.sampling.temperature, 1.0);
        assert_eq!(r.sampling.top_p, 1.0);
        assert_eq!(r.sampling.top_k, 0);
        assert_eq!(p.submission.n, 1);
        assert!(!p.stream && !p.include_usage);
        let capped = Defaults {
            default_max_tokens: Some(16),
            ..defaults()
        };
        let p = plan(
            vec![1; 30],
            "prompt",
            &fields(json!({})),
            &capped,
            Shown::default(),
        )
        .unwrap();
        assert_eq!(p.submission.request.max_tokens, 16);
    }

    #[test]
    fn fields_are_read() {
        let c = fields(json!({
            "max_tokens": 5, "max_completion_tokens": 7, "temperature": 0, "top_k": 3,
            "seed": -1, "stop": "x", "n": 2, "stream": true,
            "stream_options": {"include_usage": true}, "ignore_eos": true,
            "kv_compression": {"policy": "rkv", "budget": 64}
        }));
        let p = plan(vec![1; 3], "prompt", &c, &defaults(), Shown::default()).unwrap();
        let r = &p.submission.request;
        assert_eq!(r.max_tokens, 7);
        assert_eq!(r.sampling.temperature, 0.0);
        assert_eq!(r.sampling.top_k, 3);
        assert_eq!(r.sampling.seed, u64::MAX);
        assert_eq!(r.stop, vec!["x".to_string()]);
        assert!(r.ignore_eos && p.stream && p.include_usage);
        assert_eq!(p.submission.n, 2);
        assert_eq!(p.compression.budget, 64);
    }

    #[test]
    fn echo_with_no_tokens_scores_the_prompt() {
        let echo = Shown {
            logprobs: Some(1),
            echo: true,
            token_ids: false,
        };
        let c = fields(json!({"max_tokens": 0}));
        let p = plan(vec![1; 3], "prompt", &c, &defaults(), echo).unwrap();
        assert!(p.score_only);
        let r = &p.submission.request;
        assert_eq!(r.max_tokens, 1);
        assert_eq!(r.logprobs.prompt, Some(1));
        assert_eq!(r.logprobs.generated, Some(1));
        // Without echo the prompt's own are not computed.
        let c = fields(json!({"max_tokens": 2}));
        let no_echo = Shown {
            echo: false,
            ..echo
        };
        let p = plan(vec![1; 3], "prompt", &c, &defaults(), no_echo).unwrap();
        assert!(!p.score_only);
        assert_eq!(p.submission.request.logprobs.prompt, None);
        for body in [json!({"n": 2}), json!({"stream": true})] {
            let e = plan(vec![1; 3], "prompt", &fields(body), &defaults(), echo).unwrap_err();
            assert_eq!(e.body()["error"]["param"], "echo");
        }
    }

    #[test]
    fn refusals_name_their_field() {
        for (body, param) in [
            (json!({"n": 0}), "n"),
            (json!({"n": 9}), "n"),
            (json!({"max_tokens": 0}), "max_tokens"),
            (json!({"top_k": -2}), "top_k"),
            (json!({"seed": 1.5}), "seed"),
            (json!({"seed": "a"}), "seed"),
            (json!({"stop": 3}), "stop"),
            (json!({"stop": ["a", 1]}), "stop"),
            (
                json!({"kv_compression": {"policy": "nope"}}),
                "kv_compression",
            ),
            (
                json!({"response_format": {"type": "xml"}}),
                "response_format",
            ),
        ] {
            let e = plan(
                vec![1; 3],
                "prompt",
                &fields(body.clone()),
                &defaults(),
                Shown::default(),
            )
            .unwrap_err();
            assert_eq!(e.body()["error"]["param"], param, "{body}");
        }
        let e = plan(
            vec![1; 100],
            "prompt",
            &fields(json!({})),
            &defaults(),
            Shown::default(),
        )
        .unwrap_err();
        assert_eq!(e.body()["error"]["param"], "prompt");
    }
}
