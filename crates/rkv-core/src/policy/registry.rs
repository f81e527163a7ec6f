//! The policy registry: every policy rkv runs, by name, in one list.
//!
//! Owns: [`POLICIES`]; [`crate::config::PolicyKind`] is an index into it. Adding a policy
//! is one file implementing [`KvPolicy`] and one line here.
//! Must not know: any policy's maths.

use super::KvPolicy;

/// How many policies are registered.
pub const COUNT: usize = 9;

/// The registered policies; the first five are the baselines whose positions
/// [`crate::config::PolicyKind`]'s constants name.
pub static POLICIES: [&dyn KvPolicy; COUNT] = [
    &super::full::Full,
    &super::rkv::RKv,
    &super::snapkv::SnapKv,
    &super::h2o::H2o,
    &super::streaming::StreamingLlm,
    &super::gkv::Gkv,
    &super::keydiff::KeyDiff,
    &super::hybrid::Hybrid,
    &super::h2o_mean::H2oMean,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PolicyKind;

    #[test]
    fn names_are_unique_lowercase_and_constants_point_at_them() {
        let names: Vec<&str> = POLICIES.iter().map(|p| p.name()).collect();
        for (i, n) in names.iter().enumerate() {
            assert_eq!(*n, n.to_ascii_lowercase());
            assert!(!names[..i].contains(n), "{n} registered twice");
        }
        assert_eq!(PolicyKind::Full.name(), "full");
        assert_eq!(PolicyKind::RKv.name(), "rkv");
        assert_eq!(PolicyKind::SnapKv.name(), "snapkv");
        assert_eq!(PolicyKind::H2o.name(), "h2o");
        assert_eq!(PolicyKind::StreamingLlm.name(), "streamingllm");
        assert_eq!(PolicyKind::ALL.len(), COUNT);
    }

    /// Each parameter's default passes its own range, names are unique per policy, and
    /// policy-specific slots exist and are not shared within a policy.
    #[test]
    fn parameter_defaults_are_in_range() {
        use crate::config::PolicyParams;
        use crate::policy::ParamField;
        for p in POLICIES {
            for (i, spec) in p.params().iter().enumerate() {
                if let ParamField::Extra(slot) = spec.field {
                    assert!(slot < PolicyParams::SLOTS, "{}: slot {slot}", spec.name);
                    assert!(!p.params()[..i].iter().any(|q| q.field == spec.field));
                }
                assert_eq!(spec.check(p.name(), spec.default), Ok(()), "{}", spec.name);
                assert!(!p.params()[..i].iter().any(|q| q.name == spec.name));
            }
        }
    }
}
