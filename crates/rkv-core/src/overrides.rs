//! A caller's partial compression settings resolved against a default: what the server's
//! `kv_compression` field and the Python package's `KvCompression` both hand in. Missing
//! fields keep the default's value; the result is validated once, here.
//!
//! Must not know: where the fields came from (JSON, Python keywords), error formats.

use std::collections::BTreeMap;

use crate::config::{CompressionConfig, PolicyKind, PolicyParams};

/// Slot counts above this are refused rather than risk overflowing the engine's
/// arithmetic.
pub const MAX_SLOTS: u64 = 1 << 24;

/// Every field optional; `None` keeps the default's value.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CompressionOverrides {
    pub policy: Option<String>,
    pub budget: Option<u64>,
    pub buffer: Option<u64>,
    pub window: Option<u64>,
    /// R-KV's mixing weight, or the policy's own `lambda` where it declares one (G-KV).
    pub lambda: Option<f64>,
    pub threshold: Option<f64>,
    pub kernel: Option<u64>,
    pub sinks: Option<u64>,
    /// The policy's own parameters by name (`{"alpha": 0.8}` for G-KV).
    pub params: BTreeMap<String, f64>,
    /// `"keep"` or `"compress"` ([`crate::PromptMode`]).
    pub prompt: Option<String>,
    pub prompt_chunk: Option<u64>,
}

/// Which field is wrong (`None`: the combination) and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{message}", field.as_ref().map(|f| format!("{f}: ")).unwrap_or_default())]
pub struct OverrideError {
    /// `budget`, `params.alpha`, ...
    pub field: Option<String>,
    pub message: String,
}

fn bad(field: &str, message: impl ToString) -> OverrideError {
    OverrideError {
        field: Some(field.to_string()),
        message: message.to_string(),
    }
}

impl CompressionOverrides {
    /// The compression these overrides make of `default`, validated.
    pub fn resolve(&self, default: CompressionConfig) -> Result<CompressionConfig, OverrideError> {
        let mut cfg = default;
        if let Some(p) = &self.policy {
            let policy = p.parse::<PolicyKind>().map_err(|e| bad("policy", e))?;
            if policy != cfg.policy {
                // Another policy's own parameters mean nothing to this one.
                cfg.params = PolicyParams::default();
            }
            cfg.policy = policy;
        }
        if let Some(v) = self.budget {
            cfg.budget = count("budget", v)?;
        }
        if let Some(v) = self.buffer {
            cfg.buffer = count("buffer", v)?;
        }
        if let Some(v) = self.window {
            cfg.window = count("window", v)?;
        }
        if let Some(m) = &self.prompt {
            cfg.prompt = m.parse().map_err(|e| bad("prompt", e))?;
        }
        if let Some(v) = self.prompt_chunk {
            cfg.prompt_chunk = count("prompt_chunk", v)?;
        }
        // The shared fields go to the policy's parameter of that name where it declares
        // one (G-KV's own lambda), else to the field itself.
        if let Some(v) = self.kernel {
            let k = count("kernel", v)?;
            set_shared(&mut cfg, "kernel", k as f64, |c| c.kernel = k)?;
        }
        if let Some(v) = self.sinks {
            let s = count("sinks", v)?;
            set_shared(&mut cfg, "sinks", s as f64, |c| c.sinks = s)?;
        }
        if let Some(v) = self.lambda {
            let x = real("lambda", v)?;
            set_shared(&mut cfg, "lambda", f64::from(x), |c| c.lambda = x)?;
        }
        if let Some(v) = self.threshold {
            let x = real("threshold", v)?;
            set_shared(&mut cfg, "threshold", f64::from(x), |c| c.threshold = x)?;
        }
        for (name, &v) in &self.params {
            let field = format!("params.{name}");
            real(&field, v)?;
            cfg.set_param(name, v).map_err(|e| bad(&field, e))?;
        }
        cfg.validate_if_compressing().map_err(|e| OverrideError {
            field: None,
            message: format!("{}: {e}", cfg.policy),
        })?;
        Ok(cfg)
    }
}

/// Sets `name` as the policy's parameter when it declares one (range checked), else
/// through `field`.
fn set_shared(
    cfg: &mut CompressionConfig,
    name: &str,
    value: f64,
    field: impl FnOnce(&mut CompressionConfig),
) -> Result<(), OverrideError> {
    if cfg.param(name).is_some() {
        cfg.set_param(name, value).map_err(|e| bad(name, e))
    } else {
        field(cfg);
        Ok(())
    }
}

