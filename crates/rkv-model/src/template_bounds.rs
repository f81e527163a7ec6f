//! The size bounds a chat template renders under: a template comes with the model file, so
//! it is untrusted code. Together with minijinja's fuel (a step budget, set by
//! [`crate::chat_template`]) they stop templates that loop, print or build strings without
//! end.
//!
//! Owns: the limits, the two per-rendering budgets (bytes printed, bytes built by operators
//! and filters), the formatter that counts every byte a template prints (into its output,
//! a `{% set %}...{% endset %}` capture or a macro's result), the bounded string writer,
//! and the `replace` filter and method with their result's size checked before it is
//! built.
//! Must not know: messages, tokenizers, models.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use minijinja::value::Object;
use minijinja::{Error, ErrorKind, Output, State, Value};

/// Most bytes one rendering may print, its output and captures together. A prompt of a
/// million tokens is a few MB of text.
pub const MAX_RENDER_BYTES: usize = 16 << 20;

/// Longest string one operator (`~`, `+`, `*`) or filter may build.
pub const MAX_STRING_BYTES: usize = 4 << 20;

/// Most bytes the strings and lists built by operators and filters may take in one
/// rendering, counted as they are built (freed ones too), so that a template cannot keep
/// many large values alive at once.
pub const MAX_BUILT_BYTES: usize = 48 << 20;

/// Most items a list built by `+` or a filter may hold.
pub const MAX_ITEMS: usize = 256 << 10;

/// What one item of a built list is counted as: the value and a share of its contents.
pub(crate) const ITEM_BYTES: usize = 64;

/// The message of the error a rendering past [`MAX_RENDER_BYTES`] stops with.
pub(crate) fn too_large() -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("the template printed more than {MAX_RENDER_BYTES} bytes"),
    )
}

/// The error of an operation whose result would be past [`MAX_STRING_BYTES`].
pub(crate) fn string_too_long(what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("{what} would build a string over {MAX_STRING_BYTES} bytes"),
    )
}

/// The error of an operation whose result would hold more than [`MAX_ITEMS`] items.
pub(crate) fn too_many_items(what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("{what} would build a list of over {MAX_ITEMS} items"),
    )
}

/// Bytes printed and built so far in one rendering (kept in the rendering's state).
#[derive(Debug, Default)]
struct Spent {
    printed: AtomicUsize,
    built: AtomicUsize,
}

impl Object for Spent {}

fn spent(state: &State) -> std::sync::Arc<Spent> {
    state.get_or_set_temp_object("rkv_spent_bytes", Spent::default)
}

/// Counts `n` more printed bytes against the rendering's bound.
fn spend(state: &State, n: usize) -> Result<(), Error> {
    let before = spent(state).printed.fetch_add(n, Ordering::Relaxed);
    if before.saturating_add(n) > MAX_RENDER_BYTES {
        return Err(too_large());
    }
    Ok(())
}

/// Counts `n` more built bytes against the rendering's bound.
pub(crate) fn charge(state: &State, n: usize) -> Result<(), Error> {
    let before = spent(state).built.fetch_add(n, Ordering::Relaxed);
    if before.saturating_add(n) > MAX_BUILT_BYTES {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("the template built more than {MAX_BUILT_BYTES} bytes of strings and lists"),
        ));
    }
    Ok(())
}

/// Counts a value a filter or operator built: a string's bytes, a list's or map's items.
pub(crate) fn charge_value(state: &State, value: &Value) -> Result<(), Error> {
    let n = match value.as_str() {
        Some(s) => s.len(),
        None => item_count(value).saturating_mul(ITEM_BYTES),
    };
    charge(state, n)
}

/// The items of a list or map (strings and other scalars count 0; so does an iterator
/// whose length is unknown, which only iterating would tell, and iterating consumes it:
/// see [`materialize`]).
pub(crate) fn item_count(value: &Value) -> usize {
    use minijinja::value::ValueKind;
    match value.kind() {
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => value.len().unwrap_or(0),
        _ => 0,
    }
}

