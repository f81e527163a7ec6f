//! `rkv`: the one binary. The only place that reads the environment and command line;
//! everything below gets typed, validated configuration. Exit statuses: [`exit`].

mod args;
mod bench;
mod bench_events;
mod bench_model;
mod bench_serve;
mod eval;
mod exit;
mod fetch;
mod generate;
mod inspect;
mod interrupt;
mod out;
mod serve;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "rkv",
    version,
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
    /// Put the default model (SmolLM2-135M-Instruct Q4_1) into the model cache
    Fetch {
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
        }
    }

    fn run(self) -> anyhow::Result<()> {
        match self {
            Cmd::Generate(a) => generate::run(a),
            Cmd::Fetch { force } => {
                let path = fetch::fetch_default_model(force)?;
                Ok(out::outln!("{}", path.display())?)
            }
            Cmd::Bench(b) => bench::run(b),
            Cmd::Eval(e) => eval::run(e),
            Cmd::Serve(a) => serve::run(a),
            Cmd::Inspect(a) => inspect::run(a),
        }
    }
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
