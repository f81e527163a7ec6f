//! Kernel throughput: quantised matvec/matmul (weights streamed in GB/s) for
//! SmolLM2-135M shapes and the K-quants on the 1.5B shape's output head, and the f16
//! dense f16/bf16 products, and the f16 and q8_0 attention kernels over a 4096-row cache.
//! Set `RKV_BENCH_THREADS` (default 1) for the rayon pool size.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rkv_kernels::wide::matmul_wide;
use rkv_kernels::*;

fn random_q4_1(r: &mut StdRng, n: usize) -> Vec<BlockQ4_1> {
    (0..n)
        .map(|_| BlockQ4_1 {
            d: f16::from_f32(r.gen_range(-0.05..0.05)),
            m: f16::from_f32(r.gen_range(-0.05..0.05)),
            qs: std::array::from_fn(|_| r.gen()),
        })
        .collect()
}

fn random_q8_0(r: &mut StdRng, n: usize) -> Vec<BlockQ8_0> {
    (0..n)
        .map(|_| BlockQ8_0 {
            d: f16::from_f32(r.gen_range(-0.05..0.05)),
            qs: std::array::from_fn(|_| r.gen_range(-127..=127)),
        })
        .collect()
}

fn random_q4_k(r: &mut StdRng, n: usize) -> Vec<BlockQ4K> {
    (0..n)
        .map(|_| BlockQ4K {
            d: f16::from_f32(r.gen_range(-0.01..0.01)),
            dmin: f16::from_f32(r.gen_range(-0.01..0.01)),
            scales: std::array::from_fn(|_| r.gen()),
            qs: std::array::from_fn(|_| r.gen()),
        })
        .collect()
}

fn random_q5_k(r: &mut StdRng, n: usize) -> Vec<BlockQ5K> {
    (0..n)
        .map(|_| BlockQ5K {
            d: f16::from_f32(r.gen_range(-0.01..0.01)),
            dmin: f16::from_f32(r.gen_range(-0.01..0.01)),
            scales: std::array::from_fn(|_| r.gen()),
            qh: std::array::from_fn(|_| r.gen()),
            qs: std::array::from_fn(|_| r.gen()),
        })
        .collect()
}

fn random_q6_k(r: &mut StdRng, n: usize) -> Vec<BlockQ6K> {
    (0..n)
        .map(|_| BlockQ6K {
            ql: std::array::from_fn(|_| r.gen()),
            qh: std::array::from_fn(|_| r.gen()),
            scales: std::array::from_fn(|_| r.gen_range(-32..32)),
            d: f16::from_f32(r.gen_range(-0.01..0.01)),
        })
        .collect()
}

fn floats(r: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| r.gen_range(-1.0..1.0)).collect()
}

fn threads() -> usize {
    std::env::var("RKV_BENCH_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn bench_matmul(c: &mut Criterion) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads())
        .build()
        .unwrap();
    let mut r = StdRng::seed_from_u64(7);
    let mut g = c.benchmark_group(format!("matmul_t{}", threads()));
    g.sample_size(10);
    // (name, rows, cols)
    for (name, rows, cols) in [
        ("q4_1_576x576", 576, 576),
        ("q4_1_1536x576", 1536, 576),
        ("q4_1_576x1536", 576, 1536),
    ] {
        let nb = cols / QK;
        let w = random_q4_1(&mut r, rows * nb);
        let packed = PackedQ4_1::pack(&w, rows).unwrap();
        for n in [1usize, 16, 64] {
            let xf = floats(&mut r, n * cols);
            let mut x = vec![BlockQ8_1::default(); n * nb];
            quantize_row_q8_1(&xf, &mut x).unwrap();
            let mut out = vec![0.0f32; n * rows];
            g.throughput(Throughput::Bytes((w.len() * BlockQ4_1::BYTES) as u64));
            g.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter(|| pool.install(|| matmul_q4_1(&w, rows, &x, n, &mut out).unwrap()))
            });
            g.bench_function(BenchmarkId::new(format!("{name}_packed"), n), |b| {
                b.iter(|| pool.install(|| matmul_packed(&packed, &x, n, &mut out).unwrap()))
            });
        }
    }
    let (rows, cols) = (49152, 576);
    let nb = cols / QK;
    let w = random_q8_0(&mut r, rows * nb);
    let packed = PackedQ8_0::pack(&w, rows).unwrap();
    for n in [1usize, 16, 64] {
        let xf = floats(&mut r, n * cols);
        let mut x = vec![BlockQ8_0::default(); n * nb];
        quantize_row_q8_0(&xf, &mut x).unwrap();
        let mut out = vec![0.0f32; n * rows];
        g.throughput(Throughput::Bytes((w.len() * BlockQ8_0::BYTES) as u64));
        g.bench_function(BenchmarkId::new("q8_0_49152x576", n), |b| {
            b.iter(|| pool.install(|| matmul_q8_0(&w, rows, &x, n, &mut out).unwrap()))
        });
        g.bench_function(BenchmarkId::new("q8_0_49152x576_packed", n), |b| {
            b.iter(|| pool.install(|| matmul_packed(&packed, &x, n, &mut out).unwrap()))
        });
    }
    g.finish();
}