/// `value`, or, for an iterator of unknown length (Python's `str.split` gives one), a list
/// of its items: at most [`MAX_ITEMS`] of them, or an error. A filter consumes such an
/// iterator anyway; as a list it can be sized first.
pub(crate) fn materialize(value: &Value) -> Result<Value, Error> {
    use minijinja::value::ValueKind;
    if value.kind() != ValueKind::Iterable || value.len().is_some() {
        return Ok(value.clone());
    }
    let items: Vec<Value> = value.try_iter()?.take(MAX_ITEMS + 1).collect();
    if items.len() > MAX_ITEMS {
        return Err(too_many_items("an iterator"));
    }
    Ok(Value::from(items))
}

/// A `String` that refuses to grow past a limit (writes past it fail with `fmt::Error`).
pub(crate) struct BoundedString {
    pub buf: String,
    limit: usize,
}

impl BoundedString {
    pub fn new(limit: usize) -> Self {
        Self {
            buf: String::new(),
            limit,
        }
    }
}

impl fmt::Write for BoundedString {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.buf.len() + s.len() > self.limit {
            return Err(fmt::Error);
        }
        self.buf.push_str(s);
        Ok(())
    }
}

/// Counts what would be written, failing past a limit: sizes a value's text unbuilt.
pub(crate) struct Counter {
    pub len: usize,
    limit: usize,
}

impl Counter {
    pub fn new(limit: usize) -> Self {
        Self { len: 0, limit }
    }
}

impl fmt::Write for Counter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.len += s.len();
        if self.len > self.limit {
            return Err(fmt::Error);
        }
        Ok(())
    }
}

impl std::io::Write for Counter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.len += data.len();
        if self.len > self.limit {
            return Err(std::io::Error::other("too large"));
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The length of `value`'s text (as `{{ value }}` prints it), or `None` past `limit`.
pub(crate) fn text_len(value: &Value, limit: usize) -> Option<usize> {
    if let Some(s) = value.as_str() {
        return (s.len() <= limit).then_some(s.len());
    }
    let mut counter = Counter::new(limit);
    fmt::write(&mut counter, format_args!("{value}")).ok()?;
    Some(counter.len)
}

/// minijinja's formatter (no auto-escaping is configured) that counts what it prints,
/// captures and raw template text included (see [`crate::template_guard`]), so a template
/// doubling a captured string stops at the bound.
pub(crate) fn counting_formatter(
    out: &mut Output,
    state: &State,
    value: &Value,
) -> Result<(), Error> {
    let len = text_len(value, MAX_RENDER_BYTES).ok_or_else(too_large)?;
    spend(state, len)?;
    minijinja::escape_formatter(out, state, value)
}

/// The length of `s` with every `from` replaced by `to` (at most `count` of them), or an
/// error when that is past the bound.
fn replaced_len(s: &str, from: &str, to: &str, count: Option<usize>) -> Result<usize, Error> {
    let hits = if from.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(from).count()
    };
    let hits = count.map_or(hits, |c| hits.min(c));
    let len = hits
        .checked_mul(to.len())
        .and_then(|grown| (s.len() - hits * from.len()).checked_add(grown))
        .filter(|&len| len <= MAX_STRING_BYTES);
    len.ok_or_else(|| string_too_long("replace"))
}

/// The `replace` filter, refusing a result past the bound before building it.
pub(crate) fn replace_filter(
    state: &State,
    value: String,
    from: String,
    to: String,
    count: Option<usize>,
) -> Result<Value, Error> {
    let len = replaced_len(&value, &from, &to, count)?;
    charge(state, len)?;
    Ok(Value::from(match count {
        Some(n) => value.replacen(&from, &to, n),
        None => value.replace(&from, &to),
    }))
}

/// The size of `s.replace(from, to[, count])` as Python's method runs it, checked.
pub(crate) fn replace_method_len(s: &str, args: &[Value]) -> Result<usize, Error> {
    let (from, to) = match args {
        [from, to, ..] => (from.as_str(), to.as_str()),
        _ => (None, None),
    };
    match (from, to) {
        (Some(from), Some(to)) => {
            let count = args.get(2).and_then(|c| usize::try_from(c.clone()).ok());
            replaced_len(s, from, to, count)
        }
        _ => Ok(0),
    }
}
