//! `rkv bench decode --llama-bench PATH`: llama.cpp's own benchmark on the same GGUF file,
//! run in turn with rkv's repeats, so that every repeat gives a side-by-side ratio under
//! the same machine conditions. Each repeat makes one `llama-bench` call per test (`-r 1`,
//! after its own warm-up): decode of `--tokens` tokens after `depth` cached ones (`-p 0
//! -n T -d D`), and at depths above 0 a prompt of `depth` tokens (`-p D -n 0`), as rkv's
//! prefill of the depth prompt. Settings: rkv's thread count and KV precision, flash
//! attention off (`-fa 0`, llama.cpp's fastest setting on these CPUs; BENCHMARKS.md).
//!
//! With `--llama-batched-bench PATH` (rkv's `--batch`), each repeat makes one
//! `llama-batched-bench` call instead: a prompt of `depth` tokens decoded once and
//! copied into the cache of each of `sequences` sequences (`-pps`, each sequence its own
//! cache), then `--tokens` tokens decoded for all of them at once; its `speed_tg` (all
//! sequences' tokens per second) and `speed_pp` are the figures, `n_kv` the cache cells
//! the run holds.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// What one llama.cpp measurement gave.
#[derive(Debug, Clone, Copy)]
pub struct LlamaRun {
    /// Decode tokens per second (of all sequences together).
    pub decode: f64,
    /// Prompt tokens per second, when a prompt was measured.
    pub prompt: Option<f64>,
    /// KV cache cells the run held (batched runs).
    pub kv_cells: Option<usize>,
}

/// llama.cpp's side of `rkv bench decode`: a `llama-bench` binary (one sequence), or a
/// `llama-batched-bench` one (`sequences` at once), and what it runs.
pub struct Llama {
    pub binary: PathBuf,
    pub model: PathBuf,
    pub threads: usize,
    pub kv_dtype: String,
    /// `None`: `llama-bench`; `Some(n)`: `llama-batched-bench` with `n` sequences.
    batched: Option<usize>,
    /// llama.cpp's commit, once seen.
    pub build: Option<String>,
}

impl Llama {
    /// `llama-bench` (`batched: None`) or `llama-batched-bench` decoding `batched`
    /// sequences at once; checks that `binary` runs (`--help`) before any measurement.
    pub fn new(
        binary: &Path,
        model: &Path,
        threads: usize,
        kv_dtype: &str,
        batched: Option<usize>,
    ) -> Result<Self> {
        check_runs(binary, tool(batched))?;
        // llama-bench's JSON names its commit; llama-batched-bench's output does not, its
        // `--version` does.
        let build = batched.and_then(|_| {
            let v = Command::new(binary).arg("--version").output().ok()?;
            version_commit(&String::from_utf8_lossy(&[v.stdout, v.stderr].concat()))
        });
        Ok(Self {
            binary: binary.to_path_buf(),
            model: model.to_path_buf(),
            threads,
            kv_dtype: kv_dtype.to_string(),
            batched,
            build,
        })
    }

    /// Sequences llama.cpp decodes at once.
    pub fn sequences(&self) -> usize {
        self.batched.unwrap_or(1)
    }

    /// Decode of `tokens` tokens after `depth` cached ones (and, with `prompt`, the
    /// prompt speed of `depth` tokens).
    pub fn measure(&mut self, depth: usize, tokens: usize, prompt: bool) -> Result<LlamaRun> {
        if let Some(n) = self.batched {
            let mut run = self.batched_run(depth, tokens, n)?;
            run.prompt = run.prompt.filter(|_| prompt);
            return Ok(run);
        }
        let decode = self.bench(&[
            "-p",
            "0",
            "-n",
            &tokens.to_string(),
            "-d",
            &depth.to_string(),
        ])?;
        let prompt = match depth > 0 && prompt {
            true => Some(self.bench(&["-p", &depth.to_string(), "-n", "0", "-d", "0"])?),
            false => None,
        };
        Ok(LlamaRun {
            decode,
            prompt,
            kv_cells: None,
        })
    }

    /// One `llama-bench -r 1` test: its tokens per second.
    fn bench(&mut self, test: &[&str]) -> Result<f64> {
        let mut cmd = Command::new(&self.binary);
        cmd.arg("-m")
            .arg(&self.model)
            .args(["-t", &self.threads.to_string(), "-r", "1", "-fa", "0"])
            .args(["-ctk", &self.kv_dtype, "-ctv", &self.kv_dtype, "-o", "json"])
            .args(test);
        let (ts, build) = parse(&self.output(&mut cmd)?)?;
        self.build = self.build.take().or(build);
        Ok(ts)
    }

