//! R-KV against SnapKV, one compression event of one KV head, measured as paired ratios:
//! the `compress` bench's caches (see `support`), and rounds in which R-KV on flat f32
//! keys, R-KV on the engine's paged f16 keys and SnapKV each run one batch of events, in
//! an order that rotates from round to round. Each round gives its own ratios, so noise
//! that lasts longer than a round (another process, the host) hits all three alike;
//! criterion measures each function in turn and cannot pair them.
//!
//! `cargo bench -p rkv-core --bench compress_paired [-- [--json] [B1024_d64 ...]]`: a table,
//! or with `--json` one object per size; names given select sizes.

mod support;

use rkv_core::{select_keep, CompressionConfig, HeadObservation, HeadState, PolicyKind};
use std::hint::black_box;
use std::time::Instant;
use support::{setup, Setup};

/// Measured rounds per size (odd: the median is one of them), after `WARM_UP` unmeasured.
const ROUNDS: usize = 51;
const WARM_UP: usize = 3;

/// Median, min and max.
#[derive(Debug, Clone, Copy)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Self {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Self {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }

    fn json(&self) -> String {
        format!(
            "{{\"median\": {:.4}, \"min\": {:.4}, \"max\": {:.4}}}",
            self.median, self.min, self.max
        )
    }

    fn text(&self, places: usize) -> String {
        format!(
            "{:.p$} ({:.p$}-{:.p$})",
            self.median,
            self.min,
            self.max,
            p = places
        )
    }
}

/// Mean time (us) of one event over a batch of `inner` events. Every event starts from its
/// own copy of `state`, made before the clock starts (R-KV's steady state; SnapKV keeps
/// none, and its copies of the empty state cost nothing).
fn batch(
    cfg: &CompressionConfig,
    obs: &HeadObservation<'_>,
    state: &HeadState,
    inner: usize,
) -> f64 {
    let mut states = vec![state.clone(); inner];
    let t = Instant::now();
    for st in &mut states {
        black_box(select_keep(cfg, obs, st).ok());
    }
    t.elapsed().as_secs_f64() * 1e6 / inner as f64
}

/// Per-event times of the three variants (R-KV flat, R-KV paged, SnapKV), per round.
struct Paired {
    times: [Vec<f64>; 3],
    inner: usize,
}

impl Paired {
    /// Variant `v`'s time over SnapKV's, per round.
    fn ratio(&self, v: usize) -> Vec<f64> {
        self.times[v]
            .iter()
            .zip(&self.times[2])
            .map(|(t, s)| t / s)
            .collect()
    }
}

fn measure(s: &Setup) -> Paired {
    let snap = CompressionConfig {
        policy: PolicyKind::SnapKv,
        ..s.cfg
    };
    let runs = s.runs();
    let (flat, paged) = (s.obs(), s.obs_paged(&runs));
    let empty = HeadState::new();
    // A batch of a few milliseconds: long against the clock, short against the noise.
    let inner = (50_000 / s.cfg.budget).max(4);
    let one = |v: usize| match v {
        0 => batch(&s.cfg, &flat, &s.state, inner),
        1 => batch(&s.cfg, &paged, &s.state, inner),
        _ => batch(&snap, &flat, &empty, inner),
    };
    let mut out = Paired {
        times: [Vec::new(), Vec::new(), Vec::new()],
        inner,
    };
    for round in 0..WARM_UP + ROUNDS {
        let mut t = [0.0; 3];
        for k in 0..3 {
            let v = (round + k) % 3;
            t[v] = one(v);
        }
        if round >= WARM_UP {
            for (all, &x) in out.times.iter_mut().zip(&t) {
                all.push(x);
            }
        }
    }
    out
}

fn main() {
    let mut json = false;
    let mut only = Vec::new();
    // `cargo bench` passes `--bench`; other flags are not ours either.
    for a in std::env::args().skip(1) {
        if a == "--json" {
            json = true;
        } else if !a.starts_with('-') {
            only.push(a);
        }
    }
    for budget in [256usize, 1024, 4096] {
        for dim in [64usize, 128] {
            let id = format!("B{budget}_d{dim}");
            if !only.is_empty() && !only.contains(&id) {
                continue;
            }
            let p = measure(&setup(budget, dim, true));
            let t = p.times.each_ref().map(|v| Spread::of(v));
            let (fr, pr) = (Spread::of(&p.ratio(0)), Spread::of(&p.ratio(1)));
            if json {
                println!(
                    "{{\"bench\": \"compress_paired\", \"budget\": {budget}, \"head_dim\": {dim}, \
                     \"rounds\": {ROUNDS}, \"events_per_batch\": {}, \"rkv_flat_us\": {}, \
                     \"rkv_paged_us\": {}, \"snapkv_us\": {}, \"flat_ratio\": {}, \"paged_ratio\": {}}}",
                    p.inner,
                    t[0].json(),
                    t[1].json(),
                    t[2].json(),
                    fr.json(),
                    pr.json()
                );
            } else {
                println!(
                    "{id:>10}: R-KV flat {} us, paged {} us, SnapKV {} us; per round flat / SnapKV {}, paged / SnapKV {}",
                    t[0].text(1),
                    t[1].text(1),
                    t[2].text(1),
                    fr.text(2),
                    pr.text(2)
                );
            }
        }
    }
}
