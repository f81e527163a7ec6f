//! The golden kv-stream vectors (`shared/golden/README.md` §2) driven through the ENGINE's
//! own compression path, not rkv-core alone: a paged f32 [`KvStore`] with small blocks (so
//! compaction crosses block boundaries), a [`BlockTable`], [`SeqCompression`] deciding when
//! to observe and when to compress, and [`PagedAttention`] computing — and capturing — the
//! window logits `q.k/sqrt(d)` while it attends. Every file's tokens are fed as the
//! schedule says (the prompt in one append, then one token per step).
//!
//! Checked per file:
//! - the resident positions right after each compression equal `expected_kept_positions`
//!   (failures name file, compression index, token, head and slot);
//! - the compression steps and count, and the final resident positions;
//! - the attention output of every token equals a float64 softmax attention over exactly
//!   the resident slots (positions read back from the store, keys/values from the file), so
//!   compaction moved keys, values and positions together.
//!
//! Further tests feed the prompt in chunks by the engine's chunking rule
//! (`rkv_engine::engine::prompt_chunk`), observing in the final chunk as the engine does and
//! compressing only after it (the prompt is one append), and expect the same kept sets,
//! also when a step's room is smaller than the window.

use std::path::{Path, PathBuf};

use rkv_core::config::{CompressionConfig, PolicyKind};
use rkv_engine::compression::SeqCompression;
use rkv_engine::kv::BlockTable;
use rkv_engine::kv::{KvDtype, KvLayout, KvStore};
use rkv_engine::paged_attention::PagedAttention;
use rkv_model::{Attention, AttentionShape};

/// rkv-core's golden-vector plumbing (locating and reading the files), shared.
#[path = "../../rkv-core/tests/support/mod.rs"]
mod support;

const BLOCK_SIZE: usize = 16;

/// The kv-stream files (see [`support::golden_root`] for where they come from) and which
/// set they are.
fn stream_files() -> (Vec<PathBuf>, String) {
    let (root, which) = support::golden_root().unwrap_or_else(|e| panic!("{e}"));
    let files =
        support::vector_files(&root, "kv-stream").unwrap_or_else(|e| panic!("{e} ({which})"));
    eprintln!("golden kv-stream vectors: {which} ({} files)", files.len());
    (files, which)
}

/// One kv-stream file.
struct Stream {
    name: String,
    cfg: CompressionConfig,
    n_q: usize,
    n_kv: usize,
    d: usize,
    t_total: usize,
    prompt: usize,
    queries: Vec<f32>, // [n_q, T, d]
    keys: Vec<f32>,    // [n_kv, T, d]
    values: Vec<f32>,  // [n_kv, T, d]
    final_pos: Vec<Vec<usize>>,
    n_comp: usize,
    steps: Vec<usize>,
    kept: Vec<Vec<Vec<usize>>>, // [n_comp][n_kv][budget]
}

