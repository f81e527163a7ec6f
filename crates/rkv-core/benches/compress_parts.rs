//! Where the time of one compression event of one KV head goes: the engine's R-KV event
//! (a state that described the new slots as they were appended and was given every
//! row's product with the key sum, keys in the engine's f16 runs) split into the calls
//! `select_keep` makes (importance, redundancy pass, combined score, top-k, commit), and
//! SnapKV's event and its top-k beside it. The caches are `compress_paired`'s.
//!
//! Each round runs a batch of events on cold copies of the state (as the engine's head
//! states are: one compression each, far apart) and times every part of every event;
//! a part's figure is the median over the rounds of its mean per event. The redundancy
//! pass here copies the state's row bookkeeping, which `select_keep` borrows instead, so
//! the parts add up to a little more than the whole.
//!
//! `cargo bench -p rkv-core --bench compress_parts [-- B1024_d64 real_L8_h0 ...]`: a line
//! per case; names given select cases.

#[path = "../tests/support/mod.rs"]
mod golden;
#[path = "support/real.rs"]
mod real;
mod support;

use rkv_core::policy::{importance, redundancy_incremental, select};
use rkv_core::{select_keep, CompressionConfig, HeadState, PolicyKind};
use std::hint::black_box;
use std::time::Instant;
use support::{setup, Setup};

/// Measured rounds per case, and events per round.
const ROUNDS: usize = 101;
const EVENTS: usize = 48;

/// The parts, in the order they are printed.
const PARTS: [&str; 8] = [
    "R-KV whole",
    "importance",
    "redundancy",
    "score",
    "top-k",
    "commit",
    "SnapKV whole",
    "SnapKV top-k",
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Microseconds per event of every part, median over the rounds.
fn measure(s: &Setup) -> [f64; PARTS.len()] {
    let cfg = s.cfg;
    let snap = CompressionConfig {
        policy: PolicyKind::SnapKv,
        ..cfg
    };
    let runs = s.runs();
    let (obs, flat) = (s.obs_paged(&runs), s.obs());
    let n = obs.len - obs.window;
    let lambda = f64::from(cfg.effective_lambda());
    let described = s.described_state();
    let mut rounds: [Vec<f64>; PARTS.len()] = std::array::from_fn(|_| Vec::new());
    for _ in 0..ROUNDS {
        let mut total = [0.0f64; PARTS.len()];
        let mut whole = vec![described.clone(); EVENTS];
        let mut parts = vec![described.clone(); EVENTS];
        let us = |t: Instant| t.elapsed().as_secs_f64() * 1e6;
        let t = Instant::now();
        for st in &mut whole {
            black_box(select_keep(&cfg, &obs, st).ok());
        }
        total[0] = us(t);
        for st in &mut parts {
            let t = Instant::now();
            let imp =
                importance::importance(obs.window_logits, obs.group, obs.window, n, cfg.kernel);
            total[1] += us(t);
            let t = Instant::now();
            let pass = redundancy_incremental(obs.keys, cfg.threshold, obs.window, st);
            total[2] += us(t);
            let Ok(mut pass) = pass else { continue };
            let t = Instant::now();
            let mut score = std::mem::take(&mut pass.redundancy);
            for (s, &i) in score.iter_mut().zip(&imp) {
                *s = lambda * f64::from(i) - (1.0 - lambda) * *s;
            }
            total[3] += us(t);
            let t = Instant::now();
            let kept = select::top_k_plus_window(&score, cfg.budget, obs.window);
            total[4] += us(t);
            let t = Instant::now();
            black_box(pass.commit(&kept, st).ok());
            total[5] += us(t);
        }
        let t = Instant::now();
        for _ in 0..EVENTS {
            black_box(select_keep(&snap, &flat, &mut HeadState::new()).ok());
        }
        total[6] = us(t);
        let imp = importance::importance(obs.window_logits, obs.group, obs.window, n, cfg.kernel);
        let score: Vec<f64> = imp.iter().map(|&i| f64::from(i)).collect();
        let t = Instant::now();
        for _ in 0..EVENTS {
            black_box(select::top_k_plus_window(&score, cfg.budget, obs.window));
        }
        total[7] = us(t);
        for (r, t) in rounds.iter_mut().zip(total) {
            r.push(t / EVENTS as f64);
        }
    }
    rounds.map(median)
}

fn report(id: &str, s: &Setup) {
    let t = measure(s);
    let parts: Vec<String> = PARTS
        .iter()
        .zip(t)
        .map(|(name, us)| format!("{name} {us:.1}"))
        .collect();
    println!(
        "{id:>10} (us per event): {}; R-KV / SnapKV {:.2}",
        parts.join(", "),
        t[0] / t[6]
    );
}

fn main() {
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |id: &str| only.is_empty() || only.iter().any(|o| o == id);
    for dim in [64usize, 128] {
        let id = format!("B1024_d{dim}");
        if wanted(&id) {
            report(&id, &setup(1024, dim, true));
        }
    }
    if !only.is_empty() && !only.iter().any(|o| o.starts_with("real_")) {
        return;
    }
    real::each_head(wanted, |id, _, s| report(id, s));
}