/// One packed product: activations, token count, outputs.
type Product<'a> = &'a (dyn Fn(&[BlockQ8K], usize, &mut [f32]) + Sync);

/// The packed K-quant products on the 1.5B shape's largest matrix (the output head,
/// 151936 x 1536, about 150-240 MB: streamed from memory, not cache), by token count:
/// `matmul_packed_tiles` (the tiles) and, from 8 tokens, the wide path (`_wide`; its
/// scalar kernel without AVX-512 VNNI), so the two routes compare at each count
/// (`matmul_packed` takes the wide one from its format's `Wide::MIN_TOKENS` where it has VNNI).
fn bench_kquant(c: &mut Criterion) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads())
        .build()
        .unwrap();
    let mut r = StdRng::seed_from_u64(11);
    let mut g = c.benchmark_group(format!("kquant_t{}", threads()));
    g.sample_size(10);
    let (rows, cols) = (151936, 1536);
    let nb = cols / QK_K;
    let most = 64;
    let xf = floats(&mut r, most * cols);
    let mut x = vec![BlockQ8K::default(); most * nb];
    quantize_row_q8_k(&xf, &mut x).unwrap();
    let mut out = vec![0.0f32; most * rows];
    let mut run = |name: &str, packed: Product, wide: Product, bytes: usize| {
        g.throughput(Throughput::Bytes((rows * nb * bytes) as u64));
        for n in [1usize, 4, 8, 16, 32, 64] {
            g.bench_function(BenchmarkId::new(format!("{name}_{rows}x{cols}"), n), |b| {
                b.iter(|| pool.install(|| packed(&x[..n * nb], n, &mut out[..n * rows])))
            });
            if n >= 8 {
                let id = BenchmarkId::new(format!("{name}_{rows}x{cols}_wide"), n);
                g.bench_function(id, |b| {
                    b.iter(|| pool.install(|| wide(&x[..n * nb], n, &mut out[..n * rows])))
                });
            }
        }
    };
    let w = PackedQ4K::pack(&random_q4_k(&mut r, rows * nb), rows).unwrap();
    run(
        "q4_k",
        &|x, n, out| matmul_packed_tiles(&w, x, n, out).unwrap(),
        &|x, n, out| matmul_wide(&w, x, n, true, out).unwrap(),
        BlockQ4K::BYTES,
    );
    drop(w);
    let w = PackedQ5K::pack(&random_q5_k(&mut r, rows * nb), rows).unwrap();
    run(
        "q5_k",
        &|x, n, out| matmul_packed_tiles(&w, x, n, out).unwrap(),
        &|x, n, out| matmul_wide(&w, x, n, true, out).unwrap(),
        BlockQ5K::BYTES,
    );
    drop(w);
    let w = PackedQ6K::pack(&random_q6_k(&mut r, rows * nb), rows).unwrap();
    run(
        "q6_k",
        &|x, n, out| matmul_packed_tiles(&w, x, n, out).unwrap(),
        &|x, n, out| matmul_wide(&w, x, n, true, out).unwrap(),
        BlockQ6K::BYTES,
    );
    drop(w);
    g.finish();
}

/// The dense 16-bit products on the default model's shapes (its F16/BF16 files): one
/// token (decode) and a 512-token prompt chunk, `[rows, cols]` x `[n, cols]`.
fn bench_dense(c: &mut Criterion) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads())
        .build()
        .unwrap();
    let mut r = StdRng::seed_from_u64(9);
    let mut g = c.benchmark_group(format!("dense_t{}", threads()));
    g.sample_size(10);
    for (name, rows, cols) in [("1536x576", 1536, 576), ("576x1536", 576, 1536)] {
        let wf = floats(&mut r, rows * cols);
        let w16: Vec<f16> = wf.iter().map(|&v| f16::from_f32(v)).collect();
        let wb: Vec<bf16> = wf.iter().map(|&v| bf16::from_f32(v)).collect();
        for n in [1usize, 512] {
            let x = floats(&mut r, n * cols);
            let mut out = vec![0.0f32; n * rows];
            g.throughput(Throughput::Elements((2 * rows * cols * n) as u64));
            g.bench_function(BenchmarkId::new(format!("f16_{name}"), n), |b| {
                b.iter(|| pool.install(|| matmul_f16(&w16, rows, &x, n, &mut out).unwrap()))
            });
            g.bench_function(BenchmarkId::new(format!("bf16_{name}"), n), |b| {
                b.iter(|| pool.install(|| matmul_bf16(&wb, rows, &x, n, &mut out).unwrap()))
            });
        }
    }
    g.finish();
}

