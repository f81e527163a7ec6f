//! A request's `kv_compression` field resolved against the server's default compression
//! ([`rkv_core::CompressionOverrides`], which the Python package shares): missing fields
//! keep the default's value, and a bad one is a 400 naming `kv_compression`.
//!
//! Must not know: how policies compress.

use rkv_core::config::CompressionConfig;
use rkv_core::CompressionOverrides;

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
    let overrides = CompressionOverrides {
        policy: r.policy.clone(),
        budget: r.budget,
        buffer: r.buffer,
        window: r.window,
        lambda: r.lambda,
        threshold: r.threshold,
        kernel: r.kernel,
        sinks: r.sinks,
        params: r.params.clone().unwrap_or_default(),
        prompt: r.prompt.clone(),
        prompt_chunk: r.prompt_chunk,
    };
    overrides.resolve(default).map_err(|e| {
        let msg = match &e.field {
            Some(_) => format!("{PARAM}.{e}"),
            None => format!("{PARAM} ({})", e.message),
        };
        ApiError::invalid_param(PARAM, msg)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_field_is_a_400_naming_kv_compression_and_the_field() {
        let d = CompressionConfig::full();
        let bad = KvCompressionIn {
            policy: Some("rkv".into()),
            lambda: Some(2.0),
            ..KvCompressionIn::default()
        };
        let e = resolve(Some(&bad), d).unwrap_err();
        assert_eq!(e.status(), axum::http::StatusCode::BAD_REQUEST);
        assert_eq!(e.body()["error"]["param"], "kv_compression");
        let msg = e.body()["error"]["message"].to_string();
        assert!(msg.contains("kv_compression.lambda"), "{msg}");
        let small = KvCompressionIn {
            policy: Some("rkv".into()),
            budget: Some(4),
            ..KvCompressionIn::default()
        };
        let msg = resolve(Some(&small), d).unwrap_err().body()["error"]["message"].to_string();
        assert!(msg.contains("kv_compression (rkv: budget (4)"), "{msg}");
    }

    #[test]
    fn fields_reach_the_configuration() {
        let d = CompressionConfig::full();
        let r = KvCompressionIn {
            policy: Some("gkv".into()),
            budget: Some(64),
            params: Some([("alpha".to_string(), 0.5)].into_iter().collect()),
            ..KvCompressionIn::default()
        };
        let got = resolve(Some(&r), d).unwrap();
        assert_eq!((got.policy.name(), got.budget), ("gkv", 64));
        assert_eq!(got.param("alpha"), Some(0.5));
        assert_eq!(resolve(None, d).unwrap(), d);
    }
}