fn count(name: &str, v: u64) -> Result<usize, OverrideError> {
    if v > MAX_SLOTS {
        return Err(bad(name, format!("must be at most {MAX_SLOTS}, got {v}")));
    }
    usize::try_from(v).map_err(|_| bad(name, format!("is too large: {v}")))
}

fn real(name: &str, v: f64) -> Result<f32, OverrideError> {
    if !v.is_finite() {
        return Err(bad(name, "must be a finite number"));
    }
    Ok(v as f32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PromptMode;

    fn req(policy: Option<&str>, budget: Option<u64>) -> CompressionOverrides {
        CompressionOverrides {
            policy: policy.map(str::to_string),
            budget,
            ..CompressionOverrides::default()
        }
    }

    #[test]
    fn missing_fields_keep_the_default() {
        let default = CompressionConfig::full();
        let got = req(Some("rkv"), Some(64)).resolve(default).unwrap();
        assert_eq!(got.policy, PolicyKind::RKv);
        assert_eq!(got.budget, 64);
        assert_eq!(got.buffer, default.buffer);
        assert_eq!(got.window, default.window);
        let none = CompressionOverrides::default();
        assert_eq!(none.resolve(default).unwrap(), default);
    }

    #[test]
    fn bad_values_name_their_field() {
        let d = CompressionConfig::full();
        let rkv = |f: fn(&mut CompressionOverrides)| {
            let mut o = req(Some("rkv"), None);
            f(&mut o);
            o
        };
        for (bad, field) in [
            (req(Some("zip"), None), Some("policy")),
            (req(Some("rkv"), Some(4)), None),
            (req(Some("snapkv"), Some(1 << 40)), Some("budget")),
            (rkv(|o| o.lambda = Some(2.0)), Some("lambda")),
            (rkv(|o| o.lambda = Some(f64::NAN)), Some("lambda")),
            (rkv(|o| o.buffer = Some(0)), None),
            (rkv(|o| o.prompt = Some("drop".into())), Some("prompt")),
            (
                rkv(|o| {
                    o.prompt = Some("compress".into());
                    o.prompt_chunk = Some(8);
                }),
                None,
            ),
        ] {
            let e = bad.resolve(d).unwrap_err();
            assert_eq!(e.field.as_deref(), field, "{bad:?}: {e}");
        }
    }

    #[test]
    fn policy_params_are_validated_by_name() {
        let d = CompressionConfig::with_policy(PolicyKind::RKv);
        let with = |policy: &str, params: &[(&str, f64)]| CompressionOverrides {
            policy: Some(policy.into()),
            params: params.iter().map(|&(k, v)| (k.to_string(), v)).collect(),
            ..CompressionOverrides::default()
        };
        let got = with("gkv", &[("alpha", 0.5)]).resolve(d).unwrap();
        assert_eq!(got.param("alpha"), Some(0.5));
        assert_eq!(got.param("lambda"), Some(0.5), "G-KV's own default");
        for (bad, name) in [
            (with("gkv", &[("alpha", 1.5)]), "alpha"),
            (with("gkv", &[("decay", 0.5)]), "decay"),
            (with("keydiff", &[("lambda", 0.5)]), "lambda"),
            (with("rkv", &[("threshold", 1.0)]), "threshold"),
        ] {
            let e = bad.resolve(d).unwrap_err();
            assert!(e.to_string().contains(name), "{e}");
        }
        // A top-level lambda is G-KV's own lambda under G-KV, range checked.
        let top = CompressionOverrides {
            policy: Some("gkv".into()),
            lambda: Some(0.25),
            ..CompressionOverrides::default()
        };
        assert_eq!(top.resolve(d).unwrap().param("lambda"), Some(0.25));
    }

    #[test]
    fn the_prompt_mode_and_chunk_are_taken_by_name() {
        let d = CompressionConfig::with_policy(PolicyKind::RKv);
        let r = CompressionOverrides {
            prompt: Some("compress".into()),
            prompt_chunk: Some(256),
            ..CompressionOverrides::default()
        };
        let got = r.resolve(d).unwrap();
        assert_eq!(got.prompt, PromptMode::Compress);
        assert_eq!(got.prompt_chunk, 256);
        assert_eq!(got.peak_slots(100_000), Some(1024 + 128 + 256));
    }

    #[test]
    fn full_ignores_compression_fields() {
        let d = CompressionConfig::with_policy(PolicyKind::RKv);
        let got = req(Some("full"), Some(4)).resolve(d).unwrap();
        assert_eq!(got.policy, PolicyKind::Full);
    }
}
