//! Replays the fuzz targets' inputs on stable Rust: every file of `fuzz/corpus/<target>/`
//! (the seeds) and of `fuzz/regressions/<target>/` (inputs that once crashed a target)
//! goes through the same `rkv_model::untrusted` function the target calls. Errors are
//! fine; a panic (also one a chat template's rendering thread turned into an error) fails
//! the test. A corpus directory that is missing or empty fails it too,
//! and so does a corpus in which no input loads at all (the seeds must reach past the
//! first check, or fuzzing from them finds little).

use std::path::{Path, PathBuf};

use rkv_model::untrusted;

type Target = fn(&[u8]) -> rkv_model::Result<()>;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files directly under `dir`, sorted; none when it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

fn replay(name: &str, target: Target) {
    let corpus = files(&fuzz_dir().join("corpus").join(name));
    assert!(
        !corpus.is_empty(),
        "fuzz/corpus/{name}/ is missing or empty (regenerate it with the fuzz_seeds example)"
    );
    let regressions = files(&fuzz_dir().join("regressions").join(name));
    let mut loaded = 0;
    for path in corpus.iter().chain(&regressions) {
        let bytes = std::fs::read(path).expect("read a corpus file");
        match target(&bytes) {
            Ok(()) => loaded += 1,
            Err(e) => {
                // The message must be one line: it ends up as `error: ...` on a terminal.
                let msg = e.to_string();
                // A chat template renders on a thread of its own, which turns a panic into
                // this error: still a panic, still a finding.
                assert!(
                    !msg.contains("the template panicked"),
                    "{}: {msg}",
                    path.display()
                );
                assert!(
                    !msg.contains('\n'),
                    "{}: multi-line error {msg:?}",
                    path.display()
                );
                let file = path.file_name().unwrap_or_default().to_string_lossy();
                println!("  {name}/{file}: {msg}");
            }
        }
    }
    println!(
        "{name}: {} corpus + {} regression inputs, {loaded} loaded, the rest refused",
        corpus.len(),
        regressions.len()
    );
    assert!(loaded > 0, "no input of fuzz/corpus/{name}/ loads");
}

#[test]
fn gguf_model() {
    replay("gguf_model", untrusted::gguf_model);
}

#[test]
fn gguf_vocab() {
    replay("gguf_vocab", untrusted::gguf_vocab);
}

#[test]
fn safetensors() {
    replay("safetensors", untrusted::safetensors);
}

#[test]
fn config_json() {
    replay("config_json", untrusted::config_json);
}

#[test]
fn tokenizer_json() {
    replay("tokenizer_json", untrusted::tokenizer_json);
}

#[test]
fn chat_template() {
    replay("chat_template", untrusted::chat_template);
}
