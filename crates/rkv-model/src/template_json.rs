//! The `tojson` filter of chat templates as transformers defines it:
//! `json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
//! sort_keys=sort_keys)`, keys in insertion order, its output bounded like every string a
//! template builds ([`crate::template_bounds`]).
//!
//! Owns: Python's JSON layout (indent, separators, sorted keys).
//! Must not know: messages, tokenizers, models, how templates are compiled.

use std::fmt;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, State, Value};

use crate::template_bounds::{self as bounds, BoundedString, MAX_STRING_BYTES};

/// Widest `tojson` indent a template may ask for.
const MAX_INDENT: usize = 64;

/// Deepest nesting `tojson` writes (Python's `json.dumps` stops near 1,000 with a
/// `RecursionError`, and at once on a value that contains itself).
const MAX_DEPTH: usize = 1000;

/// The `tojson` filter.
pub(crate) fn tojson(
    state: &State,
    value: &Value,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let indent = match kwargs.get::<Option<Value>>("indent")?.or(indent) {
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => Some(match v.as_str() {
            Some(s) if s.len() <= MAX_INDENT => s.to_owned(),
            Some(_) => return Err(too_wide(MAX_INDENT + 1)),
            None => match usize::try_from(v).unwrap_or(0) {
                n if n > MAX_INDENT => return Err(too_wide(n)),
                n => " ".repeat(n),
            },
        }),
        None => None,
    };
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let (item_sep, key_sep) = match kwargs.get::<Option<Vec<String>>>("separators")? {
        Some(seps) if seps.len() == 2 => (seps[0].clone(), seps[1].clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be a pair",
            ))
        }
        None if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        None => (", ".to_owned(), ": ".to_owned()),
    };
    let _ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let fmt = PyJson {
        indent: indent.as_deref(),
        item_sep: &item_sep,
        key_sep: &key_sep,
        sort_keys,
        too_deep: std::cell::Cell::new(false),
    };
    // Written straight from the value into a bounded string: a list holding itself many
    // times over is small in memory and huge as text, and indentation grows with depth.
    let mut out = BoundedString::new(MAX_STRING_BYTES);
    if fmt.write(&mut out, value, 0).is_err() {
        if fmt.too_deep.get() {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "tojson: nested deeper than {MAX_DEPTH} levels (a value containing itself?)"
                ),
            ));
        }
        return Err(bounds::string_too_long("tojson"));
    }
    bounds::charge(state, out.buf.len())?;
    Ok(Value::from_safe_string(out.buf))
}

fn too_wide(n: usize) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("tojson: indent {n} is larger than {MAX_INDENT}"),
    )
}

struct PyJson<'a> {
    indent: Option<&'a str>,
    item_sep: &'a str,
    key_sep: &'a str,
    sort_keys: bool,
    /// Set when [`MAX_DEPTH`] stopped the writing.
    too_deep: std::cell::Cell<bool>,
}

impl PyJson<'_> {
    fn newline(&self, out: &mut impl fmt::Write, depth: usize) -> fmt::Result {
        if let Some(ind) = self.indent {
            out.write_char('\n')?;
            // An empty indent writes nothing: skipping it keeps a deep value linear
            // (looping over it made a cyclic one quadratic, found by fuzzing).
            if ind.is_empty() {
                return Ok(());
            }
            for _ in 0..depth {
                out.write_str(ind)?;
            }
        }
        Ok(())
    }

    fn write(&self, out: &mut impl fmt::Write, v: &Value, depth: usize) -> fmt::Result {
        if depth > MAX_DEPTH {
            self.too_deep.set(true);
            return Err(fmt::Error);
        }
        match v.kind() {
            ValueKind::Seq | ValueKind::Iterable => {
                let items = v.try_iter().map_err(|_| fmt::Error)?;
                self.container(out, ('[', ']'), items.map(|item| (None, item)), depth)
            }
            ValueKind::Map => {
                let mut entries = Vec::new();
                for key in v.try_iter().map_err(|_| fmt::Error)? {
                    let item = v.get_item(&key).map_err(|_| fmt::Error)?;
                    entries.push((Some(key), item));
                }
                if self.sort_keys {
                    entries.sort_by(|a, b| a.0.cmp(&b.0));
                }
                self.container(out, ('{', '}'), entries.into_iter(), depth)
            }
            ValueKind::Undefined | ValueKind::None => out.write_str("null"),
            _ => {
                let text = serde_json::to_string(v).map_err(|_| fmt::Error)?;
                out.write_str(&text)
            }
        }
    }

    /// A list (keys `None`) or a map, Python's empty forms `[]` and `{}` included.
    fn container(
        &self,
        out: &mut impl fmt::Write,
        (open, close): (char, char),
        entries: impl Iterator<Item = (Option<Value>, Value)>,
        depth: usize,
    ) -> fmt::Result {
        out.write_char(open)?;
        let mut empty = true;
        for (i, (key, item)) in entries.enumerate() {
            empty = false;
            if i > 0 {
                out.write_str(self.item_sep)?;
            }
            self.newline(out, depth + 1)?;
            if let Some(key) = key {
                let key = key.as_str().map_or_else(|| key.to_string(), str::to_owned);
                write!(out, "{}", serde_json::Value::String(key))?;
                out.write_str(self.key_sep)?;
            }
            self.write(out, &item, depth + 1)?;
        }
        if !empty {
            self.newline(out, depth)?;
        }
        out.write_char(close)
    }
}
