//! minijinja's filters and Python's string methods with their growth bounded: each one
//! that can build a string or list larger than its input (by a width or count argument,
//! by joining or formatting, by splitting a string into items) has the size of its result
//! checked before it is built, and every result is counted against the rendering's budget
//! of built bytes ([`crate::template_bounds`]).
//!
//! Owns: the wrapped filters, tests and global functions (`dict`, `namespace`, `debug`)
//! and the unknown-method callback (minijinja-contrib's `pycompat` behind the checks).
//! Must not know: messages, tokenizers, models, how templates are compiled.

use minijinja::filters as f;
use minijinja::functions as fun;
use minijinja::tests as t;
use minijinja::value::{Rest, ValueKind};
use minijinja::{Environment, Error, State, Value};

use crate::template_bounds::{self as bounds, text_len, Counter, MAX_ITEMS, MAX_STRING_BYTES};

/// A check run on a filter's arguments (the filtered value first) before it runs.
type Check = fn(&[Value]) -> Result<(), Error>;

/// Registers the wrapped builtin filters (`replace` and `tojson` are the caller's), tests
/// and functions.
pub(crate) fn add_filters(env: &mut Environment<'_>) {
    let wrapped: [(&'static str, Value, Check); 24] = [
        ("join", Value::from_function(f::join), join_check),
        ("format", Value::from_function(f::format), format_check),
        ("indent", Value::from_function(f::indent), indent_check),
        ("safe", Value::from_function(f::safe), text_check),
        ("string", Value::from_function(f::string), text_check),
        ("pprint", Value::from_function(f::pprint), pprint_check),
        ("batch", Value::from_function(f::batch), count_check),
        ("slice", Value::from_function(f::slice), count_check),
        ("split", Value::from_function(f::split), split_check),
        ("lines", Value::from_function(f::lines), lines_check),
        ("list", Value::from_function(f::list), items_check),
        ("sort", Value::from_function(f::sort), items_check),
        ("unique", Value::from_function(f::unique), items_check),
        ("reverse", Value::from_function(f::reverse), items_check),
        ("map", Value::from_function(f::map), items_check),
        ("select", Value::from_function(f::select), items_check),
        ("reject", Value::from_function(f::reject), items_check),
        (
            "selectattr",
            Value::from_function(f::selectattr),
            items_check,
        ),
        (
            "rejectattr",
            Value::from_function(f::rejectattr),
            items_check,
        ),
        ("groupby", Value::from_function(f::groupby), items_check),
        ("dictsort", Value::from_function(f::dictsort), items_check),
        ("items", Value::from_function(f::items), items_check),
        ("chain", Value::from_function(f::chain), all_items_check),
        ("zip", Value::from_function(f::zip), all_items_check),
    ];
    for (name, filter, check) in wrapped {
        env.add_filter(name, move |state: &State, args: Rest<Value>| {
            let args = materialized(&args)?;
            check(&args)?;
            let rv = filter.call(state, &args)?;
            bounds::charge_value(state, &rv)?;
            Ok::<_, Error>(rv)
        });
    }
    let text_filters: [(&'static str, Value); 7] = [
        ("upper", Value::from_function(f::upper)),
        ("lower", Value::from_function(f::lower)),
        ("title", Value::from_function(f::title)),
        ("capitalize", Value::from_function(f::capitalize)),
        ("trim", Value::from_function(f::trim)),
        ("escape", Value::from_function(f::escape)),
        ("e", Value::from_function(f::escape)),
    ];
    for (name, text) in text_filters {
        env.add_filter(name, move |state: &State, args: Rest<Value>| {
            text_check(&args)?;
            let rv = text.call(state, &args)?;
            bounds::charge_value(state, &rv)?;
            Ok::<_, Error>(rv)
        });
    }
    // Tests that turn their arguments into text.
    let tests: [(&'static str, Value); 5] = [
        ("startingwith", Value::from_function(t::is_startingwith)),
        ("endingwith", Value::from_function(t::is_endingwith)),
        ("in", Value::from_function(t::is_in)),
        ("lower", Value::from_function(t::is_lower)),
        ("upper", Value::from_function(t::is_upper)),
    ];
    for (name, test) in tests {
        env.add_test(name, move |state: &State, args: Rest<Value>| {
            all_text_check(&args)?;
            Ok::<_, Error>(test.call(state, &args)?.is_true())
        });
    }
    // Functions that build maps from maps (`dict(d, **{k: d})` grows quadratically).
    for (name, function) in [
        ("dict", Value::from_function(fun::dict)),
        ("namespace", Value::from_function(fun::namespace)),
    ] {
        env.add_function(name, move |state: &State, args: Rest<Value>| {
            let n = args
                .iter()
                .fold(0usize, |n, a| n.saturating_add(items_of(a)));
            check_items(n, name)?;
            let rv = function.call(state, &args)?;
            bounds::charge(state, n.saturating_mul(bounds::ITEM_BYTES))?;
            Ok::<_, Error>(rv)
        });
    }
    // `debug()` prints the whole state, unbounded: not for chat templates.
    env.add_function("debug", |_: Rest<Value>| -> Result<Value, Error> {
        Err(Error::new(
            minijinja::ErrorKind::InvalidOperation,
            "debug() is not available in chat templates",
        ))
    });
}

/// The arguments with every iterator of unknown length made a list (sized, bounded).
fn materialized(args: &[Value]) -> Result<Vec<Value>, Error> {
    args.iter().map(bounds::materialize).collect()
}

/// The items a filter would make of `value`: a list's or map's, a string's characters.
fn items_of(value: &Value) -> usize {
    match value.as_str() {
        Some(s) => s.chars().take(MAX_ITEMS + 1).count(),
        None => bounds::item_count(value),
    }
}

fn check_items(n: usize, what: &str) -> Result<(), Error> {
    if n > MAX_ITEMS {
        return Err(bounds::too_many_items(what));
    }
    Ok(())
}

fn check_len(n: Option<usize>, what: &str) -> Result<(), Error> {
    match n {
        Some(n) if n <= MAX_STRING_BYTES => Ok(()),
        _ => Err(bounds::string_too_long(what)),
    }
}

fn items_check(args: &[Value]) -> Result<(), Error> {
    check_items(args.first().map_or(0, items_of), "a filter")
}

fn all_items_check(args: &[Value]) -> Result<(), Error> {
    let n = args
        .iter()
        .filter(|a| !a.is_kwargs())
        .fold(0usize, |n, a| n.saturating_add(items_of(a)));
    check_items(n, "a filter")
}

fn count_check(args: &[Value]) -> Result<(), Error> {
    items_check(args)?;
    let count = match args.get(1) {
        Some(kw) if kw.is_kwargs() => kw.get_attr("count").ok(),
        other => other.cloned(),
    };
    let count = count.and_then(|c| c.as_usize()).unwrap_or(0);
    check_items(count, "batch or slice")
}

/// The pieces `s.split(sep)` makes (whitespace runs when `sep` is none).
fn pieces(s: &str, sep: Option<&str>) -> usize {
    match sep {
        Some("") => s.chars().take(MAX_ITEMS + 1).count() + 1,
        Some(sep) => s.matches(sep).take(MAX_ITEMS + 1).count() + 1,
        None => s.split_whitespace().take(MAX_ITEMS + 1).count(),
    }
}

fn split_check(args: &[Value]) -> Result<(), Error> {
    if let Some(s) = args.first().and_then(Value::as_str) {
        check_items(pieces(s, args.get(1).and_then(Value::as_str)), "split")?;
    }
    Ok(())
}

fn lines_check(args: &[Value]) -> Result<(), Error> {
    if let Some(s) = args.first().and_then(Value::as_str) {
        check_items(pieces(s, Some("\n")), "lines")?;
    }
    Ok(())
}

fn text_check(args: &[Value]) -> Result<(), Error> {
    let len = args
        .first()
        .map_or(Some(0), |v| text_len(v, MAX_STRING_BYTES / 3));
    check_len(len, "a filter")
}

/// Every argument (keyword ones too) as text within the bound.
fn all_text_check(args: &[Value]) -> Result<(), Error> {
    for a in args {
        if a.is_kwargs() {
            for key in a.try_iter()? {
                check_len(
                    text_len(&a.get_item(&key)?, MAX_STRING_BYTES),
                    "an argument",
                )?;
            }
        } else {
            check_len(text_len(a, MAX_STRING_BYTES), "an argument")?;
        }
    }
    Ok(())
}

fn pprint_check(args: &[Value]) -> Result<(), Error> {
    let mut counter = Counter::new(MAX_STRING_BYTES);
    let ok = match args.first() {
        Some(v) => std::fmt::write(&mut counter, format_args!("{v:#?}")).is_ok(),
        None => true,
    };
    check_len(ok.then_some(counter.len), "pprint")
}

/// The text of `items` joined by `sep`, sized unbuilt.
fn joined_len(items: &Value, sep: usize) -> Option<usize> {
    let mut total = 0usize;
    for (i, item) in items.try_iter().ok()?.enumerate() {
        let len = text_len(&item, MAX_STRING_BYTES)?;
        total = total.checked_add(len + if i > 0 { sep } else { 0 })?;
        if total > MAX_STRING_BYTES {
            return None;
        }
    }
    Some(total)
}

fn join_check(args: &[Value]) -> Result<(), Error> {
    let sep = match args.get(1) {
        Some(sep) => {
            text_len(sep, MAX_STRING_BYTES).ok_or_else(|| bounds::string_too_long("join"))?
        }
        None => 0,
    };
    match args.first() {
        Some(v) if v.as_str().is_none() => check_len(joined_len(v, sep), "join"),
        Some(v) => check_len(
            items_of(v)
                .checked_mul(sep + 4)
                .map(|n| n + v.as_str().map_or(0, str::len)),
            "join",
        ),
        None => Ok(()),
    }
}

/// Widest field width or precision a format string may ask for.
const MAX_FORMAT_WIDTH: usize = 4096;

/// A bound on what a format string with `marks` placeholders makes of `args`, keyword
/// arguments included, each placeholder as wide as the widest argument and field.
fn formatted_len(template: &str, marks: usize, args: &[Value]) -> Option<usize> {
    let mut widest = 0;
    for a in args {
        if a.is_kwargs() {
            for key in a.try_iter().ok()? {
                widest = widest.max(text_len(&a.get_item(&key).ok()?, MAX_STRING_BYTES)?);
            }
        } else {
            widest = widest.max(text_len(a, MAX_STRING_BYTES)?);
        }
    }
    let padded = widest.checked_add(widest_field(template))?;
    marks.checked_mul(padded)?.checked_add(template.len())
}

/// The widest number in a format string's specifications: after `%` and its flags
/// (printf style) or after the `:` inside `{...}` (Python's `str.format`).
fn widest_field(template: &str) -> usize {
    let bytes = template.as_bytes();
    let mut widest = 0;
    let mut in_field = false;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        i += 1;
        let starts = match c {
            b'%' => true,
            b'{' => {
                in_field = true;
                false
            }
            b'}' => {
                in_field = false;
                false
            }
            b':' => in_field,
            _ => false,
        };
        if !starts {
            continue;
        }
        // Fill, alignment and flags, then the width, a dot and the precision.
        while i < bytes.len() && b"-+ #0<>=^_,*".contains(&bytes[i]) {
            i += 1;
        }
        loop {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let n = match template[start..i].parse::<usize>() {
                Ok(n) => n,
                Err(_) if i > start => usize::MAX,
                Err(_) => 0,
            };
            widest = widest.max(n);
            if i < bytes.len() && bytes[i] == b'.' {
                i += 1;
            } else {
                break;
            }
        }
    }
    widest
}

/// Whether every printf specification (`%(key)...x`) or `str.format` field (`{...}`) of
/// `template` is ASCII: minijinja 2.24's format parser slices a specification byte by byte
/// and panics inside a multi-byte character (found by fuzzing).
fn specs_are_ascii(template: &str, printf: bool) -> bool {
    let bytes = template.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        i += 1;
        if printf && c == b'%' {
            if bytes.get(i) == Some(&b'(') {
                while i < bytes.len() && bytes[i] != b')' {
                    if !bytes[i].is_ascii() {
                        return false;
                    }
                    i += 1;
                }
                i += 1;
            }
            while i < bytes.len() && b"-+ #0123456789.*".contains(&bytes[i]) {
                i += 1;
            }
            // The conversion character, or `%` itself.
            if bytes.get(i).is_some_and(|b| !b.is_ascii()) {
                return false;
            }
            i += 1;
        } else if !printf && c == b'{' {
            if bytes.get(i) == Some(&b'{') {
                i += 1;
                continue;
            }
            while i < bytes.len() && bytes[i] != b'}' {
                if !bytes[i].is_ascii() {
                    return false;
                }
                i += 1;
            }
        }
    }
    true
}

/// Checks a format string, printf style (`%s`) or Python's `str.format` style (`{}`),
/// before minijinja formats `args` with it.
fn check_format(template: &str, printf: bool, args: &[Value]) -> Result<(), Error> {
    let marks = template.matches(if printf { '%' } else { '{' }).count();
    if !specs_are_ascii(template, printf) {
        return Err(Error::new(
            minijinja::ErrorKind::InvalidOperation,
            "format: a format specification holds a non-ASCII character",
        ));
    }
    if widest_field(template) > MAX_FORMAT_WIDTH {
        return Err(bounds::string_too_long("format"));
    }
    check_len(formatted_len(template, marks, args), "format")
}

fn format_check(args: &[Value]) -> Result<(), Error> {
    if let Some(s) = args.first().and_then(Value::as_str) {
        check_format(s, true, &args[1..])?;
    }
    Ok(())
}

fn indent_check(args: &[Value]) -> Result<(), Error> {
    let Some(s) = args.first().and_then(Value::as_str) else {
        return Ok(());
    };
    let kwargs = args.iter().find(|a| a.is_kwargs());
    let width = match args.get(1) {
        Some(w) if !w.is_kwargs() && !w.is_none() && !w.is_undefined() => Some(w.clone()),
        _ => kwargs.and_then(|kw| kw.get_attr("width").ok()),
    };
    let width = match width {
        Some(w) if w.kind() == ValueKind::Number => w.as_usize(),
        Some(w) if w.kind() == ValueKind::String => w.as_str().map(str::len),
        _ => Some(4),
    };
    let lines = pieces(s, Some("\n"));
    let len = width
        .and_then(|w| w.checked_mul(lines))
        .and_then(|n| n.checked_add(s.len()));
    check_len(len, "indent")
}

/// Python's string methods as minijinja-contrib's `pycompat` runs them, each checked for
/// the size of its result first (`replace`, `join`, `split`, `splitlines`, `format`) and
/// counted after.
pub(crate) fn unknown_method(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        match method {
            "replace" => {
                bounds::replace_method_len(s, args)?;
            }
            "join" => {
                let items = bounds::materialize(&args.first().cloned().unwrap_or_default())?;
                check_len(joined_len(&items, s.len()), "join")?;
                let rv = minijinja_contrib::pycompat::unknown_method_callback(
                    state,
                    value,
                    method,
                    &[items],
                )?;
                bounds::charge_value(state, &rv)?;
                return Ok(rv);
            }
            "split" | "rsplit" => {
                check_items(pieces(s, args.first().and_then(Value::as_str)), "split")?
            }
            "splitlines" => check_items(pieces(s, Some("\n")), "splitlines")?,
            "format" => check_format(s, false, args)?,
            _ => {}
        }
    }
    let rv = minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)?;
    bounds::charge_value(state, &rv)?;
    Ok(rv)
}
