//! One compression event of one KV head at `L = budget + buffer` (buffer 128, window 8,
//! GQA group 4): R-KV with the incremental redundancy path in steady state (the state
//! has seen a previous compression, so 128 slots are new), R-KV with the O(L^2 d)
//! oracle, and SnapKV. Window logits are given (the engine computes them), as in
//! `select_keep`'s contract.

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rkv_core::policy::{select_keep_with, RedundancyPath};
use rkv_core::{select_keep, CompressionConfig, HeadObservation, HeadState, PolicyKind};
use std::time::Duration;

const BUFFER: usize = 128;
const WINDOW: usize = 8;
const GROUP: usize = 4;

/// Keys like a real head's: a shared offset, a few clusters with noise, repeated runs.
/// With `structured == false`: independent uniform keys (almost no pair exceeds 0.5,
/// the worst case for the latest-similar-slot scans).
fn keys(
    rng: &mut StdRng,
    n: usize,
    dim: usize,
    structured: bool,
    centres: &[Vec<f32>],
) -> Vec<f32> {
    let mut out: Vec<f32> = Vec::with_capacity(n * dim);
    for t in 0..n {
        if !structured {
            out.extend((0..dim).map(|_| rng.gen_range(-1.0f32..1.0)));
        } else if t >= 16 && rng.gen_bool(0.2) {
            let src = rng.gen_range(t - 16..t);
            let copy: Vec<f32> = out[src * dim..(src + 1) * dim]
                .iter()
                .map(|&x| x + 0.05 * rng.gen_range(-1.0f32..1.0))
                .collect();
            out.extend(copy);
        } else {
            let c = &centres[rng.gen_range(0..centres.len())];
            out.extend(
                c.iter()
                    .map(|&x| x + 0.6 + 0.5 * rng.gen_range(-1.0f32..1.0)),
            );
        }
    }
    out
}

/// A cache of `budget + BUFFER` slots whose first `budget` slots survived a previous
/// R-KV compression, with the state that compression left.
struct Setup {
    cfg: CompressionConfig,
    dim: usize,
    keys: Vec<f32>,   // [L, d]
    logits: Vec<f32>, // [g, w, L - w]
    state: HeadState,
}

fn setup(budget: usize, dim: usize, structured: bool) -> Setup {
    let mut rng = StdRng::seed_from_u64((budget * 1000 + dim) as u64);
    let centres: Vec<Vec<f32>> = (0..6)
        .map(|_| (0..dim).map(|_| rng.gen_range(-1.0f32..1.0)).collect())
        .collect();
    let cfg = CompressionConfig {
        budget,
        buffer: BUFFER,
        window: WINDOW,
        ..CompressionConfig::default()
    };
    let len = budget + BUFFER;
    let logits = |rng: &mut StdRng| -> Vec<f32> {
        (0..GROUP * WINDOW * (len - WINDOW))
            .map(|_| rng.gen_range(-4.0f32..4.0))
            .collect()
    };
    // The previous compression.
    let first = keys(&mut rng, len, dim, structured, &centres);
    let first_logits = logits(&mut rng);
    let obs = HeadObservation {
        len,
        head_dim: dim,
        keys: &first,
        group: GROUP,
        window: WINDOW,
        window_logits: &first_logits,
        h2o_scores: &[],
    };
    let mut state = HeadState::new();
    let kept = select_keep(&cfg, &obs, &mut state).unwrap_or_default();
    let mut cache: Vec<f32> = kept
        .iter()
        .flat_map(|&i| first[i * dim..(i + 1) * dim].to_vec())
        .collect();
    cache.extend(keys(&mut rng, BUFFER, dim, structured, &centres));
    Setup {
        cfg,
        dim,
        keys: cache,
        logits: logits(&mut rng),
        state,
    }
}

impl Setup {
    fn obs(&self) -> HeadObservation<'_> {
        HeadObservation {
            len: self.keys.len() / self.dim,
            head_dim: self.dim,
            keys: &self.keys,
            group: GROUP,
            window: WINDOW,
            window_logits: &self.logits,
            h2o_scores: &[],
        }
    }
}

fn compress(c: &mut Criterion) {
    let mut group = c.benchmark_group("compress");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for budget in [256usize, 1024, 4096] {
        for dim in [64usize, 128] {
            let s = setup(budget, dim, true);
            let id = format!("B{budget}_d{dim}");
            group.bench_function(BenchmarkId::new("rkv_fast", &id), |b| {
                b.iter_batched(
                    || s.state.clone(),
                    |mut state| select_keep(&s.cfg, &s.obs(), &mut state),
                    BatchSize::SmallInput,
                )
            });
            group.bench_function(BenchmarkId::new("rkv_oracle", &id), |b| {
                b.iter(|| {
                    select_keep_with(
                        &s.cfg,
                        &s.obs(),
                        &mut HeadState::new(),
                        RedundancyPath::Oracle,
                    )
                })
            });
            let snap = CompressionConfig {
                policy: PolicyKind::SnapKv,
                ..s.cfg
            };
            group.bench_function(BenchmarkId::new("snapkv", &id), |b| {
                b.iter(|| select_keep(&snap, &s.obs(), &mut HeadState::new()))
            });
        }
    }
    // Worst case for the scans: unrelated keys, no early exits.
    let s = setup(1024, 64, false);
    group.bench_function(
        BenchmarkId::new("rkv_fast_unstructured", "B1024_d64"),
        |b| {
            b.iter_batched(
                || s.state.clone(),
                |mut state| select_keep(&s.cfg, &s.obs(), &mut state),
                BatchSize::SmallInput,
            )
        },
    );
    group.finish();
}

criterion_group!(benches, compress);
criterion_main!(benches);
