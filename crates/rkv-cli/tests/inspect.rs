//! `rkv inspect` on the default model: the JSON record has the issue's shape and counts
//! (every (layer, head) keeps exactly the budget at every event, per-token KL for every
//! generated position), the HTML report embeds the same record, a budget above the text
//! records no event and KL exactly 0, and bad flags are usage errors.

mod common;

use std::process::Command;

use common::traces;
use serde_json::Value;

fn rkv(args: &[&str], dir: &std::path::Path) -> (Value, String) {
    let (json, html) = (dir.join("r.json"), dir.join("r.html"));
    let out = Command::new(env!("CARGO_BIN_EXE_rkv"))
        .args(["inspect", "--json-out"])
        .arg(&json)
        .arg("--out")
        .arg(&html)
        .args(args)
        .output()
        .expect("run rkv");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("JSON");
    (v, std::fs::read_to_string(&html).expect("html"))
}

fn count(ranges: &Value) -> u64 {
    ranges
        .as_array()
        .expect("ranges")
        .iter()
        .map(|r| r[1].as_u64().expect("end") - r[0].as_u64().expect("start"))
        .sum()
}

#[test]
fn trace_record_has_the_issue_shape_and_the_page_embeds_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let t = traces();
    let (v, html) = rkv(
        &[
            "--trace",
            t.to_str().expect("utf-8 path"),
            "--index",
            "0",
            "--max-tokens",
            "200",
            "--kv-policy",
            "rkv",
            "--compare-policy",
            "snapkv",
            "--kv-budget",
            "64",
            "--kv-buffer",
            "32",
        ],
        dir.path(),
    );
    let n = v["tokens"].as_array().expect("tokens").len();
    let prompt = v["prompt_tokens"].as_u64().expect("prompt") as usize;
    assert!(n > prompt + 100, "{n} tokens, {prompt} prompt");
    let pols = v["policies"].as_array().expect("policies");
    assert_eq!(pols.len(), 2);
    let mut means = Vec::new();
    for (p, name) in pols.iter().zip(["rkv", "snapkv"]) {
        assert_eq!(p["policy"], name);
        assert_eq!(p["budget"], 64);
        let events = p["events"].as_array().expect("events");
        // Compressions at 96 slots, then every 32 tokens.
        assert_eq!(events.len(), (n - 96) / 32 + 1, "{name}");
        let mut last = 0;
        for ev in events {
            let pos = ev["position"].as_u64().expect("position");
            assert!(pos > last || last == 0);
            last = pos;
            let layers = ev["kept"].as_object().expect("layers");
            assert_eq!(layers.len(), 30);
            for heads in layers.values() {
                let heads = heads.as_object().expect("heads");
                assert_eq!(heads.len(), 3);
                for ranges in heads.values() {
                    assert_eq!(count(ranges), 64, "{name} at {pos}");
                }
            }
            assert!(ev["importance_f16"]["29"]["2"].is_string());
            assert_eq!(ev["redundant_by"].is_object(), name == "rkv");
        }
        let kl = p["kl"].as_array().expect("kl");
        assert_eq!(kl.len(), n);
        assert!(kl[..prompt].iter().all(Value::is_null));
        let vals: Vec<f64> = kl[prompt..]
            .iter()
            .map(|x| x.as_f64().expect("kl"))
            .collect();
        assert!(vals.iter().all(|&x| x >= 0.0));
        means.push(vals.iter().sum::<f64>() / vals.len() as f64);
    }
    assert!(means.iter().all(|&m| m > 0.0), "{means:?}");
    assert_ne!(means[0], means[1]);
    // The page is one file holding the same record, packed: the same tokens, KL and
    // events; the first event's kept bitmask over its slots (all positions up to it) gives
    // the JSON's kept ranges; later events' resident positions follow from the schedule.
    let start = html.find("id=\"rkv-data\">").expect("data") + "id=\"rkv-data\">".len();
    let end = start + html[start..].find("</script>").expect("end");
    let embedded: Value = serde_json::from_str(&html[start..end]).expect("embedded JSON");
    assert_eq!(embedded["tokens"], v["tokens"]);
    for (e, p) in embedded["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .zip(pols)
    {
        assert_eq!(e["kl"], p["kl"]);
        let (evs, json_evs) = (
            e["events"].as_array().expect("events"),
            p["events"].as_array().expect("events"),
        );
        assert_eq!(evs.len(), json_evs.len());
        assert!(evs.iter().all(|ev| ev.get("resident").is_none()));
        let (first, json_first) = (&evs[0], &json_evs[0]);
        assert_eq!(first["position"], json_first["position"]);
        let len = first["slots_before"].as_u64().expect("len") as usize;
        let stride = len.div_ceil(8)
            + 2 * first["n_imp"].as_u64().expect("n_imp") as usize
            + 2 * first["n_red"].as_u64().expect("n_red") as usize
            + 4 * first["n_by"].as_u64().expect("n_by") as usize;
        let bytes = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            first["heads"].as_str().expect("heads"),
        )
        .expect("base64");
        assert_eq!(bytes.len(), stride * 90);
        for i in 0..90 {
            let mask = &bytes[i * stride..i * stride + len.div_ceil(8)];
            let kept: Vec<u64> = (0..len as u64)
                .filter(|&s| mask[s as usize / 8] >> (s % 8) & 1 == 1)
                .collect();
            let want: Vec<u64> = json_first["kept"][(i / 3).to_string()][(i % 3).to_string()]
                .as_array()
                .expect("ranges")
                .iter()
                .flat_map(|r| r[0].as_u64().expect("a")..r[1].as_u64().expect("b"))
                .collect();
            assert_eq!(kept, want, "head {i}");
        }
    }
}

#[test]
fn a_budget_above_the_text_records_nothing_and_no_drift() {
    let dir = tempfile::tempdir().expect("tmp");
    let (v, _) = rkv(
        &[
            "--prompt",
            "The capital of France is",
            "--max-tokens",
            "24",
            "--kv-budget",
            "4096",
        ],
        dir.path(),
    );
    let p = &v["policies"][0];
    assert_eq!(p["policy"], "rkv");
    assert_eq!(p["events"].as_array().expect("events").len(), 0);
    let kl: Vec<f64> = p["kl"]
        .as_array()
        .expect("kl")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    assert!(!kl.is_empty() && kl.iter().all(|&x| x == 0.0), "{kl:?}");
}

#[test]
fn bad_flags_are_usage_errors() {
    for args in [
        vec!["inspect", "--kv-budget", "64"],
        vec!["inspect", "--prompt", "x", "--kv-policy", "full"],
        vec!["inspect", "--prompt", "x", "--compare-policy", "nope"],
        vec!["inspect", "--prompt", "x", "--max-tokens", "0"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_rkv"))
            .args(&args)
            .output()
            .expect("run rkv");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}
