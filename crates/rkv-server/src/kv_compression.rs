//! A request's `kv_compression` field resolved against the server's default compression:
//! missing fields keep the default's value, the result is validated once here.
//!
//! Must not know: HTTP, how policies compress.

use rkv_core::config::{CompressionConfig, PolicyKind, PolicyParams};

use crate::error::ApiError;
use crate::request::KvCompressionIn;

const PARAM: &str = "kv_compression";

/// The compression a request runs with (`None` in, `default` out).
pub fn resolve(
    req: Option<&KvCompressionIn>,
    default: CompressionConfig,
) -> Result<CompressionConfig, ApiError> {
    let Some(r) = req else {
        return Ok(default);
    };
    let mut cfg = default;
    if let Some(p) = &r.policy {
        let policy = p
            .parse::<PolicyKind>()
            .map_err(|e| ApiError::invalid_param(PARAM, format!("kv_compression.policy: {e}")))?;
        if policy != cfg.policy {
            // Another policy's own parameters mean nothing to this one.
            cfg.params = PolicyParams::default();
        }
        cfg.policy = policy;
    }
    if let Some(v) = r.budget {
        cfg.budget = count("budget", v)?;
    }
    if let Some(v) = r.buffer {
        cfg.buffer = count("buffer", v)?;
    }
    if let Some(v) = r.window {
        cfg.window = count("window", v)?;
    }
    if let Some(m) = &r.prompt {
        cfg.prompt = m
            .parse()
            .map_err(|e| ApiError::invalid_param(PARAM, format!("kv_compression.prompt: {e}")))?;
    }
    if let Some(v) = r.prompt_chunk {
        cfg.prompt_chunk = count("prompt_chunk", v)?;
    }
    // The shared fields go to the policy's parameter of that name where it declares
    // one (G-KV's own lambda), else to the field itself.
    if let Some(v) = r.kernel {
        set_shared(&mut cfg, "kernel", count("kernel", v)? as f64, |c| {
            c.kernel = v as usize
        })?;
    }
    if let Some(v) = r.sinks {
        set_shared(&mut cfg, "sinks", count("sinks", v)? as f64, |c| {
            c.sinks = v as usize
        })?;
    }
    if let Some(v) = r.lambda {
        let x = real("lambda", v)?;
        set_shared(&mut cfg, "lambda", f64::from(x), |c| c.lambda = x)?;
    }
    if let Some(v) = r.threshold {
        let x = real("threshold", v)?;
        set_shared(&mut cfg, "threshold", f64::from(x), |c| c.threshold = x)?;
    }
    for (name, &v) in r.params.iter().flatten() {
        real(name, v)?;
        cfg.set_param(name, v).map_err(|e| {
            ApiError::invalid_param(PARAM, format!("kv_compression.params.{name}: {e}"))
        })?;
    }
    cfg.validate_if_compressing().map_err(|e| {
        ApiError::invalid_param(PARAM, format!("kv_compression ({}): {e}", cfg.policy))
    })?;
    Ok(cfg)
}

/// Sets `name` as the policy's parameter when it declares one (range checked), else
/// through `field`.
fn set_shared(
    cfg: &mut CompressionConfig,
    name: &str,
    value: f64,
    field: impl FnOnce(&mut CompressionConfig),
) -> Result<(), ApiError> {
    if cfg.param(name).is_some() {
        cfg.set_param(name, value)
            .map_err(|e| ApiError::invalid_param(PARAM, format!("kv_compression.{name}: {e}")))
    } else {
        field(cfg);
        Ok(())
    }
}

/// Slot counts: the engine's arithmetic must not overflow, so absurd values are refused
/// here rather than wrapped.
fn count(name: &str, v: u64) -> Result<usize, ApiError> {
    const MAX: u64 = 1 << 24;
    if v > MAX {
        return Err(ApiError::invalid_param(
            PARAM,
            format!("kv_compression.{name} must be at most {MAX}, got {v}"),
        ));
    }
    usize::try_from(v).map_err(|_| {
        ApiError::invalid_param(PARAM, format!("kv_compression.{name} is too large: {v}"))
    })
}

