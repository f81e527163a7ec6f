//! `rkv serve`: the OpenAI-compatible server (`rkv-server`) over the engine on its own
//! thread, with `rkv generate`'s model and compression flags as the server's defaults
//! and the engine limits (`--kv-memory`, `--max-num-seqs`, `--max-batch-tokens`,
//! `--max-queue`).
//!
//! Owns the flags, the tokio runtime, the signals (SIGINT/SIGTERM stop accepting
//! connections, let the requests in flight finish, drain the engine, exit 0) and the one
//! line that says where the server listens.

use std::future::Future;

use anyhow::{Context, Result};
use clap::Args;
use rkv_engine::handle::{EngineHandle, HandleConfig};
use rkv_server::ServerOptions;

use crate::args::{EngineArgs, KvArgs, ModelArgs};

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port; the line on stderr says which)
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// The model's name in the API (default: the model file's stem)
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Cap on max_tokens for requests that give none (default: the rest of the context)
    #[arg(long)]
    pub default_max_tokens: Option<usize>,
    /// Most samples (n) one request may ask for
    #[arg(long, default_value_t = 128)]
    pub max_n: usize,
    /// The format the model writes tool calls in: hermes (`<tool_call>` blocks: Qwen2.5,
    /// Hermes) or llama3_json (default: the one the chat template renders)
    #[arg(long, value_parser = ["hermes", "llama3_json"])]
    pub tool_call_parser: Option<String>,
    #[command(flatten)]
    pub model: ModelArgs,
    /// The compression of requests that bring no `kv_compression`
    #[command(flatten)]
    pub kv: KvArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
}

pub fn run(a: ServeArgs) -> Result<()> {
    let model = a.model.load()?;
    let cfg = a.engine.engine_config(&model, &a.kv)?;
    let name = a
        .served_model_name
        .clone()
        .unwrap_or_else(|| a.model.display_name());
    let handle = EngineHandle::spawn(
        model,
        cfg,
        HandleConfig {
            max_queue: a.engine.max_queue,
            threads: a.model.threads,
        },
    )
    .context("cannot start the engine")?;
    let opts = ServerOptions {
        model_name: name.clone(),
        max_n: a.max_n,
        default_max_tokens: a.default_max_tokens,
        tool_parser: a
            .tool_call_parser
            .as_deref()
            .and_then(rkv_server::ToolParser::from_name),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("rkv-http")
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind((a.host.as_str(), a.port))
            .await
            .with_context(|| format!("cannot listen on {}:{}", a.host, a.port))?;
        let addr = listener.local_addr()?;
        eprintln!("rkv serve: listening on http://{addr} (model {name})");
        rkv_server::serve(handle, opts, listener, shutdown_signal()?).await?;
        eprintln!("rkv serve: stopped");
        Ok(())
    })
}

/// Resolves on the first SIGINT or SIGTERM.
fn shutdown_signal() -> Result<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    Ok(async move {
        let which = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        eprintln!("rkv serve: {which}: finishing the requests in flight, then stopping");
    })
}
