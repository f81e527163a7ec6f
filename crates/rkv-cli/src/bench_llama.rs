//! `rkv bench decode --llama-bench PATH`: llama.cpp's own benchmark on the same GGUF file,
//! run in turn with rkv's repeats, so that every repeat gives a side-by-side ratio under
//! the same machine conditions. Each repeat makes one `llama-bench` call per test (`-r 1`,
//! after its own warm-up): decode of `--tokens` tokens after `depth` cached ones (`-p 0
//! -n T -d D`), and at depths above 0 a prompt of `depth` tokens (`-p D -n 0`), as rkv's
//! prefill of the depth prompt. Settings: rkv's thread count and KV precision, flash
//! attention off (`-fa 0`, llama.cpp's fastest setting on these CPUs; BENCHMARKS.md).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// A `llama-bench` binary and what it runs.
pub struct LlamaBench {
    pub binary: PathBuf,
    pub model: PathBuf,
    pub threads: usize,
    pub kv_dtype: String,
    /// llama.cpp's `build_commit`, once seen.
    pub build: Option<String>,
}

impl LlamaBench {
    /// Checks that `binary` runs (`--help`) before any measurement.
    pub fn new(binary: &Path, model: &Path, threads: usize, kv_dtype: &str) -> Result<Self> {
        let ok = Command::new(binary)
            .arg("--help")
            .output()
            .with_context(|| format!("cannot run llama-bench at {}", binary.display()))?;
        if !ok.status.success() {
            bail!(
                "{} --help failed ({}): is it llama.cpp's llama-bench?",
                binary.display(),
                ok.status
            );
        }
        Ok(Self {
            binary: binary.to_path_buf(),
            model: model.to_path_buf(),
            threads,
            kv_dtype: kv_dtype.to_string(),
            build: None,
        })
    }

    /// Decode tokens per second of `tokens` tokens after `depth` cached ones.
    pub fn decode(&mut self, depth: usize, tokens: usize) -> Result<f64> {
        self.run(&[
            "-p",
            "0",
            "-n",
            &tokens.to_string(),
            "-d",
            &depth.to_string(),
        ])
    }

    /// Prompt tokens per second of a prompt of `n` tokens on an empty cache.
    pub fn prompt(&mut self, n: usize) -> Result<f64> {
        self.run(&["-p", &n.to_string(), "-n", "0", "-d", "0"])
    }

    fn run(&mut self, test: &[&str]) -> Result<f64> {
        let model = self.model.to_string_lossy().into_owned();
        let threads = self.threads.to_string();
        let mut cmd = Command::new(&self.binary);
        cmd.args(["-m", &model, "-t", &threads, "-r", "1", "-fa", "0"])
            .args(["-ctk", &self.kv_dtype, "-ctv", &self.kv_dtype, "-o", "json"])
            .args(test);
        let out = cmd
            .output()
            .with_context(|| format!("cannot run {}", self.binary.display()))?;
        if !out.status.success() {
            bail!(
                "llama-bench failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
        }
        let (ts, build) = parse(&out.stdout)?;
        self.build = self.build.take().or(build);
        Ok(ts)
    }
}

/// `avg_ts` (and `build_commit`) of the one test in llama-bench's JSON output.
fn parse(stdout: &[u8]) -> Result<(f64, Option<String>)> {
    let v: serde_json::Value =
        serde_json::from_slice(stdout).context("llama-bench did not print JSON")?;
    let test = v
        .as_array()
        .and_then(|a| a.first())
        .context("llama-bench printed no test")?;
    let ts = test["avg_ts"]
        .as_f64()
        .context("llama-bench's test has no avg_ts")?;
    let build = test["build_commit"].as_str().map(str::to_string);
    Ok((ts, build))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_speed_and_build_of_llama_bench_json() {
        let out =
            br#"[{"build_commit": "0c1e570", "n_gen": 32, "avg_ts": 8.34, "samples_ts": [8.34]}]"#;
        let (ts, build) = parse(out).unwrap();
        assert_eq!(ts, 8.34);
        assert_eq!(build.as_deref(), Some("0c1e570"));
        assert!(parse(b"[]").is_err());
        assert!(parse(b"main: error").is_err());
    }

    #[test]
    fn a_missing_binary_is_an_error_before_measuring() {
        let e = LlamaBench::new(
            Path::new("/nonexistent/llama-bench"),
            Path::new("m"),
            2,
            "f16",
        )
        .err()
        .expect("refused");
        assert!(e.to_string().contains("cannot run llama-bench"), "{e}");
    }
}