fn bench_attn(c: &mut Criterion) {
    let mut r = StdRng::seed_from_u64(8);
    let (rows, d) = (4096, 64);
    let k: Vec<f16> = floats(&mut r, rows * d)
        .into_iter()
        .map(f16::from_f32)
        .collect();
    let q = floats(&mut r, 3 * d);
    let mut scores = vec![0.0f32; 3 * rows];
    let mut g = c.benchmark_group("attn");
    g.sample_size(10);
    g.throughput(Throughput::Bytes((k.len() * 2) as u64));
    g.bench_function("dot_f16_d64_x4096", |b| {
        b.iter(|| {
            for (s, kr) in scores.iter_mut().zip(k.chunks_exact(d)) {
                *s = dot_f16(kr, &q[..d]);
            }
        })
    });
    g.bench_function("dot_f16_multi_g3_d64_x4096", |b| {
        b.iter(|| {
            for (s, kr) in scores.chunks_exact_mut(3).zip(k.chunks_exact(d)) {
                dot_f16_multi(kr, &q, s);
            }
        })
    });
    let mut s3 = vec![0.0f32; 3 * rows];
    g.bench_function("gqa_scores_f16_g3_d64_x4096", |b| {
        b.iter(|| gqa_scores_f16(&k, d, d, &q, &mut s3))
    });
    let mut o3 = vec![0.0f32; 3 * d];
    g.bench_function("gqa_weighted_sum_f16_g3_d64_x4096", |b| {
        b.iter(|| gqa_weighted_sum_f16(&k, d, d, &s3, &mut o3))
    });
    // The same cache as q8_0 rows (34 bytes per 32 values), in the engine's runs of 32
    // slots, against the f16 kernels over the same runs.
    let kf: Vec<f32> = k.iter().map(|x| x.to_f32()).collect();
    let mut kq = vec![BlockQ8_0::default(); kf.len() / QK];
    quantize_row_q8_0(&kf, &mut kq).expect("whole blocks");
    let (run, rq) = (32, 32 * d / QK);
    g.bench_function("gqa_runs_f16_g3_d64_x4096", |b| {
        b.iter(|| {
            for (kr, sr) in k.chunks_exact(run * d).zip(s3.chunks_exact_mut(3 * run)) {
                gqa_scores_f16(kr, d, d, &q, sr);
                gqa_weighted_sum_f16(kr, d, d, sr, &mut o3);
            }
        })
    });
    g.bench_function("gqa_runs_q8_0_g3_d64_x4096", |b| {
        b.iter(|| {
            for (kr, sr) in kq.chunks_exact(rq).zip(s3.chunks_exact_mut(3 * run)) {
                gqa_scores_q8_0(kr, d, &q, sr);
                gqa_weighted_sum_q8_0(kr, d, sr, &mut o3);
            }
        })
    });
    // The 1.5B shape's group (6 query heads of 128) over a budget's 1152 slots, in the
    // engine's runs of 32 (one block each).
    let (d2, g2, run) = (128, 6, 32);
    let k2: Vec<f16> = floats(&mut r, 1152 * d2)
        .into_iter()
        .map(f16::from_f32)
        .collect();
    let q2 = floats(&mut r, g2 * d2);
    let mut s2 = vec![0.0f32; g2 * run];
    g.bench_function("gqa_scores_f16_g6_d128_x1152", |b| {
        b.iter(|| {
            for kr in k2.chunks_exact(run * d2) {
                gqa_scores_f16(kr, d2, d2, &q2, &mut s2);
            }
        })
    });
    let mut o2 = vec![0.0f32; g2 * d2];
    g.bench_function("gqa_weighted_sum_f16_g6_d128_x1152", |b| {
        b.iter(|| {
            for vr in k2.chunks_exact(run * d2) {
                gqa_weighted_sum_f16(vr, d2, d2, &s2, &mut o2);
            }
        })
    });
    let mut acc = vec![0.0f32; d];
    g.bench_function("axpy_f16_d64_x4096", |b| {
        b.iter(|| {
            for (s, vr) in scores.iter().zip(k.chunks_exact(d)) {
                axpy_f16(&mut acc, *s, vr);
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench_matmul, bench_kquant, bench_dense, bench_attn);
criterion_main!(benches);
