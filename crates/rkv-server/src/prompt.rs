//! A request's prompts as tokens: chat messages rendered with the model's chat template
//! (generation prompt added), or a completion's prompts (a string, token ids, or a batch:
//! an array of strings or of token-id arrays) encoded as they are.
//!
//! Must not know: HTTP, sampling, the engine.

use rkv_model::chat_template::ChatMessage;
use rkv_model::Tokenizer;
use serde_json::Value;

use crate::error::ApiError;
use crate::reasoning::prompt_opens_think;
use crate::request::ChatMessageIn;
use crate::tools::{history_calls, ToolChoice, Tools};

/// A tokenized prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    pub tokens: Vec<u32>,
    /// The text the tokens came from (`None` for a prompt given as token ids).
    pub text: Option<String>,
    /// The rendered prompt ends by opening a think block: the output starts in reasoning.
    pub opens_think: bool,
}

/// Renders and encodes chat messages, with the tools' definitions when given (and the
/// choice is not `none`).
pub fn chat_prompt(
    tok: &Tokenizer,
    messages: &[ChatMessageIn],
    tools: Option<&Tools>,
) -> Result<Prompt, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid_param(
            "messages",
            "messages must hold at least one message",
        ));
    }
    let msgs = messages
        .iter()
        .enumerate()
        .map(|(i, m)| message(i, m))
        .collect::<Result<Vec<_>, _>>()?;
    let defs = tools
        .filter(|t| t.choice != ToolChoice::None)
        .map(|t| Value::Array(t.defs.clone()));
    let rendered = tok
        .apply_chat_template_json(&Value::Array(msgs), defs.as_ref(), true)
        .map_err(|e| ApiError::invalid_param("messages", format!("cannot render the chat: {e}")))?;
    let tokens = tok
        .encode(&rendered)
        .map_err(|e| ApiError::invalid_param("messages", format!("cannot tokenize: {e}")))?;
    Ok(Prompt {
        tokens,
        opens_think: prompt_opens_think(&rendered),
        text: Some(rendered),
    })
}

/// One message as the template reads it: `role` and `content`, and where given
/// `tool_calls` (arguments as objects), `tool_call_id` and `name`.
fn message(i: usize, m: &ChatMessageIn) -> Result<Value, ApiError> {
    let param = format!("messages[{i}]");
    if m.role.trim().is_empty() {
        return Err(ApiError::invalid_param(
            &param,
            format!("{param}.role is empty"),
        ));
    }
    let content = match &m.content {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, p) in parts.iter().enumerate() {
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("text"), Some(Value::String(t))) => text.push_str(t),
                    _ => {
                        return Err(ApiError::invalid_param(
                            &param,
                            format!(
                                "{param}.content[{j}]: only text parts \
                                 ({{\"type\": \"text\", \"text\": \"...\"}}) are supported"
                            ),
                        ))
                    }
                }
            }
            text
        }
        Some(_) => {
            return Err(ApiError::invalid_param(
                &param,
                format!("{param}.content must be a string or an array of text parts"),
            ))
        }
    };
    let mut v = serde_json::to_value(ChatMessage::new(m.role.clone(), content))
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    if let Some(calls) = m.tool_calls.as_ref().filter(|c| !c.is_null()) {
        v["tool_calls"] = history_calls(&param, calls)?;
    }
    match (&m.tool_call_id, m.role.as_str()) {
        (Some(Value::String(id)), _) => v["tool_call_id"] = Value::String(id.clone()),
        (None | Some(Value::Null), "tool") => {
            return Err(ApiError::invalid_param(
                &param,
                format!("{param} is a tool message without tool_call_id"),
            ))
        }
        (None | Some(Value::Null), _) => {}
        (Some(_), _) => {
            return Err(ApiError::invalid_param(
                &param,
                format!("{param}.tool_call_id must be a string"),
            ))
        }
    }
    if let Some(Value::String(name)) = &m.name {
        v["name"] = Value::String(name.clone());
    }
    Ok(v)
}

/// Encodes a completion's prompts: a string, token ids, or an array of either (a batch,
/// at most `max` prompts).
pub fn completion_prompts(
    tok: &Tokenizer,
    prompt: &Value,
    max: usize,
) -> Result<Vec<Prompt>, ApiError> {
    let bad = || {
        ApiError::invalid_param(
            "prompt",
            "prompt must be a string, an array of token ids, or an array of strings or of \
             token-id arrays",
        )
    };
    let items = match prompt {
        Value::String(s) => return Ok(vec![text_prompt(tok, s)?]),
        Value::Array(items) => items,
        _ => return Err(bad()),
    };
    match items.first() {
        None => Err(ApiError::invalid_param("prompt", "prompt is empty")),
        Some(Value::String(_) | Value::Array(_)) => {
            if items.len() > max {
                return Err(ApiError::invalid_param(
                    "prompt",
                    format!("at most {max} prompts per request, got {}", items.len()),
                ));
            }
            items
                .iter()
                .map(|item| match item {
                    Value::String(s) => text_prompt(tok, s),
                    Value::Array(ids) => token_prompt(ids).ok_or_else(bad),
                    _ => Err(bad()),
                })
                .collect()
        }
        Some(_) => Ok(vec![token_prompt(items).ok_or_else(bad)?]),
    }
}

fn text_prompt(tok: &Tokenizer, text: &str) -> Result<Prompt, ApiError> {
    let tokens = tok
        .encode(text)
        .map_err(|e| ApiError::invalid_param("prompt", format!("cannot tokenize: {e}")))?;
    Ok(Prompt {
        tokens,
        text: Some(text.to_string()),
        opens_think: false,
    })
}

/// A prompt given as token ids (`None` if one is not a u32).
fn token_prompt(ids: &[Value]) -> Option<Prompt> {
    let tokens = ids
        .iter()
        .map(|v| v.as_u64().and_then(|x| u32::try_from(x).ok()))
        .collect::<Option<Vec<u32>>>()?;
    Some(Prompt {
        tokens,
        text: None,
        opens_think: false,
    })
}
