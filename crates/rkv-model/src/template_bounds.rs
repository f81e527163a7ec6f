//! The size bounds a chat template renders under: a template comes with the model file, so
//! it is untrusted code. Together with minijinja's fuel (a step budget, set by
//! [`crate::chat_template`]) they stop templates that loop or print without end.
//!
//! Owns: the bounded output writer, the formatter that counts every byte a template prints
//! (into its output or into a `{% set %}...{% endset %}` capture or a macro's result), and
//! the `replace` filter and method with their result's size checked before it is built.
//! Not bounded here: strings built by the `~` and `+` operators (minijinja offers no hook
//! on them; its own `*` refuses results over 100 MB).
//! Must not know: messages, tokenizers, models.

use std::sync::atomic::{AtomicUsize, Ordering};

use minijinja::value::Object;
use minijinja::{Error, ErrorKind, Output, State, Value};

/// Most bytes one rendering may print, its output and captures together. A prompt of a
/// million tokens is a few MB of text.
pub const MAX_RENDER_BYTES: usize = 16 << 20;

/// The message of the error a rendering past [`MAX_RENDER_BYTES`] stops with.
pub(crate) fn too_large() -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("the template printed more than {MAX_RENDER_BYTES} bytes"),
    )
}

/// The output of a rendering: refuses to grow past [`MAX_RENDER_BYTES`].
#[derive(Default)]
pub(crate) struct BoundedOutput {
    pub buf: Vec<u8>,
    pub overflowed: bool,
}

impl std::io::Write for BoundedOutput {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > MAX_RENDER_BYTES {
            self.overflowed = true;
            return Err(std::io::Error::other("chat template output too large"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Bytes printed so far in one rendering (kept in the rendering's state).
#[derive(Debug, Default)]
struct Printed(AtomicUsize);

impl Object for Printed {}

/// Counts `n` more printed bytes against the rendering's bound.
fn spend(state: &State, n: usize) -> Result<(), Error> {
    let printed = state.get_or_set_temp_object("rkv_printed_bytes", Printed::default);
    let before = printed.0.fetch_add(n, Ordering::Relaxed);
    if before.saturating_add(n) > MAX_RENDER_BYTES {
        return Err(too_large());
    }
    Ok(())
}

/// minijinja's formatter (no auto-escaping is configured) that counts what it prints,
/// captures included, so a template doubling a captured string stops at the bound.
pub(crate) fn counting_formatter(
    out: &mut Output,
    state: &State,
    value: &Value,
) -> Result<(), Error> {
    let len = match value.as_str() {
        Some(s) => s.len(),
        None => value.to_string().len(),
    };
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
        .filter(|&len| len <= MAX_RENDER_BYTES);
    len.ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("replace would build a string over {MAX_RENDER_BYTES} bytes"),
        )
    })
}

/// The `replace` filter, refusing a result past the bound before building it.
pub(crate) fn replace_filter(
    value: String,
    from: String,
    to: String,
    count: Option<usize>,
) -> Result<Value, Error> {
    replaced_len(&value, &from, &to, count)?;
    Ok(Value::from(match count {
        Some(n) => value.replacen(&from, &to, n),
        None => value.replace(&from, &to),
    }))
}

/// Python's `str.replace` method as minijinja-contrib's pycompat runs it, its result's size
/// checked first; every other unknown method goes to pycompat unchanged.
pub(crate) fn unknown_method(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let (Some(s), "replace") = (value.as_str(), method) {
        let (from, to) = match args {
            [from, to, ..] => (from.as_str(), to.as_str()),
            _ => (None, None),
        };
        if let (Some(from), Some(to)) = (from, to) {
            let count = args.get(2).and_then(|c| usize::try_from(c.clone()).ok());
            replaced_len(s, from, to, count)?;
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}