/// The value, or a panic with the loader's message (which names the file).
fn ok<T>(r: Result<T, String>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

impl Stream {
    fn load(path: &Path) -> Stream {
        let case = ok(support::Case::load(path));
        let name = case.name.clone();
        let cfg = ok(case.config());
        let positions = |key: &str| -> (Vec<usize>, Vec<usize>) {
            let (shape, v) = ok(case.i64(key));
            let v = v
                .iter()
                .map(|&x| usize::try_from(x).unwrap_or_else(|_| panic!("{name}: {key} holds {x}")))
                .collect();
            (shape.to_vec(), v)
        };
        let floats = |key: &str| -> (Vec<usize>, Vec<f32>) {
            let (shape, v) = ok(case.f32(key));
            (shape.to_vec(), v.to_vec())
        };
        let (qs, queries) = floats("queries_all");
        let (ks, keys) = floats("keys_all");
        let (_, values) = floats("values_all");
        let (fs, fin) = positions("expected_final_positions");
        let (_, nc) = positions("expected_num_compressions");
        let (_, steps) = positions("expected_compression_steps");
        let (kps, kp) = positions("expected_kept_positions");
        let (n_kv, t_total, hd) = (ks[0], ks[1], ks[2]);
        assert_eq!((qs[1], qs[2]), (t_total, hd), "{name}: query shape {qs:?}");
        let final_pos = fin.chunks(fs[1].max(1)).map(<[usize]>::to_vec).collect();
        let per = kps.get(2).copied().unwrap_or(0);
        let kept = (0..kps[0])
            .map(|c| {
                (0..kps[1])
                    .map(|h| kp[(c * kps[1] + h) * per..][..per].to_vec())
                    .collect()
            })
            .collect();
        Stream {
            prompt: ok(case.meta_usize("prompt_len")),
            name,
            cfg,
            n_q: qs[0],
            n_kv,
            d: hd,
            t_total,
            queries,
            keys,
            values,
            final_pos,
            n_comp: nc[0],
            steps,
            kept,
        }
    }

    fn shape(&self) -> AttentionShape {
        AttentionShape {
            n_layers: 1,
            n_heads: self.n_q,
            n_kv_heads: self.n_kv,
            head_dim: self.d,
        }
    }

    /// Rows of tokens `t0..t1` in the attention layout `[n, heads, d]` from `[heads, T, d]`.
    fn rows(&self, src: &[f32], heads: usize, t0: usize, t1: usize) -> Vec<f32> {
        let (d, tt) = (self.d, self.t_total);
        let mut out = Vec::with_capacity((t1 - t0) * heads * d);
        for t in t0..t1 {
            for h in 0..heads {
                out.extend_from_slice(&src[(h * tt + t) * d..][..d]);
            }
        }
        out
    }
}

/// What one run of the engine machinery over a stream produced.
#[derive(Default)]
struct Run {
    steps: Vec<usize>,
    kept: Vec<Vec<Vec<usize>>>, // [compression][head] resident positions
    last: Vec<Vec<usize>>,
    problems: Vec<String>,
}

fn resident(store: &KvStore, table: &BlockTable, n_kv: usize) -> Vec<Vec<usize>> {
    (0..n_kv)
        .map(|h| {
            (0..table.len())
                .map(|s| store.position(table.blocks(), 0, h, s) as usize)
                .collect()
        })
        .collect()
}

/// The engine's prompt chunking (`Engine::next_feed`): at most `room` tokens, except that
/// the final chunk keeps at least `window` tokens when it can.
fn engine_chunks(prompt: usize, room: usize, window: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut done = 0;
    while done < prompt {
        let n = rkv_engine::engine::prompt_chunk(prompt - done, room, window);
        out.push(n);
        done += n;
    }
    out
}

/// Feeds the stream through KvStore + PagedAttention + SeqCompression. The prompt goes in
/// as `prompt_chunks` (one element: a single append), then one token per step.
fn run_engine(s: &Stream, prompt_chunks: &[usize], check_attention: bool) -> Run {
    let shape = s.shape();
    let (n_q, n_kv, d, g) = (s.n_q, s.n_kv, s.d, shape.group());
    let cfg = s.cfg;
    let max_resident = (cfg.budget + cfg.buffer).max(s.prompt) + 1;
    let layout = KvLayout {
        n_layers: 1,
        n_kv_heads: n_kv,
        head_dim: d,
        block_size: BLOCK_SIZE,
    };
    let n_blocks = max_resident.div_ceil(BLOCK_SIZE) + 1;
    let mut store = KvStore::new(layout, KvDtype::F32, n_blocks)
        .unwrap_or_else(|e| panic!("{}: KvStore::new: {e}", s.name));
    let mut table = BlockTable::new();
    let mut comp = SeqCompression::new(cfg, shape)
        .unwrap_or_else(|e| panic!("{}: SeqCompression::new: {e}", s.name));
    let mut run = Run::default();
    let mut feeds: Vec<(usize, bool)> = prompt_chunks
        .iter()
        .enumerate()
        .map(|(i, &n)| (n, i + 1 == prompt_chunks.len()))
        .collect();
    feeds.extend(std::iter::repeat_n((1, true), s.t_total - s.prompt));
    let scale = 1.0 / (d as f64).sqrt();
    let mut start = 0;
    for (n_new, final_append) in feeds {
        let len_before = table.len();
        let seg = comp
            .open_segment(&mut store, &mut table, 0, start, n_new, final_append)
            .unwrap_or_else(|e| panic!("{}: reserve at token {start}: {e}", s.name));
        let q = s.rows(&s.queries, n_q, start, start + n_new);
        let k = s.rows(&s.keys, n_kv, start, start + n_new);
        let v = s.rows(&s.values, n_kv, start, start + n_new);
        let mut out = vec![0f32; q.len()];
        let mut attn = PagedAttention::new(&mut store, shape, vec![seg]);
        attn.attend(0, &q, &k, &v, &mut out)
            .unwrap_or_else(|e| panic!("{}: attend at token {start}: {e}", s.name));
        let seg = attn.segments.pop().unwrap();
        drop(attn);
        comp.close_segment(seg);
        if check_attention && run.problems.len() < 5 {
            // Reference attention over exactly the resident slots, from the file's rows.
            let res = resident(&store, &table, n_kv);
            'tok: for i in 0..n_new {
                let visible = len_before + i + 1;
                for hq in 0..n_q {
                    let h = hq / g;
                    let pos = &res[h][..visible];
                    let qr = &s.queries[(hq * s.t_total + start + i) * d..][..d];
                    let logit: Vec<f64> = pos
                        .iter()
                        .map(|&p| {
                            let kr = &s.keys[(h * s.t_total + p) * d..][..d];
                            qr.iter()
                                .zip(kr)
                                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                                .sum::<f64>()
                                * scale
                        })
                        .collect();
                    let m = logit.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let wts: Vec<f64> = logit.iter().map(|l| (l - m).exp()).collect();
                    let z: f64 = wts.iter().sum();
                    let o = &out[((i * n_q) + hq) * d..][..d];
                    let mut err = 0f64;
                    let mut mag = 0f64;
                    for (c, &oc) in o.iter().enumerate() {
                        let r: f64 = pos
                            .iter()
                            .zip(&wts)
                            .map(|(&p, &w)| w * f64::from(s.values[(h * s.t_total + p) * d + c]))
                            .sum::<f64>()
                            / z;
                        err = err.max((r - f64::from(oc)).abs());
                        mag = mag.max(r.abs());
                    }
                    if err > 1e-4 * (1.0 + mag) {
                        run.problems.push(format!(
                            "{}: attention output of token {} query head {hq} differs from the \
                             reference over the resident slots by {err:e}",
                            s.name,
                            start + i
                        ));
                        break 'tok;
                    }
                }
            }
        }
        if final_append {
            let len = table.len();
            let evicted = comp
                .maybe_compress(&mut store, &mut table)
                .unwrap_or_else(|e| {
                    panic!(
                        "{}: maybe_compress at token {}: {e}",
                        s.name,
                        start + n_new - 1
                    )
                })
                .evicted;
            if evicted > 0 {
                assert_eq!(evicted, len - cfg.budget, "{}: evicted count", s.name);
                assert_eq!(
                    table.len(),
                    cfg.budget,
                    "{}: length after compression",
                    s.name
                );
                assert_eq!(
                    table.blocks().len(),
                    cfg.budget.div_ceil(BLOCK_SIZE),
                    "{}: blocks after compression",
                    s.name
                );
                run.steps.push(start + n_new - 1);
                run.kept.push(resident(&store, &table, n_kv));
            }
        }
        start += n_new;
    }
    run.last = resident(&store, &table, n_kv);
    store.release(&mut table).unwrap();
    assert_eq!(store.pool().n_free(), n_blocks, "{}: blocks leaked", s.name);
    run
}

