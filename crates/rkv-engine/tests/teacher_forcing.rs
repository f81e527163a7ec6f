//! Teacher forcing on the default model: the chunked path (one causal chunk per buffer)
//! gives the same distributions and kept sets as token-by-token decoding, for every
//! policy; a budget above the text's length gives exactly FullKV's distributions.

mod common;

use common::engine;
use rkv_core::config::{CompressionConfig, PolicyKind};
use rkv_engine::KvDtype;
use rkv_model::WeightMode;

const TEXT: &str = "Let me check the arithmetic again. 17 times 23: 17 times 20 is 340, \
and 17 times 3 is 51, so the total is 391. Wait, let me verify: 23 times 17 is 23 times 10, \
which is 230, plus 23 times 7, which is 161; 230 plus 161 is 391. So the answer is 391. \
Let me double check once more with another method: 20 times 20 is 400, minus 3 times 3 is 9, \
so 391 again because (20 - 3)(20 + 3) = 400 - 9. Yes, the product of 17 and 23 is 391. ";

fn run(
    e: &mut rkv_engine::Engine,
    tokens: &[u32],
    prompt: usize,
    comp: CompressionConfig,
    chunk: usize,
) -> (Vec<f32>, rkv_engine::TeacherStats) {
    let mut all = Vec::new();
    let stats = e
        .teacher_force(tokens, prompt, comp, chunk, |_, l| all.extend_from_slice(l))
        .expect("teacher forcing");
    (all, stats)
}

#[test]
fn chunked_equals_token_by_token_for_every_policy() {
    let mut e = engine(WeightMode::Native, KvDtype::F16, CompressionConfig::full());
    let text = TEXT.repeat(2);
    let tokens = e.tokenizer().encode(&text).expect("encode");
    let prompt = 20;
    for policy in [
        PolicyKind::RKv,
        PolicyKind::SnapKv,
        PolicyKind::H2o,
        PolicyKind::StreamingLlm,
    ] {
        let comp = CompressionConfig {
            policy,
            budget: 48,
            buffer: 16,
            ..CompressionConfig::default()
        };
        let (a, sa) = run(&mut e, &tokens, prompt, comp, 1);
        let (b, sb) = run(&mut e, &tokens, prompt, comp, 256);
        assert!(sa.compressions > 2, "{policy}: {sa:?}");
        assert_eq!(sa.compressions, sb.compressions, "{policy}");
        // Every event is timed, its compaction within it.
        for s in [&sa, &sb] {
            assert!(s.compress_seconds > 0.0, "{policy}: {s:?}");
            assert!(s.compact_seconds > 0.0 && s.compact_seconds <= s.compress_seconds);
        }
        assert_eq!(
            sa.final_positions, sb.final_positions,
            "{policy}: kept sets differ"
        );
        assert!(sa.kv_slots_peak <= 64 && sb.kv_slots_peak <= 64);
        let diff = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert_eq!(a.len(), b.len());
        assert!(
            diff < 1e-3,
            "{policy}: chunked and token-by-token logits differ by {diff}"
        );
    }
}

#[test]
fn budget_above_length_equals_fullkv() {
    let mut e = engine(WeightMode::Native, KvDtype::F16, CompressionConfig::full());
    let tokens = e.tokenizer().encode(TEXT).expect("encode");
    let (full, _) = run(&mut e, &tokens, 10, CompressionConfig::full(), 64);
    for policy in [
        PolicyKind::RKv,
        PolicyKind::SnapKv,
        PolicyKind::H2o,
        PolicyKind::StreamingLlm,
    ] {
        let comp = CompressionConfig {
            policy,
            budget: tokens.len() + 1,
            ..CompressionConfig::default()
        };
        let (got, st) = run(&mut e, &tokens, 10, comp, 64);
        assert_eq!(st.compressions, 0);
        assert_eq!(got, full, "{policy}: distributions differ from FullKV");
    }
}
