//! Tool calls in a model's output, by the format its family writes them in:
//! - `hermes` (Qwen2.5, Hermes, many others): `<tool_call>{"name": ..., "arguments":
//!   {...}}</tool_call>` blocks, any number, with text around them;
//! - `llama3_json` (Llama 3.x): the whole output one JSON object `{"name": ..,
//!   "parameters": {...}}` (or several joined by `;`), after an optional `<|python_tag|>`.
//!
//! A block that does not parse stays in the text, as vLLM's parsers leave it. Small
//! models often write the same JSON without the tags, bare or in a ```json fence: an
//! output that is only that, naming one of the request's tools, is a call too (hermes).
//! Also the streaming side: [`ToolStream`] lets text through until a call may start, then holds it
//! until the call is whole.
//!
//! Must not know: HTTP, SSE, the engine.

use serde_json::Value;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";

/// A model family's tool-call format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolParser {
    Hermes,
    Llama3Json,
}

impl ToolParser {
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "hermes" => Some(Self::Hermes),
            "llama3_json" => Some(Self::Llama3Json),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Hermes => "hermes",
            Self::Llama3Json => "llama3_json",
        }
    }

    /// The format a chat template asks for, if it renders tools at all.
    pub fn for_template(source: &str) -> Option<Self> {
        if !source.contains("tools") {
            return None;
        }
        if source.contains(OPEN) {
            Some(Self::Hermes)
        } else if source.contains("<|python_tag|>") || source.contains("\"parameters\"") {
            Some(Self::Llama3Json)
        } else {
            None
        }
    }
}

/// How a request's output is searched for calls: the format and the request's tools.
#[derive(Debug, Clone, PartialEq)]
pub struct CallFormat {
    pub parser: ToolParser,
    pub names: Vec<String>,
}

/// One parsed call: the function's name and its arguments as JSON text.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

/// An output split into its text and its calls.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// What is left of the text (`None` when only whitespace is).
    pub content: Option<String>,
    pub calls: Vec<ToolCall>,
}

/// `{"name": ..., "arguments" | "parameters": {...}}` as a call.
fn call_of(v: &Value) -> Option<ToolCall> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = v.get("arguments").or_else(|| v.get("parameters"));
    let arguments = match args {
        None | Some(Value::Null) => "{}".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(a) => a.to_string(),
    };
    Some(ToolCall { name, arguments })
}

fn content_of(text: String) -> Option<String> {
    (!text.trim().is_empty()).then(|| text.trim().to_string())
}

/// Splits a whole output of a request whose tools are `names`.
pub fn parse(parser: ToolParser, text: &str, names: &[String]) -> Parsed {
    match parser {
        ToolParser::Hermes => {
            let p = parse_hermes(text);
            match p.calls.is_empty() {
                true => bare_calls(text, names).unwrap_or(p),
                false => p,
            }
        }
        ToolParser::Llama3Json => parse_llama3(text),
    }
}

/// An output that is only a call's JSON (or a list of them), bare or fenced, each naming
/// one of `names`.
fn bare_calls(text: &str, names: &[String]) -> Option<Parsed> {
    let t = text.trim();
    let t = match t.strip_prefix("```") {
        Some(rest) => {
            let rest = rest.strip_prefix("json").unwrap_or(rest);
            rest.strip_suffix("```")?.trim()
        }
        None => t,
    };
    let v: Value = serde_json::from_str(t).ok()?;
    let items = match v {
        Value::Array(a) => a,
        o @ Value::Object(_) => vec![o],
        _ => return None,
    };
    let calls = items
        .iter()
        .map(|v| call_of(v).filter(|c| names.contains(&c.name) && v.get("arguments").is_some()))
        .collect::<Option<Vec<_>>>()?;
    (!calls.is_empty()).then_some(Parsed {
        content: None,
        calls,
    })
}

fn parse_hermes(text: &str) -> Parsed {
    let mut rest = text;
    let mut content = String::new();
    let mut calls = Vec::new();
    while let Some(start) = rest.find(OPEN) {
        content.push_str(&rest[..start]);
        let body_start = start + OPEN.len();
        let (body, next) = match rest[body_start..].find(CLOSE) {
            Some(end) => (
                &rest[body_start..body_start + end],
                body_start + end + CLOSE.len(),
            ),
            // Cut off before its end: parse what there is.
            None => (&rest[body_start..], rest.len()),
        };
        match serde_json::from_str::<Value>(body.trim())
            .ok()
            .as_ref()
            .and_then(call_of)
        {
            Some(c) => calls.push(c),
            None => content.push_str(&rest[start..next]),
        }
        rest = &rest[next..];
    }
    content.push_str(rest);
    Parsed {
        content: content_of(content),
        calls,
    }
}

