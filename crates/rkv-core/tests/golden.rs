//! Conformance against the golden vectors of `shared/golden/` (README §4): every
//! `kv-select/*.safetensors` (one compression) and `kv-stream/*.safetensors` (a whole
//! decode schedule), driven only by each file's metadata, through the library's public
//! boundary (`select_keep`, `score_head`, `CompressionConfig::plan_step`).

mod support;

use rkv_core::policy::{score_head, select_keep_with, RedundancyPath};
use rkv_core::{CompressionConfig, HeadObservation, HeadState, KeyRows, PolicyKind};
use support::{first_score_mismatch, golden_root, row, vector_files, window_logits, Case};

/// Check one head's kept set against the README §4 rule. `ours` ascending.
fn check_kept(
    ours: &[usize],
    expected: &[i64],
    tie_rule: bool,
    expected_score: Option<&[f32]>,
    cfg: &CompressionConfig,
    len: usize,
) -> Result<(), String> {
    let exp: Vec<usize> = expected.iter().map(|&x| x as usize).collect();
    if ours == exp.as_slice() {
        return Ok(());
    }
    let score_of = |j: usize| {
        expected_score
            .and_then(|e| e.get(j))
            .map_or(String::new(), |s| format!(" (expected score {s:e})"))
    };
    if !tie_rule {
        let extra = ours.iter().find(|j| !exp.contains(j));
        let missing = exp.iter().find(|j| !ours.contains(j));
        return Err(format!(
            "kept {} slots, expected {}; first kept-but-not-expected slot {:?}{}, first expected-but-not-kept slot {:?}{}",
            ours.len(),
            exp.len(),
            extra,
            extra.map_or(String::new(), |&j| score_of(j)),
            missing,
            missing.map_or(String::new(), |&j| score_of(j)),
        ));
    }
    let e = expected_score.ok_or("tie case without expected_score")?;
    let w = cfg.window;
    let n = len - w;
    let k = cfg.budget - w;
    if let Some(j) = (n..len).find(|j| !ours.contains(j)) {
        return Err(format!("window slot {j} not kept"));
    }
    let cand: Vec<usize> = ours.iter().copied().filter(|&j| j < n).collect();
    if cand.len() != k {
        return Err(format!("{} candidates kept, expected {k}", cand.len()));
    }
    let mut sorted: Vec<f32> = e.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let s_k = f64::from(sorted[k - 1]);
    let mean = e.iter().map(|x| f64::from(x.abs())).sum::<f64>() / e.len() as f64;
    let (min_in, at_in) = cand
        .iter()
        .map(|&j| (f64::from(e[j]), j))
        .fold((f64::INFINITY, 0), |m, v| if v.0 < m.0 { v } else { m });
    let out = (0..n).filter(|j| !ours.contains(j));
    let (max_out, at_out) = out
        .map(|j| (f64::from(e[j]), j))
        .fold((f64::NEG_INFINITY, 0), |m, v| if v.0 > m.0 { v } else { m });
    if min_in < max_out - 1e-5 * (s_k.abs() + mean) {
        return Err(format!("tie rule: kept slot {at_in} scores {min_in:e} below evicted slot {at_out} at {max_out:e}"));
    }
    Ok(())
}

