//! Tests of the policy boundary: dispatch, shapes, errors, R-KV fast vs oracle.

use super::*;
use crate::config::PolicyKind;

fn cfg(policy: PolicyKind, budget: usize, window: usize) -> CompressionConfig {
    CompressionConfig {
        policy,
        budget,
        buffer: 4,
        window,
        kernel: 3,
        sinks: 2,
        ..Default::default()
    }
}

/// Deterministic noise in [-1, 1) (xorshift), shared by the policies' tests.
pub(crate) fn noise(seed: u64, n: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn obs<'a>(
    len: usize,
    d: usize,
    keys: &'a [f32],
    g: usize,
    w: usize,
    logits: &'a [f32],
    h2o: &'a [f32],
) -> HeadObservation<'a> {
    HeadObservation {
        len,
        head_dim: d,
        keys: KeyRows::flat_f32(keys, d),
        group: g,
        window: w,
        window_logits: logits,
        h2o_scores: h2o,
        values: &[],
    }
}

#[test]
fn full_and_short_caches_keep_everything() {
    let mut st = HeadState::new();
    let f = CompressionConfig::full();
    let o = obs(5000, 4, &[], 1, 8, &[], &[]);
    assert_eq!(
        select_keep(&f, &o, &mut st).unwrap(),
        (0..5000).collect::<Vec<_>>()
    );
    for p in [
        PolicyKind::RKv,
        PolicyKind::SnapKv,
        PolicyKind::StreamingLlm,
        PolicyKind::H2o,
    ] {
        let c = cfg(p, 16, 4);
        let o = obs(10, 4, &[], 1, 4, &[], &[]);
        assert_eq!(
            select_keep(&c, &o, &mut st).unwrap(),
            (0..10).collect::<Vec<_>>(),
            "{p}"
        );
    }
    assert_eq!(st.described(), 0);
}

#[test]
fn streaming_and_h2o_through_the_boundary() {
    let mut st = HeadState::new();
    let c = cfg(PolicyKind::StreamingLlm, 6, 2);
    let o = obs(10, 4, &[], 1, 2, &[], &[]);
    assert_eq!(
        select_keep(&c, &o, &mut st).unwrap(),
        vec![0, 1, 6, 7, 8, 9]
    );
    let c = cfg(PolicyKind::H2o, 4, 2);
    let acc = [0.9, 0.1, 0.5, 0.05, 0.7, 0.2, 0.0, 0.0];
    let o = obs(8, 4, &[], 1, 2, &[], &acc);
    assert_eq!(select_keep(&c, &o, &mut st).unwrap(), vec![0, 4, 6, 7]);
}

#[test]
fn shape_errors_name_the_field() {
    let mut st = HeadState::new();
    let c = cfg(PolicyKind::RKv, 8, 2);
    let logits = vec![0.0; 2 * 2 * 8];
    let keys = vec![1.0; 10 * 4];
    let cases = [
        (obs(10, 4, &keys, 2, 2, &logits[1..], &[]), "window_logits"),
        (obs(10, 4, &keys[1..], 2, 2, &logits, &[]), "keys"),
        (obs(10, 0, &keys, 2, 2, &logits, &[]), "head_dim"),
        (obs(10, 4, &keys, 0, 2, &logits, &[]), "group"),
        (obs(10, 4, &keys, 2, 3, &logits, &[]), "window"),
    ];
    for (o, field) in cases {
        let e = select_keep(&c, &o, &mut st).unwrap_err();
        assert!(e.to_string().contains(field), "{e} should name {field}");
    }
    let h = cfg(PolicyKind::H2o, 4, 2);
    let e = select_keep(&h, &obs(8, 4, &[], 1, 2, &[], &[1.0; 7]), &mut st).unwrap_err();
    assert!(e.to_string().contains("h2o_scores"));
    let bad = CompressionConfig { kernel: 2, ..c };
    let e = select_keep(&bad, &obs(10, 4, &keys, 2, 2, &logits, &[]), &mut st).unwrap_err();
    assert!(matches!(
        e,
        PolicyError::Config(ConfigError::KernelInvalid(2))
    ));
    // SnapKV does not read keys.
    let s = cfg(PolicyKind::SnapKv, 8, 2);
    assert_eq!(
        select_keep(&s, &obs(10, 4, &[], 2, 2, &logits, &[]), &mut st)
            .unwrap()
            .len(),
        8
    );
}

