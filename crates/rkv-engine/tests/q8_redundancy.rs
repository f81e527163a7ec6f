//! R-KV's redundancy and selection on keys stored as q8_0, against the f32 oracle on the
//! keys before quantisation.
//!
//! How it is computed: policies read q8_0 keys dequantised exactly (`d * q` in f32,
//! `KvStore::read_keys_into`), and R-KV's cosine redundancy runs on those f32 rows as it
//! does on any keys. Quantisation moves each value by at most half a step
//! (`max|x| / 254` of its block of 32), so a cosine moves by a fraction of a percent, and
//! only pairs that close to the 0.5 threshold, or slots that close to the budget's
//! cut-off, can be chosen differently. These tests measure how often that happens on keys
//! shaped like a model's (repeated directions, noise, a few large channels) and bound it.

use rkv_core::config::{CompressionConfig, PolicyKind};
use rkv_core::policy::{redundancy_oracle, select_keep, HeadObservation, HeadState, KeyRows};
use rkv_engine::kv::BlockTable;
use rkv_engine::kv::{KvDtype, KvLayout, KvStore};

const D: usize = 64;
const LEN: usize = 392; // budget 256 + buffer 128 + window 8: a compression's length
const W: usize = 8;

/// A deterministic generator of values in `[-1, 1)`.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// `[LEN, D]` keys of one head: each slot near one of a few directions (thoughts that
/// repeat) with noise, two large channels as real keys have.
fn keys(seed: u64) -> Vec<f32> {
    let mut r = Lcg(seed);
    let dirs: Vec<Vec<f32>> = (0..6).map(|_| (0..D).map(|_| r.next()).collect()).collect();
    let mut out = Vec::with_capacity(LEN * D);
    for p in 0..LEN {
        let dir = &dirs[(p * 7 + p / 5) % dirs.len()];
        for (c, &x) in dir.iter().enumerate() {
            let big = if c == 3 || c == 40 { 6.0 } else { 1.0 };
            out.push(big * (x + 1.1 * r.next()));
        }
    }
    out
}

/// `keys` written to a q8_0 store and read back as policies read them.
fn through_q8_0(keys: &[f32]) -> Vec<f32> {
    let layout = KvLayout {
        n_layers: 1,
        n_kv_heads: 1,
        head_dim: D,
        block_size: 16,
    };
    let mut store = KvStore::new(layout, KvDtype::Q8_0, LEN.div_ceil(16)).expect("pool");
    let mut table = BlockTable::new();
    store.reserve(&mut table, LEN).expect("room");
    for (s, k) in keys.chunks_exact(D).enumerate() {
        store
            .write_slot(table.blocks(), 0, 0, s, s as u32, k, k)
            .expect("whole blocks");
    }
    let mut out = Vec::new();
    store.read_keys_into(table.blocks(), 0, 0, LEN, &mut out);
    out
}

/// `[w, L - w]` window logits: the last `w` keys as queries (the same for both runs, so
/// that only the redundancy sees the quantisation).
fn window_logits(keys: &[f32]) -> Vec<f32> {
    let scale = 1.0 / (D as f32).sqrt();
    let mut out = Vec::with_capacity(W * (LEN - W));
    for t in LEN - W..LEN {
        let q = &keys[t * D..(t + 1) * D];
        for j in 0..LEN - W {
            let k = &keys[j * D..(j + 1) * D];
            out.push(scale * q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>());
        }
    }
    out
}

fn kept(cfg: &CompressionConfig, keys: &[f32], logits: &[f32]) -> Vec<usize> {
    let obs = HeadObservation {
        len: LEN,
        head_dim: D,
        keys: KeyRows::flat_f32(keys, D),
        group: 1,
        window: W,
        window_logits: logits,
        h2o_scores: &[],
        values: &[],
    };
    select_keep(cfg, &obs, &mut HeadState::new()).expect("selection")
}

#[test]
fn rkv_on_q8_0_keys_chooses_as_the_f32_oracle_nearly_always() {
    let cfg = CompressionConfig {
        policy: PolicyKind::RKv,
        budget: 256,
        buffer: 128,
        window: W,
        ..CompressionConfig::default()
    };
    let (mut latest_diff, mut kept_diff, mut red_err, mut matched) = (0, 0, 0.0f64, 0);
    let heads = 16;
    for seed in 0..heads {
        let kf = keys(1000 + seed);
        let kq = through_q8_0(&kf);
        let (of, oq) = (
            redundancy_oracle(&kf, D, cfg.threshold, W),
            redundancy_oracle(&kq, D, cfg.threshold, W),
        );
        matched += of.latest.iter().filter(|r| r.is_some()).count();
        latest_diff += of
            .latest
            .iter()
            .zip(&oq.latest)
            .filter(|(a, b)| a != b)
            .count();
        for (a, b) in of.redundancy.iter().zip(&oq.redundancy) {
            red_err = red_err.max((a - b).abs() / a.abs().max(1e-12));
        }
        let logits = window_logits(&kf);
        let (a, b) = (kept(&cfg, &kf, &logits), kept(&cfg, &kq, &logits));
        assert_eq!(a.len(), b.len());
        kept_diff += a.iter().filter(|s| !b.contains(s)).count();
    }
    let slots = heads as usize * LEN;
    let kept_slots = heads as usize * cfg.budget;
    eprintln!(
        "q8_0 vs f32 keys over {heads} heads: latest similar slot differs for {latest_diff} of \
         {slots} rows ({matched} matched in f32), kept sets differ by {kept_diff} of \
         {kept_slots} slots, redundancy relative error at most {red_err:.2e}"
    );
    // The keys repeat (the threshold decides for many rows), and the 8-bit keys lead to
    // the oracle's choices for all but a few slots at the margins.
    assert!(
        matched > slots / 2,
        "the keys should repeat: {matched} of {slots}"
    );
    assert!(latest_diff * 100 <= slots, "{latest_diff} of {slots} rows");
    assert!(
        kept_diff * 50 <= kept_slots,
        "{kept_diff} of {kept_slots} kept slots"
    );
    assert!(red_err < 0.05, "redundancy moved by {red_err}");
}
