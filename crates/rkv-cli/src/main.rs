//! `rkv`: the one binary. The only place that reads the environment and command line;
//! everything below gets typed, validated configuration. Exit statuses: [`exit`].

mod args;
mod bench;
mod bench_batch;
mod bench_events;
mod bench_grammar;
mod bench_llama;
mod bench_model;
mod bench_serve;
mod eval;
mod exit;
mod export_tokenizer;
mod fetch;
mod generate;
mod inspect;
mod interrupt;
mod out;
mod quantize;
mod serve;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "rkv",
    version,
    long_version = long_version(),
    about = "Reasoning-model inference with a bounded KV cache (R-KV)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate text from a prompt
    Generate(generate::GenerateArgs),
    /// Put a known model into the model cache: `smollm2-135m` (the default,
    /// SmolLM2-135M-Instruct Q4_1) or `qwen2.5-coder-1.5b` (Q4_K_M, 1.1 GB)
    Fetch {
        /// The model's name (default: the default model)
        name: Option<String>,
        /// Download again even if present
        #[arg(long)]
        force: bool,
    },
    /// Benchmarks
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// Evaluation: grading, math accuracy, fidelity to FullKV
    #[command(subcommand)]
    Eval(eval::EvalCmd),
    /// Serve an OpenAI-compatible HTTP API (see docs/serving.md)
    Serve(serve::ServeArgs),
    /// Write an HTML report of what the KV cache kept at every compression event
    Inspect(inspect::InspectArgs),
    /// Write the model's tokenizer as a Hugging Face tokenizer directory (tokenizer.json,
    /// tokenizer_config.json with the chat template, ...) that transformers loads offline
    ExportTokenizer(export_tokenizer::ExportTokenizerArgs),
    /// Requantise a GGUF model to q4_k_m, q5_k_m, q6_k or q8_0 as llama-quantize does
    Quantize(quantize::QuantizeArgs),
}

impl Cmd {
    /// `--threads` of the commands that run a model.
    fn threads(&self) -> Option<usize> {
        match self {
            Cmd::Generate(a) => a.model.threads,
            Cmd::Fetch { .. } => None,
            Cmd::Bench(b) => b.threads(),
            Cmd::Eval(e) => e.threads(),
            Cmd::Serve(a) => a.model.threads,
            Cmd::Inspect(a) => a.model.threads,
            Cmd::Quantize(_) | Cmd::ExportTokenizer(_) => None,
        }
    }

    fn run(self) -> anyhow::Result<()> {
        match self {
            Cmd::Generate(a) => generate::run(a),
            Cmd::Fetch { name, force } => {
                let model = match name.as_deref() {
                    None => &fetch::DEFAULT_MODEL,
                    Some(n) => fetch::known(n).ok_or_else(|| {
                        exit::usage!(
                            "unknown model {n:?}; known models: {}",
                            fetch::known_names()
                        )
                    })?,
                };
                let path = fetch::fetch(model, force)?;
                Ok(out::outln!("{}", path.display())?)
            }
            Cmd::Bench(b) => bench::run(b),
            Cmd::Eval(e) => eval::run(e),
            Cmd::Serve(a) => serve::run(a),
            Cmd::Inspect(a) => inspect::run(a),
            Cmd::Quantize(a) => quantize::run(a),
            Cmd::ExportTokenizer(a) => export_tokenizer::run(a),
        }
    }
}

/// `rkv --version`: the version, the kernels' SIMD path on this CPU (chosen at run time)
/// and what the build assumes, the K-quant tiles' path for one token, and the CPU's
/// features.
fn long_version() -> &'static str {
    let cpu = rkv_kernels::build_info::cpu_features();
    let text = format!(
        "{}\nkernels: {} (chosen at run time; built for {})\none-token K-quant tiles: {}\ncpu: {}",
        env!("CARGO_PKG_VERSION"),
        rkv_kernels::build_info::simd(),
        rkv_kernels::build_info::BUILD_BASELINE,
        rkv_kernels::build_info::one_token_tiles(),
        if cpu.is_empty() {
            "no x86-64 SIMD"
        } else {
            &cpu
        }
    );
    Box::leak(text.into_boxed_str())
}

fn main() {
    let cli = Cli::parse();
    let res = args::thread_pool(cli.cmd.threads()).and_then(|pool| pool.install(|| cli.cmd.run()));
    if let Err(e) = res {
        let (code, say) = exit::status(&e);
        if say {
            let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("error: {}", msg.join(": "));
        }
        std::process::exit(code);
    }
}