/// Compares a run with the file's expectations; returns the problems.
fn compare(s: &Stream, run: &Run, tag: &str) -> Vec<String> {
    let mut problems = run.problems.clone();
    if run.steps.len() != s.n_comp {
        problems.push(format!(
            "{tag}: {} compressions, expected {}",
            run.steps.len(),
            s.n_comp
        ));
    }
    if run.steps != s.steps {
        problems.push(format!(
            "{tag}: compression steps {:?}, expected {:?}",
            run.steps, s.steps
        ));
    }
    'comp: for (c, (ours, exp)) in run.kept.iter().zip(&s.kept).enumerate() {
        for (h, (o, e)) in ours.iter().zip(exp).enumerate() {
            if o != e {
                let slot = o
                    .iter()
                    .zip(e)
                    .position(|(a, b)| a != b)
                    .unwrap_or(o.len().min(e.len()));
                problems.push(format!(
                    "{tag}: compression {c} (token {}), head {h}, slot {slot}: resident position \
                     {:?}, expected {:?} ({} resident, expected {})",
                    run.steps[c],
                    o.get(slot),
                    e.get(slot),
                    o.len(),
                    e.len()
                ));
                break 'comp;
            }
        }
    }
    for (h, (o, e)) in run.last.iter().zip(&s.final_pos).enumerate() {
        if o != e {
            let slot = o
                .iter()
                .zip(e)
                .position(|(a, b)| a != b)
                .unwrap_or(o.len().min(e.len()));
            problems.push(format!(
                "{tag}: final, head {h}, slot {slot}: resident position {:?}, expected {:?} \
                 ({} resident, expected {})",
                o.get(slot),
                e.get(slot),
                o.len(),
                e.len()
            ));
        }
    }
    if run.last.len() != s.final_pos.len() {
        problems.push(format!(
            "{tag}: {} heads at the end, expected {}",
            run.last.len(),
            s.final_pos.len()
        ));
    }
    problems
}

