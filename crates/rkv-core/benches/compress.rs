//! One compression event of one KV head at `L = budget + buffer` (buffer 128, window 8,
//! GQA group 4): R-KV with the incremental redundancy path in steady state (the state
//! has seen a previous compression, so 128 slots are new) on flat f32 keys and on the
//! same keys as f16 in the engine's runs of 32 rows (what the engine passes), the same
//! paged event from a state that described the new slots as they were appended and was
//! given every row's product with the key sum (what the engine's decode steps leave),
//! R-KV with the O(L^2 d) oracle, and SnapKV. Window logits are given (the engine computes them),
//! as in `select_keep`'s contract.

mod support;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use rkv_core::policy::{select_keep_with, RedundancyPath};
use rkv_core::{select_keep, CompressionConfig, HeadState, PolicyKind};
use std::time::Duration;
use support::setup;

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
            let runs = s.runs();
            group.bench_function(BenchmarkId::new("rkv_paged", &id), |b| {
                b.iter_batched(
                    || s.state.clone(),
                    |mut state| select_keep(&s.cfg, &s.obs_paged(&runs), &mut state),
                    BatchSize::SmallInput,
                )
            });
            // The engine's state at a compression: the new slots were described as they
            // were appended and the rows' products with the key sum given, so the event
            // reads no key for them.
            let described = s.described_state();
            group.bench_function(BenchmarkId::new("rkv_paged_described", &id), |b| {
                b.iter_batched(
                    || described.clone(),
                    |mut state| select_keep(&s.cfg, &s.obs_paged(&runs), &mut state),
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