/// Run one kv-select file; returns the problems found (empty when it conforms).
fn run_select(case: &Case) -> Result<Vec<String>, String> {
    let cfg = case.config()?;
    let (kshape, keys) = case.f32("keys")?;
    let (qshape, queries) = case.f32("queries")?;
    let (eshape, expected_keep) = case.i64("expected_keep")?;
    let (n_kv, len, d) = (kshape[0], kshape[1], kshape[2]);
    let (n_q, w) = (qshape[0], qshape[1]);
    let g = n_q / n_kv;
    if cfg.window != w || n_q % n_kv != 0 {
        return Err(format!(
            "{}: window/queries shape {qshape:?} inconsistent with metadata",
            case.name
        ));
    }
    let tie_file = case
        .meta
        .get("tie_crosses_boundary")
        .is_some_and(|v| v == "true");
    let tie_heads: Option<Vec<usize>> = case
        .meta
        .get("tie_heads")
        .and_then(|s| serde_json::from_str(s).ok());
    let scores_present = case.has("expected_score");
    let mut problems = Vec::new();
    let n = len.saturating_sub(w);
    for h in 0..n_kv {
        let head_keys = &keys[h * len * d..(h + 1) * len * d];
        let logits = if cfg.policy.needs_window_logits() && len >= cfg.budget {
            window_logits(
                |hq, t| row(queries, d, hq * w + t),
                head_keys,
                h,
                g,
                w,
                n,
                d,
            )
        } else {
            Vec::new()
        };
        let obs = HeadObservation {
            len,
            head_dim: d,
            keys: KeyRows::flat_f32(head_keys, d),
            group: g,
            window: w,
            window_logits: &logits,
            h2o_scores: &[],
            values: &[],
        };
        let exp_keep = &expected_keep[h * eshape[1]..(h + 1) * eshape[1]];
        let exp_score = if scores_present {
            Some(row(case.f32("expected_score")?.1, n, h))
        } else {
            None
        };
        let tie_rule = tie_file && tie_heads.as_ref().is_none_or(|hs| hs.contains(&h));
        for path in [RedundancyPath::Fast, RedundancyPath::Oracle] {
            let mut state = HeadState::new();
            let ours = select_keep_with(&cfg, &obs, &mut state, path)
                .map_err(|e| format!("{} head {h}: {e}", case.name))?;
            if let Err(msg) = check_kept(&ours, exp_keep, tie_rule, exp_score, &cfg, len) {
                problems.push(format!("{} head {h} ({path:?} path): {msg}", case.name));
            }
            if !scores_present {
                continue;
            }
            let (scores, _) = score_head(&cfg, &obs, &HeadState::new(), path)
                .map_err(|e| format!("{}: {e}", case.name))?;
            let imp: Vec<f64> = scores.importance.iter().map(|&x| f64::from(x)).collect();
            let mut checks = vec![
                ("importance", imp, "expected_importance"),
                ("score", scores.score.clone(), "expected_score"),
            ];
            if case.has("expected_redundancy") {
                checks.push((
                    "redundancy",
                    scores.redundancy.clone(),
                    "expected_redundancy",
                ));
            }
            for (what, actual, key) in checks {
                let exp = row(case.f32(key)?.1, n, h);
                if let Some((j, a, e)) = first_score_mismatch(&actual, exp) {
                    problems.push(format!(
                        "{} head {h} slot {j} ({path:?} path): {what} {a:e}, expected {e:e}",
                        case.name
                    ));
                }
            }
        }
    }
    Ok(problems)
}

