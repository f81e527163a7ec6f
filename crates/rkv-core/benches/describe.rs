//! The per-step price of describing R-KV's appended slots as they arrive (what the
//! engine's attention does for every KV head and every decoded token): the new key's dot
//! products with the `L - 1` resident f16 keys (`appended_dots`, in the redundancy's fixed
//! order) and the state's update (`HeadState::describe_appended`), at the last slot before
//! a compression, `L = budget + buffer` (buffer 128), for budgets 512 and 1024 and head
//! dims 64 and 128, on the clustered keys of the compression benches.

// Shared with the compression benches, which use the rest of it.
#[allow(dead_code)]
mod support;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use half::f16;
use rkv_core::policy::appended_dots;
use std::time::Duration;
use support::setup;

fn describe(c: &mut Criterion) {
    let mut group = c.benchmark_group("describe");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for budget in [512usize, 1024] {
        for dim in [64usize, 128] {
            let s = setup(budget, dim, true);
            let id = format!("B{budget}_d{dim}");
            let len = s.keys.len() / dim;
            let n = len - 1;
            // The cache's keys as the engine stores them, and the new key widened.
            let half: Vec<f16> = s.keys.iter().map(|&x| f16::from_f32(x)).collect();
            let key: Vec<f32> = half[n * dim..].iter().map(|x| x.to_f32()).collect();
            let mut dots = vec![0.0f32; n];
            group.bench_function(BenchmarkId::new("dots", &id), |b| {
                b.iter(|| appended_dots(&key, &half[..n * dim], &mut dots))
            });
            appended_dots(&key, &half[..n * dim], &mut dots);
            let before = s.described_up_to(n);
            group.bench_function(BenchmarkId::new("update", &id), |b| {
                b.iter_batched(
                    // With room for the slot, as the engine's states have once they
                    // have grown (a reallocation here would time the allocator).
                    || {
                        let mut state = before.clone();
                        state.reserve(1);
                        state
                    },
                    |mut state| {
                        state
                            .describe_appended(&key, &dots, s.cfg.threshold)
                            .expect("shapes match");
                        state
                    },
                    BatchSize::SmallInput,
                )
            });
        }
    }
    group.finish();
}

criterion_group!(benches, describe);
criterion_main!(benches);
