//! Chat templates: compiles a model's Jinja chat template with minijinja and renders a list
//! of messages the way Hugging Face `apply_chat_template` does (jinja2 sandbox with
//! `trim_blocks`, `lstrip_blocks`, loop controls, `raise_exception`, `strftime_now`, a
//! Python-compatible `tojson` and Python string/dict methods).
//!
//! Owns: template compilation, the render context and the Python-compatible helpers.
//! Must not know: tokenisation, token ids, GGUF or file formats, models, HTTP.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::machinery::{make_string_output, Vm};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Value};
use serde::{Deserialize, Serialize};

use crate::template_bounds as bounds;
use crate::template_filters as filters;
use crate::template_guard as guard;
use crate::template_json as json;

const TEMPLATE_NAME: &str = "chat_template";

/// One chat message as seen by the template (`message['role']`, `message['content']`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }
}

/// Errors of compiling or rendering a chat template.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ChatTemplateError {
    /// The template source does not compile.
    #[error("chat template does not compile: {0}")]
    Syntax(String),
    /// Rendering failed, including a `raise_exception(...)` called by the template.
    #[error("chat template rendering failed: {0}")]
    Render(String),
    /// A list-form template (`[{name, template}]`) without a usable entry, or a JSON value
    /// that is neither a string nor such a list.
    #[error("invalid chat template definition: {0}")]
    Invalid(String),
}

fn describe(err: &Error) -> String {
    let mut msg = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        let _ = write!(msg, ": {s}");
        source = s.source();
    }
    msg
}

/// A compiled chat template. Cheap to clone.
#[derive(Clone)]
pub struct ChatTemplate {
    env: Arc<Environment<'static>>,
    source: Arc<str>,
    /// The source with its literals wrapped (`template_guard::opaque_literals`): what is
    /// compiled.
    program: Arc<str>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source", &self.source)
            .finish()
    }
}

impl ChatTemplate {
    /// Compiles a Jinja template source.
    pub fn new(source: &str) -> Result<Self, ChatTemplateError> {
        let mut env = Environment::new();
        // A template comes with the model file: one that loops without end stops with an
        // error instead of hanging (a real one spends a few dozen units per message).
        env.set_fuel(Some(TEMPLATE_FUEL));
        // And one that prints, captures or builds values without end stops at a size
        // bound: printing through the counting formatter, building through the checked
        // operators (`template_guard`), filters and methods (`template_filters`).
        env.set_formatter(bounds::counting_formatter);
        guard::add_operators(&mut env);
        filters::add_filters(&mut env);
        env.add_filter("replace", bounds::replace_filter);
        env.set_unknown_method_callback(filters::unknown_method);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", json::tojson);
        let program = on_render_stack(|| {
            let program = guard::opaque_literals(source)
                .map_err(|e| ChatTemplateError::Syntax(describe(&e)))?;
            guard::compile(TEMPLATE_NAME, &program)
                .map_err(|e| ChatTemplateError::Syntax(describe(&e)))?;
            Ok(program)
        })?;
        Ok(Self {
            env: Arc::new(env),
            source: Arc::from(source),
            program: Arc::from(program),
        })
    }

    /// Builds a template from a `tokenizer_config.json` `chat_template` value: either a string
    /// or a list of `{"name": ..., "template": ...}` objects, of which the one named
    /// `"default"` is used (or the only/first one when there is no `"default"`).
    pub fn from_json(value: &serde_json::Value) -> Result<Self, ChatTemplateError> {
        match value {
            serde_json::Value::String(s) => Self::new(s),
            serde_json::Value::Array(items) => {
                let named: Vec<(&str, &str)> = items
                    .iter()
                    .filter_map(|it| {
                        Some((it.get("name")?.as_str()?, it.get("template")?.as_str()?))
                    })
                    .collect();
                let pick = named
                    .iter()
                    .find(|(n, _)| *n == "default")
                    .or_else(|| named.first())
                    .ok_or_else(|| {
                        ChatTemplateError::Invalid(
                            "template list has no {name, template} entry".into(),
                        )
                    })?;
                Self::new(pick.1)
            }
            other => Err(ChatTemplateError::Invalid(format!(
                "expected a string or a list of {{name, template}}, got {other}"
            ))),
        }
    }