#[test]
fn rkv_keeps_window_and_budget_and_matches_oracle() {
    let (len, d, g, w) = (40, 8, 2, 4);
    let c = CompressionConfig {
        threshold: 0.3,
        ..cfg(PolicyKind::RKv, 16, w)
    };
    let mut keys = noise(1, len * d);
    // Repeat a block so the redundancy branch fires.
    let block = keys[..5 * d].to_vec();
    keys[20 * d..25 * d].copy_from_slice(&block);
    let logits: Vec<f32> = noise(2, g * w * (len - w))
        .iter()
        .map(|x| x * 4.0)
        .collect();
    let o = obs(len, d, &keys, g, w, &logits, &[]);
    let mut fast_state = HeadState::new();
    let fast = select_keep(&c, &o, &mut fast_state).unwrap();
    let mut oracle_state = HeadState::new();
    let oracle = select_keep_with(&c, &o, &mut oracle_state, RedundancyPath::Oracle).unwrap();
    assert_eq!(fast, oracle);
    assert_eq!(fast.len(), 16);
    assert!(fast.windows(2).all(|p| p[0] < p[1]));
    assert!((len - w..len).all(|j| fast.contains(&j)));
    assert_eq!(fast_state.described(), 16);
    assert_eq!(oracle_state.described(), 0);
}

#[test]
fn snapkv_is_rkv_with_lambda_one() {
    let (len, d, g, w) = (30, 4, 1, 4);
    let keys = noise(3, len * d);
    let logits: Vec<f32> = noise(4, g * w * (len - w))
        .iter()
        .map(|x| x * 6.0)
        .collect();
    let o = obs(len, d, &keys, g, w, &logits, &[]);
    let snap = cfg(PolicyKind::SnapKv, 12, w);
    let rkv1 = CompressionConfig {
        policy: PolicyKind::RKv,
        lambda: 1.0,
        ..snap
    };
    let a = select_keep(&snap, &o, &mut HeadState::new()).unwrap();
    let b = select_keep(&rkv1, &o, &mut HeadState::new()).unwrap();
    assert_eq!(a, b);
    let (scores, _) = score_head(&snap, &o, &HeadState::new(), RedundancyPath::Fast).unwrap();
    assert!(scores.redundancy.is_empty());
    assert_eq!(scores.score.len(), len - w);
}

/// Through the shared selection, StreamingLLM and H2O keep what their scalar references
/// keep, over lengths, budgets and sinks (budgets below twice the window included: H2O
/// protects `B/2` slots whatever the window).
#[test]
fn streaming_and_h2o_match_their_references() {
    for len in [5usize, 9, 16, 33] {
        for budget in [3usize, 4, 7, 12] {
            let mut st = HeadState::new();
            let acc: Vec<f32> = noise(len as u64, len).iter().map(|x| x.abs()).collect();
            let c = cfg(PolicyKind::H2o, budget, 2);
            let o = obs(len, 4, &[], 1, 2, &[], &acc);
            let want = if len < budget {
                (0..len).collect()
            } else {
                h2o::h2o_keep(&acc, budget)
            };
            assert_eq!(
                select_keep(&c, &o, &mut st).unwrap(),
                want,
                "h2o {len} {budget}"
            );
            for sinks in [0usize, 1, 2] {
                let c = CompressionConfig {
                    sinks,
                    ..cfg(PolicyKind::StreamingLlm, budget, 2)
                };
                let want = if len < budget {
                    (0..len).collect()
                } else {
                    streaming::streaming_keep(len, budget, sinks)
                };
                let got = select_keep(&c, &o, &mut st).unwrap();
                assert_eq!(got, want, "streaming {len} {budget} {sinks}");
            }
        }
    }
}