fn parse_llama3(text: &str) -> Parsed {
    let body = text.trim();
    let body = body.strip_prefix(PYTHON_TAG).unwrap_or(body).trim();
    let whole = || Parsed {
        content: content_of(text.to_string()),
        calls: Vec::new(),
    };
    if !body.starts_with('{') {
        return whole();
    }
    let mut calls = Vec::new();
    for piece in body.split(';') {
        let Some(c) = serde_json::from_str::<Value>(piece.trim())
            .ok()
            .as_ref()
            .and_then(call_of)
        else {
            return whole();
        };
        calls.push(c);
    }
    Parsed {
        content: None,
        calls,
    }
}

/// What a piece of streamed output releases.
#[derive(Debug, Default, PartialEq)]
pub struct Released {
    pub text: String,
    pub calls: Vec<ToolCall>,
}

/// A streamed output's tool calls: text goes out until it may be the start of a call,
/// then waits until the call is whole (or the output ends).
#[derive(Debug)]
pub struct ToolStream {
    parser: ToolParser,
    names: Vec<String>,
    held: String,
    /// Llama 3: the output started as JSON, so all of it waits for the end.
    whole: bool,
    started: bool,
}

impl ToolStream {
    pub fn new(parser: ToolParser, names: Vec<String>) -> Self {
        Self {
            parser,
            names,
            held: String::new(),
            whole: false,
            started: false,
        }
    }

    pub fn push(&mut self, text: &str) -> Released {
        self.held.push_str(text);
        match self.parser {
            ToolParser::Llama3Json => {
                if !self.started {
                    let t = self.held.trim_start();
                    if t.is_empty() {
                        return Released::default();
                    }
                    self.started = true;
                    self.whole = t.starts_with('{')
                        || t.starts_with(PYTHON_TAG)
                        || PYTHON_TAG.starts_with(t);
                }
                if self.whole {
                    Released::default()
                } else {
                    Released {
                        text: std::mem::take(&mut self.held),
                        calls: Vec::new(),
                    }
                }
            }
            ToolParser::Hermes => {
                // An output opening like a bare call's JSON waits for its end.
                if !self.started {
                    let t = self.held.trim_start();
                    if t.is_empty() {
                        return Released::default();
                    }
                    self.started = true;
                    self.whole = t.starts_with('{') || t.starts_with('[') || t.starts_with('`');
                }
                if self.whole {
                    Released::default()
                } else {
                    self.release_hermes()
                }
            }
        }
    }

    fn release_hermes(&mut self) -> Released {
        let mut out = Released::default();
        loop {
            match self.held.find(OPEN) {
                Some(start) => {
                    let after = start + OPEN.len();
                    let Some(end) = self.held[after..].find(CLOSE) else {
                        out.text.push_str(&self.held[..start]);
                        self.held.drain(..start);
                        return out;
                    };
                    let stop = after + end + CLOSE.len();
                    let block: String = self.held.drain(..stop).collect();
                    let p = parse_hermes(&block);
                    out.calls.extend(p.calls);
                    // A block that did not parse goes out as text.
                    let pre = &block[..start];
                    out.text.push_str(pre);
                    if let Some(c) = p.content {
                        if c.len() > pre.trim().len() {
                            out.text.push_str(&block[start..]);
                        }
                    }
                }
                None => {
                    // Keep back a tail that could begin `<tool_call>`.
                    let keep = (1..OPEN.len())
                        .rev()
                        .find(|&k| {
                            self.held.len() >= k
                                && self.held.is_char_boundary(self.held.len() - k)
                                && OPEN.starts_with(&self.held[self.held.len() - k..])
                        })
                        .unwrap_or(0);
                    let cut = self.held.len() - keep;
                    out.text.push_str(&self.held[..cut]);
                    self.held.drain(..cut);
                    return out;
                }
            }
        }
    }

