//! A chat request's `tools` and `tool_choice`, checked: every tool a function with a
//! name of 1-64 letters, digits, `_` or `-`, an optional description and a `parameters`
//! object; `tool_choice` `none`, `auto`, `required` or `{"type": "function", "function":
//! {"name"}}` naming one of them (`required` and a named function are enforced by a
//! grammar: [`forced_call`]). Also the history's `tool_calls` and `tool` messages,
//! turned into what chat templates read (arguments as objects, as transformers and vLLM
//! pass them).
//!
//! Must not know: HTTP, the engine, output parsing.

use serde_json::{json, Map, Value};

use rkv_engine::grammar::GrammarSpec;

use crate::error::ApiError;

/// How the model may call the tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    Named(String),
}

/// Checked tools: their definitions as the template sees them, and the choice.
#[derive(Debug, Clone, PartialEq)]
pub struct Tools {
    pub defs: Vec<Value>,
    pub names: Vec<String>,
    pub choice: ToolChoice,
}

fn valid_name(n: &str) -> bool {
    (1..=64).contains(&n.len())
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Checks `tools` and `tool_choice`; `None` when there are no tools.
pub fn check(tools: Option<&Value>, choice: Option<&Value>) -> Result<Option<Tools>, ApiError> {
    let bad = |m: String| ApiError::invalid_param("tools", m);
    let list = match tools {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(v) => return Err(bad(format!("tools must be an array, got {v}"))),
    };
    let mut defs = Vec::with_capacity(list.len());
    let mut names: Vec<String> = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return Err(bad(format!("tools[{i}].type must be \"function\"")));
        }
        let Some(f) = t.get("function").and_then(Value::as_object) else {
            return Err(bad(format!("tools[{i}].function must be an object")));
        };
        let name = match f.get("name").and_then(Value::as_str) {
            Some(n) if valid_name(n) => n.to_string(),
            _ => {
                return Err(bad(format!(
                    "tools[{i}].function.name must be 1-64 letters, digits, _ or -"
                )))
            }
        };
        if names.contains(&name) {
            return Err(bad(format!("tools[{i}]: a second function named {name:?}")));
        }
        let mut func = Map::new();
        func.insert("name".into(), json!(name));
        match f.get("description") {
            None | Some(Value::Null) => {}
            Some(Value::String(d)) => {
                func.insert("description".into(), json!(d));
            }
            Some(_) => {
                return Err(bad(format!(
                    "tools[{i}].function.description must be a string"
                )))
            }
        }
        match f.get("parameters") {
            None | Some(Value::Null) => {}
            Some(p @ Value::Object(_)) => {
                func.insert("parameters".into(), p.clone());
            }
            Some(_) => {
                return Err(bad(format!(
                    "tools[{i}].function.parameters must be a JSON Schema object"
                )))
            }
        }
        names.push(name);
        defs.push(json!({"type": "function", "function": func}));
    }
    let choice = parse_choice(choice, &names)?;
    if defs.is_empty() {
        return match choice {
            ToolChoice::None | ToolChoice::Auto => Ok(None),
            _ => Err(ApiError::invalid_param(
                "tool_choice",
                "tool_choice asks for a call but the request has no tools",
            )),
        };
    }
    Ok(Some(Tools {
        defs,
        names,
        choice,
    }))
}

fn parse_choice(v: Option<&Value>, names: &[String]) -> Result<ToolChoice, ApiError> {
    let bad = |m: String| ApiError::invalid_param("tool_choice", m);
    match v {
        None | Some(Value::Null) => Ok(ToolChoice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "none" => Ok(ToolChoice::None),
            "auto" => Ok(ToolChoice::Auto),
            "required" => Ok(ToolChoice::Required),
            other => Err(bad(format!(
                "tool_choice must be none, auto, required or a function, got {other:?}"
            ))),
        },
        Some(Value::Object(o)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| bad("tool_choice.function.name is missing".into()))?;
            if !names.iter().any(|n| n == name) {
                return Err(bad(format!(
                    "tool_choice names {name:?}, which is not a tool"
                )));
            }
            Ok(ToolChoice::Named(name.to_string()))
        }
        Some(v) => Err(bad(format!(
            "tool_choice must be a string or an object, got {v}"
        ))),
    }
}

/// For `required` or a named function: the grammar the output must follow, one call as
/// the JSON object `{"name": <a tool's name>, "arguments": <its parameters>}` (the bare
/// form both call parsers read), so the answer is always a call that parses.
pub fn forced_call(t: &Tools) -> Option<GrammarSpec> {
    let allowed: Vec<&Value> = t
        .defs
        .iter()
        .filter(|d| match &t.choice {
            ToolChoice::Required => true,
            ToolChoice::Named(n) => d["function"]["name"].as_str() == Some(n.as_str()),
            ToolChoice::None | ToolChoice::Auto => false,
        })
        .collect();
    if allowed.is_empty() {
        return None;
    }
    let one = |d: &Value| {
        let params = match d["function"].get("parameters") {
            Some(p) => p.clone(),
            None => json!({"type": "object"}),
        };
        json!({"type": "object",
               "properties": {"name": {"const": d["function"]["name"]}, "arguments": params},
               "required": ["name", "arguments"], "additionalProperties": false})
    };
    let schema = match allowed.as_slice() {
        [d] => one(d),
        many => json!({"anyOf": many.iter().map(|d| one(d)).collect::<Vec<_>>()}),
    };
    Some(GrammarSpec::JsonSchema(schema))
}