    /// `n` sequences decoding `tokens` tokens each after a shared prompt of `depth`
    /// tokens (at least one).
    fn batched_run(&self, depth: usize, tokens: usize, n: usize) -> Result<LlamaRun> {
        let depth = depth.max(1);
        // Each sequence's cache holds the prompt and its tokens.
        let ctx = n * (depth + tokens + 256);
        let mut cmd = Command::new(&self.binary);
        cmd.arg("-m")
            .arg(&self.model)
            .args(["-t", &self.threads.to_string(), "-fa", "off"])
            .args(["-ctk", &self.kv_dtype, "-ctv", &self.kv_dtype])
            .args(["-c", &ctx.to_string(), "-b", "2048", "-ub", "512"])
            .args(["-npp", &depth.to_string(), "-ntg", &tokens.to_string()])
            .args(["-npl", &n.to_string(), "-pps"])
            .args(["--output-format", "jsonl"]);
        parse_batched(&String::from_utf8_lossy(&self.output(&mut cmd)?))
    }

    /// The standard output of `cmd`, or an error with the last line it wrote to stderr.
    fn output(&self, cmd: &mut Command) -> Result<Vec<u8>> {
        let out = cmd
            .output()
            .with_context(|| format!("cannot run {}", self.binary.display()))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            bail!(
                "{} failed ({}): {}",
                tool(self.batched),
                out.status,
                stderr.lines().last().unwrap_or("")
            );
        }
        Ok(out.stdout)
    }
}

/// The llama.cpp tool's name.
fn tool(batched: Option<usize>) -> &'static str {
    match batched {
        None => "llama-bench",
        Some(_) => "llama-batched-bench",
    }
}

fn check_runs(binary: &Path, what: &str) -> Result<()> {
    let ok = Command::new(binary)
        .arg("--help")
        .output()
        .with_context(|| format!("cannot run {what} at {}", binary.display()))?;
    if !ok.status.success() {
        bail!(
            "{} --help failed ({}): is it llama.cpp's {what}?",
            binary.display(),
            ok.status
        );
    }
    Ok(())
}

/// The commit llama.cpp's `--version` names (`version: 0.5.0-dev (build 1, commit
/// 0c1e570)`).
fn version_commit(text: &str) -> Option<String> {
    let start = text.find("commit ")? + "commit ".len();
    let rest = &text[start..];
    let end = rest.find(|c: char| !c.is_ascii_alphanumeric())?;
    (end > 0).then(|| rest[..end].to_string())
}

/// `speed_tg`, `speed_pp` and `n_kv` of the one result line of llama-batched-bench's
/// JSONL output.
fn parse_batched(stdout: &str) -> Result<LlamaRun> {
    let Some(line) = stdout.lines().find(|l| l.trim_start().starts_with('{')) else {
        bail!("llama-batched-bench printed no result (did the context fit?)");
    };
    let v: serde_json::Value =
        serde_json::from_str(line).context("llama-batched-bench's result is not JSON")?;
    let decode = v["speed_tg"]
        .as_f64()
        .context("llama-batched-bench's result has no speed_tg")?;
    let prompt = v["speed_pp"].as_f64();
    let kv_cells = v["n_kv"].as_u64().and_then(|n| usize::try_from(n).ok());
    Ok(LlamaRun {
        decode,
        prompt,
        kv_cells,
    })
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
    fn reads_the_batched_speeds_cells_and_build() {
        let out = "\n{\"n_kv_max\": 66048, \"pp\": 8000, \"tg\": 64, \"pl\": 8, \"n_kv\": 64512, \
                   \"t_pp\": 150.1, \"speed_pp\": 53.3, \"t_tg\": 30.2, \"speed_tg\": 16.95}\n";
        let run = parse_batched(out).unwrap();
        assert_eq!(run.decode, 16.95);
        assert_eq!(run.prompt, Some(53.3));
        assert_eq!(run.kv_cells, Some(64512));
        assert!(parse_batched("main: n_kv_max = 2048\n").is_err());
        assert!(parse_batched("{\"speed_pp\": 1.0}").is_err());
        let version = "version: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU 12.2.0\n";
        assert_eq!(version_commit(version).as_deref(), Some("0c1e570"));
        assert_eq!(version_commit("nothing"), None);
    }

    #[test]
    fn a_missing_binary_is_an_error_before_measuring() {
        let e = Llama::new(
            Path::new("/nonexistent/llama-bench"),
            Path::new("m"),
            2,
            "f16",
            None,
        )
        .err()
        .expect("refused");
        assert!(e.to_string().contains("cannot run llama-bench"), "{e}");
    }
}
