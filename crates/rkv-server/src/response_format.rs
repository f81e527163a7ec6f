//! `response_format`: OpenAI's structured outputs read into the engine's grammar spec.
//! `{"type": "text"}` (or none) is free text; `{"type": "json_object"}` any JSON object;
//! `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}` JSON that
//! validates against `schema`. Every refusal names `response_format`.
//!
//! `strict` is accepted and not needed: the schema is always enforced, token by token,
//! whatever its value (OpenAI's `strict: false` promises less, never more).
//!
//! Must not know: HTTP, the grammar engine (the spec is compiled where the request is
//! submitted, and a schema the engine cannot enforce is refused there, naming this field
//! too).

use rkv_engine::GrammarSpec;
use serde_json::Value;

use crate::error::ApiError;

pub const PARAM: &str = "response_format";

/// The grammar `response_format` asks for; `None` for free text.
pub fn read(v: Option<&Value>) -> Result<Option<GrammarSpec>, ApiError> {
    let bad = |msg: &str| ApiError::invalid_param(PARAM, format!("{PARAM}: {msg}"));
    let obj = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => o,
        Some(_) => return Err(bad("must be an object with a `type`")),
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(GrammarSpec::JsonObject)),
        Some("json_schema") => {
            let js = match obj.get("json_schema") {
                Some(Value::Object(js)) => js,
                Some(_) => return Err(bad("`json_schema` must be an object")),
                None => return Err(bad("type `json_schema` needs a `json_schema` object")),
            };
            if !matches!(js.get("name"), None | Some(Value::String(_))) {
                return Err(bad("`json_schema.name` must be a string"));
            }
            if !matches!(js.get("strict"), None | Some(Value::Null | Value::Bool(_))) {
                return Err(bad("`json_schema.strict` must be a boolean"));
            }
            match js.get("schema") {
                Some(s @ (Value::Object(_) | Value::Bool(_))) => {
                    Ok(Some(GrammarSpec::JsonSchema(s.clone())))
                }
                Some(_) => Err(bad("`json_schema.schema` must be a JSON Schema object")),
                None => Err(bad("`json_schema.schema` is missing")),
            }
        }
        Some(other) => Err(bad(&format!(
            "unknown type `{other}` (supported: text, json_object, json_schema)"
        ))),
        None => Err(bad("`type` (a string) is missing")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_three_types_are_read() {
        assert_eq!(read(None).unwrap(), None);
        assert_eq!(read(Some(&json!({"type": "text"}))).unwrap(), None);
        assert_eq!(
            read(Some(&json!({"type": "json_object"}))).unwrap(),
            Some(GrammarSpec::JsonObject)
        );
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let v = json!({"type": "json_schema",
                       "json_schema": {"name": "x", "schema": schema, "strict": true}});
        assert_eq!(
            read(Some(&v)).unwrap(),
            Some(GrammarSpec::JsonSchema(schema))
        );
    }

    #[test]
    fn refusals_name_the_field() {
        for v in [
            json!("json_object"),
            json!({"type": "yaml"}),
            json!({}),
            json!({"type": "json_schema"}),
            json!({"type": "json_schema", "json_schema": {"name": "x"}}),
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": "{}"}}),
            json!({"type": "json_schema", "json_schema": {"name": 3, "schema": {}}}),
            json!({"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}}),
        ] {
            let e = read(Some(&v)).unwrap_err();
            assert_eq!(e.body()["error"]["param"], PARAM, "{v}");
            assert!(e.to_string().contains(PARAM), "{v}: {e}");
        }
    }
}
