//! How far quantised activations move the top-2 margin, in the units of the parity test's
//! margin: rkv (quantised), rkv's f32 path and llama.cpp, teacher-forced along the same
//! tokens (`scripts/llamacpp/logit_noise.sh` runs it and says how the inputs are made).
//!
//! Usage: `logit_noise MODEL.gguf FORCED.txt LLAMA.bin [OTHER.bin]`. `FORCED.txt` has one
//! `PROMPT | TOKENS` line per prompt (token ids); `LLAMA.bin` holds llama.cpp's logits at
//! every forced step (`greedy.cpp`'s fourth argument), `OTHER.bin` another llama.cpp
//! build's. At each step, with `a` and `b` llama.cpp's top two tokens, the margin moves
//! between two runs X and Y by `|(X[a] - X[b]) - (Y[a] - Y[b])| / |LLAMA[a]|`; the example
//! prints its median, 90th and 99th percentile and largest value for each pair of runs,
//! and how many steps each run's greedy choice differs from llama.cpp's at margins of at
//! least 0.5%.

use std::path::Path;

use rkv_core::config::CompressionConfig;
use rkv_engine::{sampling, Engine, EngineConfig, KvDtype};
use rkv_model::WeightMode;

type Error = Box<dyn std::error::Error>;
/// A prompt's token ids and the tokens forced after it.
type Forced = (Vec<u32>, Vec<u32>);

/// `(prompt, forced tokens)` per line of `PROMPT | TOKENS`.
fn forced_lines(path: &Path) -> Result<Vec<Forced>, Error> {
    let ids = |s: &str| -> Result<Vec<u32>, Error> {
        s.split_whitespace()
            .map(|t| t.parse::<u32>().map_err(Error::from))
            .collect()
    };
    let mut out = Vec::new();
    for line in std::fs::read_to_string(path)?.lines() {
        if line.trim().is_empty() {
            continue;
        }
        let (p, t) = line
            .split_once('|')
            .ok_or_else(|| format!("{}: a line without `|`", path.display()))?;
        out.push((ids(p)?, ids(t)?));
    }
    Ok(out)
}

/// The logits of every forced step, `[steps, vocab]` flattened.
fn rkv_logits(
    model: &Path,
    mode: WeightMode,
    kv: KvDtype,
    lines: &[Forced],
) -> Result<Vec<f32>, Error> {
    let model = rkv_model::load(model, mode)?;
    let mut e = Engine::new(
        model,
        EngineConfig {
            kv_dtype: kv,
            kv_blocks: 300,
            ..EngineConfig::default()
        },
    )?;
    let mut all = Vec::new();
    for (prompt, forced) in lines {
        let tokens: Vec<u32> = prompt.iter().chain(forced).copied().collect();
        e.teacher_force(
            &tokens,
            prompt.len(),
            CompressionConfig::full(),
            1,
            |_, l| all.extend_from_slice(l),
        )?;
    }
    Ok(all)
}

fn read_f32(path: &Path) -> Result<Vec<f32>, Error> {
    let bytes = std::fs::read(path)?;
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// llama.cpp's top two tokens at one step.
fn top2(l: &[f32]) -> (usize, usize) {
    let a = sampling::argmax(l) as usize;
    let b = (0..l.len())
        .filter(|&i| i != a)
        .max_by(|&i, &j| l[i].total_cmp(&l[j]))
        .unwrap_or(a);
    (a, b)
}

/// Step `s`'s row of `[steps, vocab]` logits.
fn row(x: &[f32], vocab: usize, s: usize) -> &[f32] {
    &x[s * vocab..(s + 1) * vocab]
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !(3..=4).contains(&args.len()) {
        return Err("usage: logit_noise MODEL.gguf FORCED.txt LLAMA.bin [OTHER.bin]".into());
    }
    let model = Path::new(&args[0]);
    let lines = forced_lines(Path::new(&args[1]))?;
    let steps: usize = lines.iter().map(|(_, f)| f.len()).sum();
    let llama = read_f32(Path::new(&args[2]))?;
    if steps == 0 || llama.len() % steps != 0 {
        return Err(format!("{} floats in {} for {steps} steps", llama.len(), args[2]).into());
    }
    let vocab = llama.len() / steps;
    let mut runs: Vec<(&str, Vec<f32>)> = vec![
        (
            "rkv",
            rkv_logits(model, WeightMode::Native, KvDtype::F16, &lines)?,
        ),
        (
            "rkv f32",
            rkv_logits(model, WeightMode::F32, KvDtype::F32, &lines)?,
        ),
    ];
    if let Some(other) = args.get(3) {
        runs.push(("llama.cpp other build", read_f32(Path::new(other))?));
    }
    for (name, r) in &runs {
        if r.len() != llama.len() {
            return Err(format!("{name}: {} logits, {} expected", r.len(), llama.len()).into());
        }
    }
    // llama.cpp's top two tokens at every step, which every comparison below is about.
    let tops: Vec<(usize, usize)> = (0..steps).map(|s| top2(row(&llama, vocab, s))).collect();
    runs.insert(0, ("llama.cpp", llama));
    let pairs: Vec<(usize, usize)> = (0..runs.len())
        .flat_map(|i| (i + 1..runs.len()).map(move |j| (i, j)))
        .collect();
    println!("{steps} steps; margin moves in % of llama.cpp's top logit");
    println!("| runs | median | 90th pct | 99th pct | largest |");
    println!("|---|---|---|---|---|");
    for (i, j) in pairs {
        let mut moves: Vec<f64> = (0..steps)
            .map(|s| {
                let l = row(&runs[0].1, vocab, s);
                let (a, b) = tops[s];
                let (x, y) = (row(&runs[i].1, vocab, s), row(&runs[j].1, vocab, s));
                let gap = |v: &[f32]| f64::from(v[a]) - f64::from(v[b]);
                100.0 * (gap(x) - gap(y)).abs() / f64::from(l[a]).abs()
            })
            .collect();
        moves.sort_by(f64::total_cmp);
        println!(
            "| {} against {} | {:.3} | {:.3} | {:.3} | {:.3} |",
            runs[i].0,
            runs[j].0,
            percentile(&moves, 0.5),
            percentile(&moves, 0.9),
            percentile(&moves, 0.99),
            moves[moves.len() - 1]
        );
    }
    for (name, r) in &runs[1..] {
        let (mut differ, mut asked) = (0, 0);
        for (s, &(a, b)) in tops.iter().enumerate() {
            let l = row(&runs[0].1, vocab, s);
            if sampling::argmax(row(r, vocab, s)) as usize != a {
                differ += 1;
                if (l[a] - l[b]) / l[a].abs() >= 0.005 {
                    asked += 1;
                }
            }
        }
        println!("{name}: {differ} choices differ from llama.cpp's, {asked} at margins >= 0.5%");
    }
    Ok(())
}