#[test]
fn kv_select_conformance() {
    let (root, which) = golden_root().unwrap_or_else(|e| panic!("{e}"));
    println!("golden kv-select vectors: {which}");
    let files = vector_files(&root, "kv-select").unwrap_or_else(|e| panic!("{e}"));
    let mut problems = Vec::new();
    for f in &files {
        match Case::load(f).and_then(|c| run_select(&c)) {
            Ok(p) => problems.extend(p),
            Err(e) => problems.push(e),
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems in {} kv-select files ({which}):\n{}",
        problems.len(),
        files.len(),
        problems.join("\n")
    );
    println!("{} kv-select files conform", files.len());
}

/// What a schedule simulation observed.
#[derive(Debug, Default, PartialEq)]
struct StreamRun {
    /// `[n_comp]` token whose append triggered each compression.
    steps: Vec<usize>,
    /// `[n_comp][n_kv]` resident positions right after each compression.
    kept: Vec<Vec<Vec<usize>>>,
    /// `[n_kv]` resident positions after the last token.
    last: Vec<Vec<usize>>,
}

/// Simulate the DESIGN.md §2 schedule over a kv-stream file: the prompt appended at once,
/// then one token per step; compress whenever `plan_step` says so. Each head carries its
/// own `HeadState` (the incremental redundancy path runs across compressions).
fn simulate(
    case: &Case,
    cfg: &CompressionConfig,
    path: RedundancyPath,
) -> Result<StreamRun, String> {
    let (kshape, keys_all) = case.f32("keys_all")?;
    let (qshape, queries_all) = case.f32("queries_all")?;
    let (n_kv, t_total, d) = (kshape[0], kshape[1], kshape[2]);
    let g = qshape[0] / n_kv;
    let prompt = case.meta_usize("prompt_len")?;
    let w = cfg.window;
    let mut resident: Vec<Vec<usize>> = vec![Vec::new(); n_kv];
    let mut states: Vec<HeadState> = vec![HeadState::new(); n_kv];
    let mut run = StreamRun::default();
    let mut start = 0;
    while start < t_total {
        let n_new = if start == 0 { prompt.min(t_total) } else { 1 };
        let plan = cfg.plan_step(resident[0].len(), n_new);
        for r in resident.iter_mut() {
            r.extend(start..start + n_new);
        }
        let t = start + n_new - 1;
        if plan.compress {
            // The window tokens, as the plan tells an engine to gather them.
            let window_tokens: Vec<usize> = (start - plan.window_from_history..start)
                .chain(plan.window_from_step.clone().map(|i| start + i))
                .collect();
            if cfg.policy.needs_window_logits()
                && window_tokens != (t + 1 - w..=t).collect::<Vec<_>>()
            {
                return Err(format!(
                    "{}: plan_step window {window_tokens:?} at token {t}",
                    case.name
                ));
            }
            let mut kept_now = Vec::with_capacity(n_kv);
            for h in 0..n_kv {
                let len = resident[h].len();
                let keys: Vec<f32> = resident[h]
                    .iter()
                    .flat_map(|&p| row(&keys_all[h * t_total * d..], d, p).to_vec())
                    .collect();
                let logits = if cfg.policy.needs_window_logits() {
                    let q = |hq: usize, i: usize| {
                        row(
                            &queries_all[hq * t_total * d..(hq + 1) * t_total * d],
                            d,
                            window_tokens[i],
                        )
                    };
                    window_logits(q, &keys, h, g, w, len - w, d)
                } else {
                    Vec::new()
                };
                let obs = HeadObservation {
                    len,
                    head_dim: d,
                    keys: KeyRows::flat_f32(&keys, d),
                    group: g,
                    window: w,
                    window_logits: &logits,
                    h2o_scores: &[],
                    values: &[],
                };
                let kept = select_keep_with(cfg, &obs, &mut states[h], path)
                    .map_err(|e| format!("{} head {h} token {t}: {e}", case.name))?;
                resident[h] = kept.iter().map(|&i| resident[h][i]).collect();
                kept_now.push(resident[h].clone());
            }
            run.steps.push(t);
            run.kept.push(kept_now);
        }
        start += n_new;
    }
    run.last = resident;
    Ok(run)
}

fn run_stream(case: &Case) -> Result<Vec<String>, String> {
    let cfg = case.config()?;
    if cfg.policy == PolicyKind::H2o {
        return Err(format!(
            "{}: kv-stream has no attention accumulations for H2O",
            case.name
        ));
    }
    let (fshape, final_pos) = case.i64("expected_final_positions")?;
    let n_comp = case
        .i64("expected_num_compressions")?
        .1
        .first()
        .copied()
        .unwrap_or(-1);
    let steps = case.i64("expected_compression_steps")?.1;
    let (kshape, kept_pos) = case.i64("expected_kept_positions")?;
    let as_usize = |v: &[i64]| v.iter().map(|&x| x as usize).collect::<Vec<_>>();
    let mut problems = Vec::new();
    for path in [RedundancyPath::Fast, RedundancyPath::Oracle] {
        let run = simulate(case, &cfg, path)?;
        let tag = format!("{} ({path:?} path)", case.name);
        if run.steps.len() as i64 != n_comp {
            problems.push(format!(
                "{tag}: {} compressions, expected {n_comp}",
                run.steps.len()
            ));
        }
        if run.steps != as_usize(steps) {
            problems.push(format!(
                "{tag}: compression steps {:?}, expected {:?}",
                run.steps, steps
            ));
        }
        let per = kshape.get(2).copied().unwrap_or(0);
        'comp: for (c, heads) in run.kept.iter().enumerate().take(kshape[0]) {
            for (h, ours) in heads.iter().enumerate() {
                let off = (c * kshape[1] + h) * per;
                let exp = as_usize(&kept_pos[off..off + per]);
                if *ours != exp {
                    let slot = ours
                        .iter()
                        .zip(&exp)
                        .position(|(a, b)| a != b)
                        .unwrap_or(ours.len().min(exp.len()));
                    problems.push(format!(
                        "{tag}: compression {c} (token {}), head {h}: first difference at kept slot {slot}: position {:?}, expected {:?}",
                        run.steps[c],
                        ours.get(slot),
                        exp.get(slot)
                    ));
                    break 'comp;
                }
            }
        }
        for (h, ours) in run.last.iter().enumerate() {
            let exp = as_usize(&final_pos[h * fshape[1]..(h + 1) * fshape[1]]);
            if *ours != exp {
                problems.push(format!(
                    "{tag}: head {h}: final positions differ ({} resident, expected {})",
                    ours.len(),
                    exp.len()
                ));
            }
        }
    }
    Ok(problems)
}

#[test]
fn kv_stream_conformance() {
    let (root, which) = golden_root().unwrap_or_else(|e| panic!("{e}"));
    println!("golden kv-stream vectors: {which}");
    let files = vector_files(&root, "kv-stream").unwrap_or_else(|e| panic!("{e}"));
    let mut problems = Vec::new();
    for f in &files {
        match Case::load(f).and_then(|c| run_stream(&c)) {
            Ok(p) => problems.extend(p),
            Err(e) => problems.push(e),
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems in {} kv-stream files ({which}):\n{}",
        problems.len(),
        files.len(),
        problems.join("\n")
    );
    println!("{} kv-stream files conform", files.len());
}