    /// The template source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `messages` as Hugging Face `apply_chat_template(messages,
    /// add_generation_prompt=..., tokenize=False)` does.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Result<String, ChatTemplateError> {
        let ctx = serde_json::json!({
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": bos_token,
            "eos_token": eos_token,
        });
        self.render_json(&ctx)
    }

    /// Renders with an arbitrary JSON object as the context (for extra template variables
    /// such as `tools`, `documents` or `enable_thinking`).
    pub fn render_json(&self, context: &serde_json::Value) -> Result<String, ChatTemplateError> {
        on_render_stack(|| self.render_here(context))
    }

    fn render_here(&self, context: &serde_json::Value) -> Result<String, ChatTemplateError> {
        // Compiled again for each rendering (a template compiles in tens of microseconds):
        // the instructions borrow the source, which the shared environment cannot.
        let compiled = guard::compile(TEMPLATE_NAME, &self.program)
            .map_err(|e| ChatTemplateError::Syntax(describe(&e)))?;
        let mut out = String::new();
        let rendered = Vm::new(&self.env).eval(
            &compiled.instructions,
            Value::from_serialize(context),
            &compiled.blocks,
            &mut make_string_output(&mut out),
            AutoEscape::None,
        );
        match rendered {
            Ok(_) => Ok(out),
            Err(e) if e.kind() == ErrorKind::OutOfFuel => Err(ChatTemplateError::Render(format!(
                "the template ran past its budget of {TEMPLATE_FUEL} steps (a loop without end?)"
            ))),
            Err(e) => Err(ChatTemplateError::Render(describe(&e))),
        }
    }
}

/// The stack a template compiles and renders on: values nested as deep as the step budget
/// allows (one level a step: a million levels of `[[[...[ns.l]...]]]`) are printed,
/// serialised and dropped by recursion, a few hundred bytes of stack a level. Reserved,
/// not resident: only the pages a rendering touches count.
const RENDER_STACK_BYTES: usize = 1 << 30;

/// Runs `f` on a thread of its own with [`RENDER_STACK_BYTES`] of stack, so that no
/// template can overflow the caller's (a server worker's is 2 MiB).
fn on_render_stack<T: Send>(
    f: impl FnOnce() -> Result<T, ChatTemplateError> + Send,
) -> Result<T, ChatTemplateError> {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("rkv-chat-template".into())
            .stack_size(RENDER_STACK_BYTES)
            .spawn_scoped(scope, f)
            .map_err(|e| ChatTemplateError::Render(format!("cannot start a thread: {e}")))?;
        thread.join().unwrap_or_else(|_| {
            Err(ChatTemplateError::Render(
                "the template panicked (a bug in rkv or minijinja: please report it)".into(),
            ))
        })
    })
}

/// Instructions a template may run for one rendering (minijinja's fuel): a real template
/// spends a few dozen per message, and a million run in about a tenth of a second, so a
/// template that loops without end fails well within a second.
const TEMPLATE_FUEL: u64 = 1_000_000;

/// Longest message `raise_exception` passes on (a longer one is cut).
const MAX_MESSAGE_BYTES: usize = 4096;

fn raise_exception(msg: Value) -> Result<Value, Error> {
    let mut text = bounds::BoundedString::new(MAX_MESSAGE_BYTES);
    if write!(text, "{msg}").is_err() {
        text.buf.push_str("...");
    }
    Err(Error::new(ErrorKind::InvalidOperation, text.buf))
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// `strftime_now(format)`: the current UTC time formatted with a strftime subset
/// (`%Y %y %m %d %e %j %H %I %M %S %p %B %b %h %A %a %%`, and `%-d`-style unpadded forms).
fn strftime_now(format: Value) -> Result<String, Error> {
    let format = format
        .as_str()
        .filter(|f| f.len() <= MAX_MESSAGE_BYTES)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidOperation,
                format!("strftime_now takes a format string of at most {MAX_MESSAGE_BYTES} bytes"),
            )
        })?;
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Ok(format_unix_time(secs, format))
}

/// Formats seconds since the Unix epoch (UTC) with the strftime subset of [`strftime_now`].
pub fn format_unix_time(secs: u64, format: &str) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (hour, minute, second) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    // Civil-from-days (Howard Hinnant), proleptic Gregorian.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy_mar = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy_mar + 2) / 153;
    let day = doy_mar - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    const CUM: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = CUM[(month - 1) as usize] + day + i64::from(leap && month > 2);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };

    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = chars.next();
        let pad = spec != Some('-');
        if !pad {
            spec = chars.next();
        }
        let num = |out: &mut String, v: i64, w: usize| {
            if pad {
                let _ = write!(out, "{v:0w$}");
            } else {
                let _ = write!(out, "{v}");
            }
        };
        match spec {
            Some('Y') => num(&mut out, year, 4),
            Some('y') => num(&mut out, year.rem_euclid(100), 2),
            Some('m') => num(&mut out, month, 2),
            Some('d') => num(&mut out, day, 2),
            Some('e') => {
                let _ = write!(out, "{day:>2}");
            }
            Some('j') => num(&mut out, yday, 3),
            Some('H') => num(&mut out, hour as i64, 2),
            Some('I') => num(&mut out, hour12 as i64, 2),
            Some('M') => num(&mut out, minute as i64, 2),
            Some('S') => num(&mut out, second as i64, 2),
            Some('p') => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            Some('B') => out.push_str(MONTHS[(month - 1) as usize]),
            Some('b') | Some('h') => out.push_str(&MONTHS[(month - 1) as usize][..3]),
            Some('A') => out.push_str(WEEKDAYS[weekday]),
            Some('a') => out.push_str(&WEEKDAYS[weekday][..3]),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}
