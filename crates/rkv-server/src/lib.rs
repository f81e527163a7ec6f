//! rkv-server: the OpenAI-compatible HTTP API over an `rkv_engine::EngineHandle`
//! (axum + tokio). Handlers talk to the engine thread only through the handle: they
//! submit, receive events on a channel, and cancel when the client goes away.
//!
//! Owns routes, request parsing and validation, SSE streaming, reasoning splitting,
//! metrics exposition and the one mapping of errors to responses (see `docs/serving.md`).
//! Must not know: model internals, the environment or command line (the CLI passes
//! everything in).

mod complete;
pub mod error;
mod generation;
mod kv_compression;
mod logprobs;
mod metrics;
mod params;
mod prompt;
pub mod reasoning;
mod request;
mod response;
mod response_format;
mod routes;
mod shaper;
mod sse;
mod state;
mod stop_text;
mod tool_calls;
mod tools;

use std::future::Future;

use rkv_engine::handle::EngineHandle;
use thiserror::Error;

pub use error::ApiError;
pub use tool_calls::ToolParser;

/// How the server presents itself and what it fills in.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The model's name in `/v1/models` and the only `model` requests may name.
    pub model_name: String,
    /// Most samples (`n`) one request may ask for (the engine's `max_num_seqs` bounds it
    /// too).
    pub max_n: usize,
    /// Cap on `max_tokens` for requests that give none (`None`: the rest of the context).
    pub default_max_tokens: Option<usize>,
    /// The format tool calls are parsed in; `None`: the one the chat template writes.
    pub tool_parser: Option<ToolParser>,
}

impl ServerOptions {
    pub fn new(model_name: impl Into<String>) -> Self {
        Self {
            model_name: model_name.into(),
            max_n: 128,
            default_max_tokens: None,
            tool_parser: None,
        }
    }
}

#[derive(Debug, Error)]
pub enum ServerError {
    #[error("the HTTP server failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the engine did not shut down cleanly: {0}")]
    Shutdown(String),
}

/// The routes over `handle`, for serving or for tests.
pub fn router(handle: EngineHandle, opts: ServerOptions) -> axum::Router {
    routes::router(state::AppState::new(handle, opts))
}

/// Serves on `listener` until `shutdown` resolves; then stops accepting connections,
/// lets the requests in flight finish, and shuts the engine down (draining it).
pub async fn serve<F>(
    handle: EngineHandle,
    opts: ServerOptions,
    listener: tokio::net::TcpListener,
    shutdown: F,
) -> Result<(), ServerError>
where
    F: Future<Output = ()> + Send + 'static,
{
    let app = router(handle.clone(), opts);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    tokio::task::spawn_blocking(move || handle.shutdown())
        .await
        .map_err(|e| ServerError::Shutdown(e.to_string()))
}
