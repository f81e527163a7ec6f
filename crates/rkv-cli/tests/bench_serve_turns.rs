//! `rkv bench serve --turns K`: conversations whose later turns re-send their history;
//! with the prefix cache those turns find it (cached tokens, the same outputs as with
//! `--no-prefix-cache`), and bad combinations are usage errors.

mod serve_support;

use std::io::Write;
use std::process::Command;

use serve_support::default_model;

fn bench(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rkv"))
        .args(["bench", "serve"])
        .args(args)
        .output()
        .expect("run rkv bench serve");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn later_turns_find_their_history_in_the_prefix_cache() {
    let mut f = tempfile::NamedTempFile::new().expect("temp file");
    writeln!(
        f,
        r#"{{"problem": "What is 2 + 3? Explain each step of the sum."}}"#
    )
    .expect("write");
    let model = default_model();
    let run = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "--model",
            model.to_str().expect("utf-8 path"),
            "--prompts",
            f.path().to_str().expect("utf-8 path"),
            "--threads",
            "2",
            "--requests",
            "2",
            "--concurrency",
            "2",
            "--turns",
            "3",
            "--max-tokens",
            "40",
            "--ignore-eos",
            "--json",
        ];
        args.extend_from_slice(extra);
        let (code, stdout, stderr) = bench(&args);
        assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
        serde_json::from_str(stdout.lines().next().expect("a JSON line")).expect("JSON")
    };
    let on = run(&[]);
    let off = run(&["--no-prefix-cache"]);
    for v in [&on, &off] {
        assert_eq!(v["generated_tokens"], 2 * 3 * 40, "{v}");
        assert_eq!(v["turns"], 3);
        assert!(v["ttft_later_turns_ms"]["p50"].as_f64() > Some(0.0), "{v}");
    }
    // Turns 2 and 3 re-send at least the first turn's prompt (dozens of tokens).
    assert!(on["cached_tokens"].as_u64() > Some(64), "{on}");
    assert_eq!(off["cached_tokens"], 0, "{off}");
    assert_eq!(on["output_digest"], off["output_digest"]);

    for bad in [
        &["--turns", "0"][..],
        &["--turns", "2", "--url", "http://127.0.0.1:9"],
    ] {
        let mut args = vec!["--model", model.to_str().expect("utf-8 path")];
        args.extend_from_slice(bad);
        let (code, _, stderr) = bench(&args);
        assert_eq!(code, 2, "{bad:?}: {stderr}");
        assert!(stderr.contains("--turns"), "{stderr}");
    }
}