/// An assistant message's `tool_calls` as templates read them: `[{id, type, function:
/// {name, arguments}}]`, arguments parsed from their JSON text (kept as text if not JSON).
pub fn history_calls(param: &str, v: &Value) -> Result<Value, ApiError> {
    let bad = || {
        ApiError::invalid_param(
            param,
            format!(
                "{param}.tool_calls must be an array of {{\"id\", \"type\": \"function\", \
                 \"function\": {{\"name\", \"arguments\"}}}}"
            ),
        )
    };
    let calls = v.as_array().ok_or_else(bad)?;
    let mut out = Vec::with_capacity(calls.len());
    for c in calls {
        let f = c.get("function").ok_or_else(bad)?;
        let name = f.get("name").and_then(Value::as_str).ok_or_else(bad)?;
        let arguments = match f.get("arguments") {
            Some(Value::String(s)) => serde_json::from_str(s).unwrap_or_else(|_| json!(s)),
            Some(a @ Value::Object(_)) => a.clone(),
            None | Some(Value::Null) => json!({}),
            Some(_) => return Err(bad()),
        };
        let mut call =
            json!({"type": "function", "function": {"name": name, "arguments": arguments}});
        if let Some(id) = c.get("id").and_then(Value::as_str) {
            call["id"] = json!(id);
        }
        out.push(call);
    }
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> Value {
        json!([{"type": "function", "function": {"name": "get_weather",
            "description": "Weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
    }

    #[test]
    fn tools_and_choices_are_read() {
        let t = check(Some(&weather()), None).unwrap().unwrap();
        assert_eq!(t.names, vec!["get_weather".to_string()]);
        assert_eq!(t.choice, ToolChoice::Auto);
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        let t = check(Some(&weather()), Some(&named)).unwrap().unwrap();
        assert_eq!(t.choice, ToolChoice::Named("get_weather".into()));
        assert_eq!(check(None, Some(&json!("auto"))).unwrap(), None);
        assert_eq!(check(Some(&json!([])), None).unwrap(), None);
    }

    #[test]
    fn bad_tools_name_their_field() {
        for (tools, choice, param) in [
            (json!({}), Value::Null, "tools"),
            (
                json!([{"type": "function", "function": {}}]),
                Value::Null,
                "tools",
            ),
            (
                json!([{"type": "function", "function": {"name": "a b"}}]),
                Value::Null,
                "tools",
            ),
            (json!([{"type": "retrieval"}]), Value::Null, "tools"),
            (
                json!([{"type": "function", "function": {"name": "f", "parameters": 3}}]),
                Value::Null,
                "tools",
            ),
            (weather(), json!("sometimes"), "tool_choice"),
            (
                weather(),
                json!({"type": "function", "function": {"name": "nope"}}),
                "tool_choice",
            ),
            (json!([]), json!("required"), "tool_choice"),
        ] {
            let e = check(Some(&tools), Some(&choice)).unwrap_err();
            assert_eq!(e.body()["error"]["param"], param, "{tools} {choice}");
        }
    }

    #[test]
    fn required_and_named_choices_become_a_call_grammar() {
        let two = json!([weather()[0], {"type": "function", "function": {"name": "ping"}}]);
        let req = check(Some(&two), Some(&json!("required")))
            .unwrap()
            .unwrap();
        let Some(GrammarSpec::JsonSchema(s)) = forced_call(&req) else {
            panic!("no grammar for required");
        };
        assert_eq!(s["anyOf"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            s["anyOf"][1]["properties"]["arguments"],
            json!({"type": "object"})
        );
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        let t = check(Some(&two), Some(&named)).unwrap().unwrap();
        let Some(GrammarSpec::JsonSchema(s)) = forced_call(&t) else {
            panic!("no grammar for a named function");
        };
        assert_eq!(s["properties"]["name"]["const"], "get_weather");
        assert_eq!(s["properties"]["arguments"]["required"], json!(["city"]));
        let auto = check(Some(&two), None).unwrap().unwrap();
        assert_eq!(forced_call(&auto), None);
    }

    #[test]
    fn history_arguments_become_objects() {
        let calls = json!([{"id": "call_1", "type": "function",
            "function": {"name": "f", "arguments": "{\"x\": 1}"}}]);
        let v = history_calls("messages[1]", &calls).unwrap();
        assert_eq!(v[0]["function"]["arguments"], json!({"x": 1}));
        assert_eq!(v[0]["id"], "call_1");
        assert!(history_calls("messages[1]", &json!("x")).is_err());
    }
}
