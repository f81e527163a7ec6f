//! The HTTP routes: the two generation endpoints, the model list, health and metrics,
//! and OpenAI-shaped answers for unknown routes and methods.
//!
//! Owns the flow of a generation request (model check, prompt, parameters, submission,
//! streamed or whole answer). Must not know: model internals, the engine's internals.

use std::time::Instant;

use axum::extract::{Path, State};
use axum::http::{header, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rkv_engine::{Grammar, GrammarSpec};
use serde_json::{json, Value};

use crate::complete::collect;
use crate::error::ApiError;
use crate::generation::Generation;
use crate::logprobs::{chat_ask, completion_ask};
use crate::params::{flag, plan, Defaults, Plan, Shown};
use crate::prompt::{chat_prompt, completion_prompts, Prompt};
use crate::request::{ApiJson, ChatRequest, CompletionRequest};
use crate::response::{Endpoint, Meta, Usage};
use crate::response_format;
use crate::shaper::Shaper;
use crate::sse;
use crate::state::AppState;
use crate::tool_calls::CallFormat;
use crate::tools::{self, ToolChoice};

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn chat(State(st): State<AppState>, ApiJson(req): ApiJson<ChatRequest>) -> Response {
    let arrival = Instant::now();
    let res = async {
        check_model(&st, req.model.as_deref())?;
        let tools = tools::check(req.tools.as_ref(), req.tool_choice.as_ref())?;
        let parser = match (&tools, st.tool_parser()) {
            (None, _) => None,
            (Some(t), _) if t.choice == ToolChoice::None => None,
            (Some(_), Some(p)) => Some(p),
            (Some(_), None) => {
                return Err(ApiError::invalid_param(
                    "tools",
                    "the model's chat template does not render tools (serve it with \
                     --tool-call-parser to name the format it calls them in)",
                ))
            }
        };
        let forced = tools.as_ref().and_then(tools::forced_call);
        let prompt = chat_prompt(st.handle().tokenizer(), &req.messages, tools.as_ref())?;
        let shown = Shown {
            logprobs: chat_ask(req.common.logprobs.as_ref(), req.top_logprobs.as_ref())?,
            echo: false,
            token_ids: flag("return_token_ids", req.common.return_token_ids.as_ref())?,
        };
        let mut p = plan(
            prompt.tokens.clone(),
            "messages",
            &req.common,
            &defaults(&st),
            shown,
        )?;
        if let Some(spec) = forced {
            if p.grammar.is_some() {
                return Err(ApiError::invalid_param(
                    "tool_choice",
                    "tool_choice required or a named function cannot be combined with \
                     response_format",
                ));
            }
            p.grammar = Some(spec);
        }
        let calls = parser.map(|parser| CallFormat {
            parser,
            names: tools.map(|t| t.names).unwrap_or_default(),
        });
        generate(&st, Endpoint::Chat, vec![prompt], vec![p], calls, arrival).await
    };
    res.await.unwrap_or_else(IntoResponse::into_response)
}

async fn completions(
    State(st): State<AppState>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Response {
    let arrival = Instant::now();
    let res = async {
        check_model(&st, req.model.as_deref())?;
        if req.best_of.is_some_and(|b| b > 1) {
            return Err(ApiError::invalid_param(
                "best_of",
                "best_of is not supported (use n)",
            ));
        }
        if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::invalid_param("suffix", "suffix is not supported"));
        }
        let prompts = completion_prompts(st.handle().tokenizer(), &req.prompt, st.opts().max_n)?;
        let shown = Shown {
            logprobs: completion_ask(req.common.logprobs.as_ref())?,
            echo: req.echo.unwrap_or(false),
            token_ids: flag("return_token_ids", req.common.return_token_ids.as_ref())?,
        };
        let plans = prompts
            .iter()
            .map(|p| {
                plan(
                    p.tokens.clone(),
                    "prompt",
                    &req.common,
                    &defaults(&st),
                    shown,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let choices = plans.len() * plans.first().map_or(1, |p| p.submission.n);
        if choices > st.opts().max_n {
            return Err(ApiError::invalid_param(
                "n",
                format!(
                    "prompts times n must be at most {}, got {choices}",
                    st.opts().max_n
                ),
            ));
        }
        generate(&st, Endpoint::Completion, prompts, plans, None, arrival).await
    };
    res.await.unwrap_or_else(IntoResponse::into_response)
}

fn defaults(st: &AppState) -> Defaults {
    Defaults {
        max_context: st.handle().max_context(),
        compression: st.handle().default_compression(),
        max_n: st.opts().max_n,
        default_max_tokens: st.opts().default_max_tokens,
    }
}

/// `model` must be the served name, or absent.
fn check_model(st: &AppState, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        Some(m) if m != st.opts().model_name => Err(ApiError::ModelNotFound(m.to_string())),
        _ => Ok(()),
    }
}

/// Submits one plan per prompt (all alike but for their prompts) and answers with every
/// prompt's choices, prompt `p`'s sample `j` as choice `p * n + j`.
async fn generate(
    st: &AppState,
    endpoint: Endpoint,
    prompts: Vec<Prompt>,
    mut plans: Vec<Plan>,
    calls: Option<CallFormat>,
    arrival: Instant,
) -> Result<Response, ApiError> {
    for p in &mut plans {
        if let Some(spec) = p.grammar.take() {
            p.submission.request.grammar = Some(compile(st, spec).await?);
        }
    }
    let Some(p) = plans.first().cloned() else {
        return Err(ApiError::invalid_param("prompt", "prompt is empty"));
    };
    let meta = Meta::new(endpoint, &st.opts().model_name);
    let prompt_tokens = prompts.iter().map(|p| p.tokens.len()).sum();
    let usage = Usage::new(prompt_tokens, p.compression, prompts.len(), p.submission.n);
    let stops = p.submission.request.stop.clone();
    let subs = plans.into_iter().map(|p| p.submission).collect();
    let gen = Generation::start(st, subs, arrival)?;
    let out = Shaper::new(
        endpoint,
        st.handle().tokenizer().clone(),
        prompts,
        p.submission.n,
        p.shown,
        p.score_only,
        calls,
    );
    if p.stream {
        Ok(sse::respond(gen, meta, usage, p.include_usage, &stops, out))
    } else {
        let body = collect(gen, &meta, usage, &out).await?;
        Ok(Json(body).into_response())
    }
}

/// Compiles `response_format`'s grammar off the async threads (a JSON Schema takes
/// milliseconds; the first one also builds the vocabulary's token trie).
async fn compile(st: &AppState, spec: GrammarSpec) -> Result<Grammar, ApiError> {
    let handle = st.handle().clone();
    tokio::task::spawn_blocking(move || handle.compile_grammar(&spec))
        .await
        .map_err(|e| ApiError::Internal(format!("compiling response_format: {e}")))?
        .map_err(|e| {
            ApiError::invalid_param(
                response_format::PARAM,
                format!("{}: {e}", response_format::PARAM),
            )
        })
}

fn model_card(st: &AppState) -> Value {
    json!({
        "id": st.opts().model_name,
        "object": "model",
        "created": st.started(),
        "owned_by": "rkv",
        "max_model_len": st.handle().max_context(),
    })
}

async fn models(State(st): State<AppState>) -> Json<Value> {
    Json(json!({"object": "list", "data": [model_card(&st)]}))
}

async fn model(State(st): State<AppState>, Path(id): Path<String>) -> Response {
    if id == st.opts().model_name {
        Json(model_card(&st)).into_response()
    } else {
        ApiError::ModelNotFound(id).into_response()
    }
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn metrics(State(st): State<AppState>) -> Response {
    let text = st.metrics().render(&st.handle().metrics());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route {method} {}", uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}