#[test]
fn kv_stream_through_engine() {
    let (files, which) = stream_files();
    let mut problems = Vec::new();
    for f in &files {
        let s = Stream::load(f);
        let t0 = std::time::Instant::now();
        let run = run_engine(&s, &[s.prompt], true);
        problems.extend(compare(&s, &run, &s.name));
        eprintln!(
            "{}: {} compressions, {:.2}s",
            s.name,
            run.steps.len(),
            t0.elapsed().as_secs_f64()
        );
    }
    assert!(
        problems.is_empty(),
        "{} problems in {} kv-stream files ({which}):\n{}",
        problems.len(),
        files.len(),
        problems.join("\n")
    );
}

/// The prompt in chunks of at most `room` tokens by the engine's rule; only the final
/// chunk may observe and compress (the prompt counts as one append).
fn chunked(room: usize) {
    let (files, which) = stream_files();
    let mut problems = Vec::new();
    for f in &files {
        let s = Stream::load(f);
        let chunks = engine_chunks(s.prompt, room, s.cfg.window);
        let run = run_engine(&s, &chunks, false);
        problems.extend(compare(
            &s,
            &run,
            &format!("{} (prompt chunks {chunks:?})", s.name),
        ));
    }
    assert!(
        problems.is_empty(),
        "{} problems in {} kv-stream files ({which}):\n{}",
        problems.len(),
        files.len(),
        problems.join("\n")
    );
}

#[test]
fn kv_stream_chunked_prompt_through_engine() {
    chunked(16);
}

#[test]
fn kv_stream_chunked_prompt_room_below_window() {
    chunked(5);
}

/// Every row of the observation window of the compression right after a prompt must be
/// filled by some chunk, whatever the room per step (here 7 < w = 8, which a busy batch
/// can leave for one sequence).
#[test]
fn window_rows_all_observed_for_chunked_prompt() {
    let cfg = CompressionConfig {
        policy: PolicyKind::RKv,
        budget: 32,
        buffer: 16,
        window: 8,
        ..CompressionConfig::default()
    };
    let shape = AttentionShape {
        n_layers: 1,
        n_heads: 1,
        n_kv_heads: 1,
        head_dim: 4,
    };
    for prompt in 48..=60 {
        let chunks = engine_chunks(prompt, 7, cfg.window);
        let mut comp = SeqCompression::new(cfg, shape).unwrap();
        let mut rows = vec![false; cfg.window];
        let mut len = 0;
        for (i, &n) in chunks.iter().enumerate() {
            let last = i + 1 == chunks.len();
            if let Some((spec, win)) = comp.capture_for_step(len, n, last).unwrap() {
                for t in spec.from_token..n {
                    rows[spec.first_row + t - spec.from_token] = true;
                }
                comp.return_window(win);
            }
            len += n;
        }
        assert!(
            rows.iter().all(|&r| r),
            "prompt {prompt} in chunks {chunks:?}: window rows observed {rows:?}"
        );
    }
}
