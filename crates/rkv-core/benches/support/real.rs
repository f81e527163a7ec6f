//! Real keys for the paired bench: one KV head of the default model (SmolLM2-135M-Instruct,
//! head dim 64, GQA group 3) as the engine would hold it at a steady-state compression at
//! budget 1024. The keys and queries are the golden stream
//! `kv-stream/s4_rkv_real_T1500_B128_buf128.safetensors` (post-RoPE, layer 8, 1500 tokens
//! of a reasoning text; see `shared/golden/README.md`), read from `$RKV_GOLDEN_DIR` or
//! `shared/golden` beside the repository: tokens `0..1152` are compressed by R-KV from a
//! fresh state (window queries `1144..1152`), the 1024 kept slots are followed by tokens
//! `1152..1280`, and the measured event is the next one (window queries `1272..1280`).
//! Keys are rounded to f16, as the engine stores them.

use half::f16;
use rkv_core::{select_keep, CompressionConfig, HeadObservation, HeadState, KeyRows};

use super::golden::{golden_root, row, window_logits, Case};
use super::Setup;

/// The stream file, under the golden root.
pub const FILE: &str = "kv-stream/s4_rkv_real_T1500_B128_buf128.safetensors";
/// Its model layer (the file's `source`), for labels.
pub const LAYER: usize = 8;
const BUDGET: usize = 1024;
const BUFFER: usize = 128;
const WINDOW: usize = 8;

/// The stream's keys and queries, loaded once for every head.
pub struct Stream {
    case: Case,
    pub kv_heads: usize,
    group: usize,
    tokens: usize,
    dim: usize,
}

impl Stream {
    /// The stream file, or why it cannot be read (the bench says so and goes on).
    pub fn load() -> Result<Self, String> {
        let (root, _) = golden_root()?;
        let case = Case::load(&root.join(FILE))?;
        let (ks, _) = case.f32("keys_all")?;
        let (qs, _) = case.f32("queries_all")?;
        let (kv_heads, tokens, dim) = (ks[0], ks[1], ks[2]);
        if qs[0] % kv_heads != 0 || qs[1] != tokens || qs[2] != dim {
            return Err(format!("{FILE}: queries {qs:?} do not fit keys {ks:?}"));
        }
        let need = BUDGET + 2 * BUFFER;
        if tokens < need {
            return Err(format!("{FILE}: {tokens} tokens, the event needs {need}"));
        }
        Ok(Stream {
            group: qs[0] / kv_heads,
            case,
            kv_heads,
            tokens,
            dim,
        })
    }

    /// Key of token `t` of KV head `h`, rounded to f16.
    fn key(&self, h: usize, t: usize) -> Vec<f32> {
        let (_, k) = self.case.f32("keys_all").expect("checked in load");
        row(k, self.dim, h * self.tokens + t)
            .iter()
            .map(|&x| f16::from_f32(x).to_f32())
            .collect()
    }

    /// Window logits `[g, w, L - w]` of the queries ending at token `end` over `keys`.
    fn logits(&self, h: usize, end: usize, keys: &[f32]) -> Vec<f32> {
        let (_, q) = self.case.f32("queries_all").expect("checked in load");
        let n = keys.len() / self.dim - WINDOW;
        let query = |hq: usize, t: usize| row(q, self.dim, hq * self.tokens + end - WINDOW + t);
        window_logits(query, keys, h, self.group, WINDOW, n, self.dim)
    }

    /// The steady-state event of KV head `h` (see the module notes).
    pub fn setup(&self, h: usize) -> Result<Setup, String> {
        let cfg = CompressionConfig {
            budget: BUDGET,
            buffer: BUFFER,
            window: WINDOW,
            ..CompressionConfig::default()
        };
        let (d, len) = (self.dim, BUDGET + BUFFER);
        let first: Vec<f32> = (0..len).flat_map(|t| self.key(h, t)).collect();
        let first_logits = self.logits(h, len, &first);
        let obs = HeadObservation {
            len,
            head_dim: d,
            keys: KeyRows::flat_f32(&first, d),
            group: self.group,
            window: WINDOW,
            window_logits: &first_logits,
            h2o_scores: &[],
            values: &[],
        };
        let mut state = HeadState::new();
        let kept = select_keep(&cfg, &obs, &mut state).map_err(|e| e.to_string())?;
        let mut cache: Vec<f32> = kept
            .iter()
            .flat_map(|&i| first[i * d..(i + 1) * d].to_vec())
            .collect();
        cache.extend((len..len + BUFFER).flat_map(|t| self.key(h, t)));
        let logits = self.logits(h, len + BUFFER, &cache);
        Ok(Setup::new(cfg, d, self.group, cache, logits, state))
    }
}

/// Runs `report(id, keys, setup)` for each KV head of the stream whose id
/// (`real_L8_h0`, ...) `wanted` accepts, `keys` naming where its keys come from; a head
/// or stream that cannot be set up is skipped with the reason.
pub fn each_head(wanted: impl Fn(&str) -> bool, mut report: impl FnMut(&str, &str, &Setup)) {
    let stream = match Stream::load() {
        Ok(stream) => stream,
        Err(e) => return eprintln!("real keys skipped ({FILE}): {e}"),
    };
    for h in 0..stream.kv_heads {
        let id = format!("real_L{LAYER}_h{h}");
        if !wanted(&id) {
            continue;
        }
        let keys = format!("SmolLM2-135M-Instruct layer {LAYER} KV head {h}");
        match stream.setup(h) {
            Ok(s) => report(&id, &keys, &s),
            Err(e) => eprintln!("{id}: skipped: {e}"),
        }
    }
}