    /// The end of the output: whatever waits, parsed.
    pub fn finish(&mut self) -> Released {
        let held = std::mem::take(&mut self.held);
        let p = parse(self.parser, &held, &self.names);
        let text = if p.calls.is_empty() {
            held
        } else {
            p.content.unwrap_or_default()
        };
        Released {
            text,
            calls: p.calls,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &str) -> ToolCall {
        ToolCall {
            name: name.into(),
            arguments: args.into(),
        }
    }

    #[test]
    fn hermes_blocks_become_calls_and_the_rest_content() {
        let t = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>";
        let p = parse(ToolParser::Hermes, t, &[]);
        assert_eq!(p.content.as_deref(), Some("Let me look."));
        assert_eq!(
            p.calls,
            vec![call("get_weather", r#"{"city":"Paris"}"#), call("f", "{}")]
        );
        // Not JSON, or no name: left as text.
        let bad = "<tool_call>{oops</tool_call>";
        let p = parse(ToolParser::Hermes, bad, &[]);
        assert!(p.calls.is_empty());
        assert_eq!(p.content.as_deref(), Some(bad));
        // Cut off before the closing tag but whole JSON: still a call.
        let p = parse(ToolParser::Hermes, "<tool_call>{\"name\": \"g\"}", &[]);
        assert_eq!(p.calls, vec![call("g", "{}")]);
        assert_eq!(p.content, None);
        assert_eq!(parse(ToolParser::Hermes, "plain", &[]).calls, vec![]);
        // Bare or fenced JSON naming a tool of the request.
        let names = vec!["get_weather".to_string()];
        let fenced =
            "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```";
        let p = parse(ToolParser::Hermes, fenced, &names);
        assert_eq!(p.calls, vec![call("get_weather", r#"{"city":"Paris"}"#)]);
        assert_eq!(p.content, None);
        // Not one of its tools, or not only JSON: text.
        assert!(parse(ToolParser::Hermes, fenced, &[]).calls.is_empty());
        let prose = "Call {\"name\": \"get_weather\", \"arguments\": {}} now";
        assert!(parse(ToolParser::Hermes, prose, &names).calls.is_empty());
    }

    #[test]
    fn llama3_json_is_the_whole_output() {
        let p = parse(
            ToolParser::Llama3Json,
            "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1}}; {\"name\": \"g\", \"parameters\": {}}",
            &[],
        );
        assert_eq!(p.calls, vec![call("f", r#"{"x":1}"#), call("g", "{}")]);
        assert_eq!(p.content, None);
        let p = parse(ToolParser::Llama3Json, "The answer is {1}", &[]);
        assert!(p.calls.is_empty());
        assert_eq!(p.content.as_deref(), Some("The answer is {1}"));
    }

    #[test]
    fn templates_choose_their_parser() {
        assert_eq!(
            ToolParser::for_template("{% if tools %}<tool_call>{% endif %}"),
            Some(ToolParser::Hermes)
        );
        assert_eq!(
            ToolParser::for_template("{% if tools %}\"parameters\"{% endif %}"),
            Some(ToolParser::Llama3Json)
        );
        assert_eq!(ToolParser::for_template("{{ messages }}"), None);
    }

    /// Streamed in every split of two pieces, and one character at a time, a stream
    /// releases the same text and calls as the whole parse.
    #[test]
    fn streams_release_what_the_whole_parse_finds() {
        let cases = [
            (ToolParser::Hermes, "Sure. <tool_call>{\"name\": \"a\", \"arguments\": {\"q\": \"<x>\"}}</tool_call> done <tool"),
            (ToolParser::Hermes, "no calls at all < tool_call"),
            (ToolParser::Hermes, "<tool_call>{bad}</tool_call>after"),
            (ToolParser::Llama3Json, "{\"name\": \"f\", \"parameters\": {}}"),
            (ToolParser::Llama3Json, "just text"),
            (ToolParser::Hermes, "```json\n{\"name\": \"a\", \"arguments\": {}}\n```"),
            (ToolParser::Hermes, "{not a call} but text"),
        ];
        let names = vec!["a".to_string()];
        for (parser, text) in cases {
            let whole = parse(parser, text, &names);
            let splits: Vec<Vec<&str>> = (0..=text.len())
                .filter(|&i| text.is_char_boundary(i))
                .map(|i| vec![&text[..i], &text[i..]])
                .chain(std::iter::once(
                    text.char_indices()
                        .map(|(i, c)| &text[i..i + c.len_utf8()])
                        .collect(),
                ))
                .collect();
            for pieces in splits {
                let mut s = ToolStream::new(parser, names.clone());
                let (mut out, mut calls) = (String::new(), Vec::new());
                for p in &pieces {
                    let r = s.push(p);
                    out.push_str(&r.text);
                    calls.extend(r.calls);
                }
                let r = s.finish();
                out.push_str(&r.text);
                calls.extend(r.calls);
                assert_eq!(calls, whole.calls, "{text:?} in {pieces:?}");
                assert_eq!(content_of(out), whole.content, "{text:?} in {pieces:?}");
            }
        }
    }
}