fn real(name: &str, v: f64) -> Result<f32, ApiError> {
    if !v.is_finite() {
        return Err(ApiError::invalid_param(
            PARAM,
            format!("kv_compression.{name} must be a finite number"),
        ));
    }
    Ok(v as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(policy: Option<&str>, budget: Option<u64>) -> KvCompressionIn {
        KvCompressionIn {
            policy: policy.map(str::to_string),
            budget,
            ..KvCompressionIn::default()
        }
    }

    #[test]
    fn missing_fields_keep_the_default() {
        let default = CompressionConfig::full();
        let got = resolve(Some(&req(Some("rkv"), Some(64))), default).unwrap();
        assert_eq!(got.policy, PolicyKind::RKv);
        assert_eq!(got.budget, 64);
        assert_eq!(got.buffer, default.buffer);
        assert_eq!(got.window, default.window);
        assert_eq!(resolve(None, default).unwrap(), default);
    }

    #[test]
    fn bad_values_are_400s() {
        let d = CompressionConfig::full();
        for bad in [
            req(Some("zip"), None),
            req(Some("rkv"), Some(4)),
            req(Some("snapkv"), Some(1 << 40)),
            KvCompressionIn {
                policy: Some("rkv".into()),
                lambda: Some(2.0),
                ..KvCompressionIn::default()
            },
            KvCompressionIn {
                policy: Some("rkv".into()),
                buffer: Some(0),
                ..KvCompressionIn::default()
            },
            KvCompressionIn {
                policy: Some("rkv".into()),
                prompt: Some("drop".into()),
                ..KvCompressionIn::default()
            },
            KvCompressionIn {
                policy: Some("rkv".into()),
                prompt: Some("compress".into()),
                prompt_chunk: Some(8),
                ..KvCompressionIn::default()
            },
        ] {
            let e = resolve(Some(&bad), d).unwrap_err();
            assert_eq!(e.status(), axum::http::StatusCode::BAD_REQUEST, "{bad:?}");
            assert_eq!(e.body()["error"]["param"], "kv_compression");
        }
    }

    #[test]
    fn policy_params_are_validated_by_name() {
        let d = CompressionConfig::with_policy(PolicyKind::RKv);
        let with = |policy: &str, params: &[(&str, f64)]| KvCompressionIn {
            policy: Some(policy.into()),
            params: Some(params.iter().map(|&(k, v)| (k.to_string(), v)).collect()),
            ..KvCompressionIn::default()
        };
        let got = resolve(Some(&with("gkv", &[("alpha", 0.5)])), d).unwrap();
        assert_eq!(got.param("alpha"), Some(0.5));
        assert_eq!(got.param("lambda"), Some(0.5), "G-KV's own default");
        for (bad, names) in [
            (with("gkv", &[("alpha", 1.5)]), "alpha"),
            (with("gkv", &[("decay", 0.5)]), "decay"),
            (with("keydiff", &[("lambda", 0.5)]), "lambda"),
            (with("rkv", &[("threshold", 1.0)]), "threshold"),
        ] {
            let e = resolve(Some(&bad), d).unwrap_err();
            assert_eq!(e.status(), axum::http::StatusCode::BAD_REQUEST, "{bad:?}");
            let msg = e.body()["error"]["message"].to_string();
            assert!(msg.contains(names), "{msg}");
        }
        // A top-level lambda is G-KV's own lambda under G-KV, range checked.
        let top = KvCompressionIn {
            policy: Some("gkv".into()),
            lambda: Some(0.25),
            ..KvCompressionIn::default()
        };
        assert_eq!(resolve(Some(&top), d).unwrap().param("lambda"), Some(0.25));
    }

    #[test]
    fn the_prompt_mode_and_chunk_are_taken_by_name() {
        let d = CompressionConfig::with_policy(PolicyKind::RKv);
        let r = KvCompressionIn {
            prompt: Some("compress".into()),
            prompt_chunk: Some(256),
            ..KvCompressionIn::default()
        };
        let got = resolve(Some(&r), d).unwrap();
        assert_eq!(got.prompt, rkv_core::PromptMode::Compress);
        assert_eq!(got.prompt_chunk, 256);
        assert_eq!(got.peak_slots(100_000), Some(1024 + 128 + 256));
    }

    #[test]
    fn full_ignores_compression_fields() {
        let d = CompressionConfig::with_policy(PolicyKind::RKv);
        let got = resolve(Some(&req(Some("full"), Some(4))), d).unwrap();
        assert_eq!(got.policy, PolicyKind::Full);
    }
}
