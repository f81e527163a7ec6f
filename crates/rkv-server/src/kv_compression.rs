//! A request's `kv_compression` field resolved against the server's default compression:
//! missing fields keep the default's value, the result is validated once here.
//!
//! Must not know: HTTP, how policies compress.

use rkv_core::config::{CompressionConfig, PolicyKind};

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
        cfg.policy = p
            .parse::<PolicyKind>()
            .map_err(|e| ApiError::invalid_param(PARAM, format!("kv_compression.policy: {e}")))?;
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
    if let Some(v) = r.kernel {
        cfg.kernel = count("kernel", v)?;
    }
    if let Some(v) = r.sinks {
        cfg.sinks = count("sinks", v)?;
    }
    if let Some(v) = r.lambda {
        cfg.lambda = real("lambda", v)?;
    }
    if let Some(v) = r.threshold {
        cfg.threshold = real("threshold", v)?;
    }
    cfg.validate_if_compressing().map_err(|e| {
        ApiError::invalid_param(PARAM, format!("kv_compression ({}): {e}", cfg.policy))
    })?;
    Ok(cfg)
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
        ] {
            let e = resolve(Some(&bad), d).unwrap_err();
            assert_eq!(e.status(), axum::http::StatusCode::BAD_REQUEST, "{bad:?}");
            assert_eq!(e.body()["error"]["param"], "kv_compression");
        }
    }

    #[test]
    fn full_ignores_compression_fields() {
        let d = CompressionConfig::with_policy(PolicyKind::RKv);
        let got = resolve(Some(&req(Some("full"), Some(4))), d).unwrap();
        assert_eq!(got.policy, PolicyKind::Full);
    }
}
