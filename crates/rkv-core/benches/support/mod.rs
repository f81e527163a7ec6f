//! The cache the `compress` and `compress_paired` benches compress: one KV head at
//! `L = budget + buffer` (buffer 128, window 8, GQA group 4) whose first `budget` slots
//! survived a previous R-KV compression. Keys are rounded to f16, as the engine stores
//! them, so that the same cache can be read as flat f32 keys or as f16 keys in the
//! engine's runs of 32 rows (identical values, identical results).

use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rkv_core::policy::{appended_dots, Rows};
use rkv_core::{select_keep, CompressionConfig, HeadObservation, HeadState, KeyRows};

const BUFFER: usize = 128;
const WINDOW: usize = 8;
const GROUP: usize = 4;
/// Rows per run of the paged layout (the engine's default block size).
const RUN: usize = 32;

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
    out.iter().map(|&x| f16::from_f32(x).to_f32()).collect()
}

/// A cache of `budget + BUFFER` slots whose first `budget` slots survived a previous
/// R-KV compression, with the state that compression left.
pub struct Setup {
    pub cfg: CompressionConfig,
    pub dim: usize,
    pub group: usize,         // query heads per KV head
    pub keys: Vec<f32>,       // [L, d]
    pub paged: Vec<Vec<f16>>, // [L / RUN, RUN * d] the same keys in runs
    pub logits: Vec<f32>,     // [g, w, L - w]
    pub state: HeadState,
}

pub fn setup(budget: usize, dim: usize, structured: bool) -> Setup {
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
        keys: KeyRows::flat_f32(&first, dim),
        group: GROUP,
        window: WINDOW,
        window_logits: &first_logits,
        h2o_scores: &[],
        values: &[],
    };
    let mut state = HeadState::new();
    let kept = select_keep(&cfg, &obs, &mut state).unwrap_or_default();
    let mut cache: Vec<f32> = kept
        .iter()
        .flat_map(|&i| first[i * dim..(i + 1) * dim].to_vec())
        .collect();
    cache.extend(keys(&mut rng, BUFFER, dim, structured, &centres));
    let logits = logits(&mut rng);
    Setup::new(cfg, dim, GROUP, cache, logits, state)
}

impl Setup {
    /// The setup of a cache of `keys` (`[L, d]`, values f16 can hold), also laid out in
    /// the engine's runs.
    pub fn new(
        cfg: CompressionConfig,
        dim: usize,
        group: usize,
        keys: Vec<f32>,
        logits: Vec<f32>,
        state: HeadState,
    ) -> Self {
        let paged = keys
            .chunks(RUN * dim)
            .map(|run| run.iter().map(|&x| f16::from_f32(x)).collect())
            .collect();
        Setup {
            cfg,
            dim,
            group,
            keys,
            paged,
            logits,
            state,
        }
    }

    /// [`Setup::state`] with the slots appended since that compression described one at
    /// a time, as the engine does while it decodes (`HeadState::describe_appended`), and
    /// every row's product with the key sum given, as the attention of the step that
    /// leads to a compression gives them (`HeadState::set_sum_dots`): the state a
    /// compression of this cache starts from in the engine.
    pub fn described_state(&self) -> HeadState {
        let len = self.keys.len() / self.dim;
        let mut state = self.described_up_to(len);
        let sum_key = state.sum_key_after([]);
        let mut dots = vec![0.0; len];
        appended_dots(&sum_key, &self.keys, &mut dots);
        state
            .set_sum_dots(sum_key, dots)
            .expect("one product per row");
        state
    }

    /// [`Setup::described_state`] with only the slots before `len` described.
    pub fn described_up_to(&self, len: usize) -> HeadState {
        let mut state = self.state.clone();
        let d = self.dim;
        for n in state.described()..len {
            let mut dots = vec![0.0; n];
            appended_dots(
                &self.keys[n * d..(n + 1) * d],
                &self.keys[..n * d],
                &mut dots,
            );
            state
                .describe_appended(&self.keys[n * d..(n + 1) * d], &dots, self.cfg.threshold)
                .expect("shapes match");
        }
        state
    }

    pub fn obs(&self) -> HeadObservation<'_> {
        self.obs_with(KeyRows::flat_f32(&self.keys, self.dim))
    }

    /// The runs of [`Setup::paged`], for [`Setup::obs_paged`].
    pub fn runs(&self) -> Vec<&[f16]> {
        self.paged.iter().map(Vec::as_slice).collect()
    }

    /// The observation with the keys read from `runs` (f16, in place).
    pub fn obs_paged<'a>(&'a self, runs: &'a [&'a [f16]]) -> HeadObservation<'a> {
        let len = self.keys.len() / self.dim;
        let rows = Rows::runs(runs, RUN, len, self.dim).expect("runs cover the cache");
        self.obs_with(KeyRows::F16(rows))
    }

    fn obs_with<'a>(&'a self, keys: KeyRows<'a>) -> HeadObservation<'a> {
        HeadObservation {
            len: self.keys.len() / self.dim,
            head_dim: self.dim,
            keys,
            group: self.group,
            window: WINDOW,
            window_logits: &self.logits,
            h2o_scores: &[],
            values: &[],
        }
    }
}
