//! R-KV against SnapKV, one compression event of one KV head, measured as paired ratios:
//! the `compress` bench's caches (see `support`), and rounds in which R-KV on flat f32
//! keys, R-KV on the engine's paged f16 keys, the same from a state that described the
//! new slots as they were appended and was given every row's product with the key sum
//! (the engine's decode steps do both) and SnapKV each run one batch of events, in an
//! order that rotates from round to round. Each round gives its own ratios, so noise
//! that lasts longer than a round (another process, the host) hits all three alike;
//! criterion measures each function in turn and cannot pair them.
//!
//! After the synthetic sizes, the same event on real keys: each KV head of one layer of
//! the default model at budget 1024 (`support/real.rs`; skipped, with the reason, when the
//! golden stream is missing).
//!
//! `cargo bench -p rkv-core --bench compress_paired [-- [--json] [B1024_d64 real_L8_h0 ...]]`:
//! a table, or with `--json` one object per case; names given select cases.

#[path = "../tests/support/mod.rs"]
mod golden;
#[path = "support/real.rs"]
mod real;
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

/// Variants, in the order of [`Paired::times`].
const VARIANTS: usize = 4;
/// The index of SnapKV among the variants.
const SNAP: usize = VARIANTS - 1;

/// Per-event times of the variants (R-KV flat, R-KV paged, R-KV paged from a state that
/// described the new slots as they were appended, SnapKV), per round.
struct Paired {
    times: [Vec<f64>; VARIANTS],
    inner: usize,
}

impl Paired {
    /// Variant `v`'s time over SnapKV's, per round.
    fn ratio(&self, v: usize) -> Vec<f64> {
        self.times[v]
            .iter()
            .zip(&self.times[SNAP])
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
    let (empty, described) = (HeadState::new(), s.described_state());
    // A batch of a few milliseconds: long against the clock, short against the noise.
    let inner = (50_000 / s.cfg.budget).max(4);
    let one = |v: usize| match v {
        0 => batch(&s.cfg, &flat, &s.state, inner),
        1 => batch(&s.cfg, &paged, &s.state, inner),
        2 => batch(&s.cfg, &paged, &described, inner),
        _ => batch(&snap, &flat, &empty, inner),
    };
    let mut out = Paired {
        times: std::array::from_fn(|_| Vec::new()),
        inner,
    };
    for round in 0..WARM_UP + ROUNDS {
        let mut t = [0.0; VARIANTS];
        for k in 0..VARIANTS {
            let v = (round + k) % VARIANTS;
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

/// Measures one case and prints its line (`keys` says where the keys come from).
fn report(id: &str, keys: &str, s: &Setup, json: bool) {
    let p = measure(s);
    let t = p.times.each_ref().map(|v| Spread::of(v));
    let (fr, pr, dr) = (
        Spread::of(&p.ratio(0)),
        Spread::of(&p.ratio(1)),
        Spread::of(&p.ratio(2)),
    );
    let (budget, dim) = (s.cfg.budget, s.dim);
    if json {
        println!(
            "{{\"bench\": \"compress_paired\", \"case\": \"{id}\", \"keys\": \"{keys}\", \
             \"budget\": {budget}, \"head_dim\": {dim}, \"group\": {}, \"rounds\": {ROUNDS}, \
             \"events_per_batch\": {}, \"rkv_flat_us\": {}, \"rkv_paged_us\": {}, \
             \"rkv_described_us\": {}, \"snapkv_us\": {}, \"flat_ratio\": {}, \
             \"paged_ratio\": {}, \"described_ratio\": {}}}",
            s.group,
            p.inner,
            t[0].json(),
            t[1].json(),
            t[2].json(),
            t[SNAP].json(),
            fr.json(),
            pr.json(),
            dr.json()
        );
    } else {
        println!(
            "{id:>10}: R-KV flat {} us, paged {} us, described {} us, SnapKV {} us; per round \
             / SnapKV: flat {}, paged {}, described {}",
            t[0].text(1),
            t[1].text(1),
            t[2].text(1),
            t[SNAP].text(1),
            fr.text(2),
            pr.text(2),
            dr.text(2)
        );
    }
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
    let wanted = |id: &str| only.is_empty() || only.iter().any(|o| o == id);
    for budget in [256usize, 1024, 4096] {
        for dim in [64usize, 128] {
            let id = format!("B{budget}_d{dim}");
            if wanted(&id) {
                report(&id, "synthetic", &setup(budget, dim, true), json);
            }
        }
    }
    if !only.is_empty() && !only.iter().any(|o| o.starts_with("real_")) {
        return;
    }
    real::each_head(wanted, |id, keys, s| report(id, keys, s, json));
}
