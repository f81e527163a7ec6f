//! A chat template compiled into minijinja's instructions with every way it can grow a
//! value bounded. minijinja has no hook on its operators, so after compiling (through its
//! `unstable_machinery` interface) the instructions are rewritten: `~`, `+`, `*`, `in`
//! and slicing become calls of checked functions with the same stack effect, and each emission
//! of raw template text jumps to a trampoline that prints it through the counting
//! formatter (so raw text in an endless loop meets the output bound as printed values do).
//! minijinja also folds constant expressions while it compiles (`'x' * 10**8 ~ ...` would
//! be built then, unchecked), so before compiling every string and number literal of the
//! source is wrapped in a call of the identity, which makes no expression constant.
//!
//! Owns: compiling a template source with Hugging Face's whitespace settings, the literal
//! wrapping, the instruction rewrite and the checked operators.
//! Must not know: messages, tokenizers, models, filters (see `template_filters`).

use std::fmt::Write as _;
use std::sync::Arc;

use minijinja::machinery::{
    tokenize, CompiledTemplate, Instruction, Instructions, TemplateConfig, Token, WhitespaceConfig,
};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::ValueKind;
use minijinja::{AutoEscape, Environment, Error, State, Value};

use crate::template_bounds::{self as bounds, BoundedString, MAX_ITEMS, MAX_STRING_BYTES};

/// The functions the rewritten operators call. Their names cannot be written as template
/// identifiers, so a template cannot shadow them.
const CONCAT: &str = "~concat";
const ADD: &str = "~add";
const MUL: &str = "~mul";
const SLICE: &str = "~slice";
const IN: &str = "~in";
/// The identity literals are wrapped in: an identifier, as the source must parse.
const LITERAL: &str = "__rkv_literal";

/// Registers the checked operators the rewritten instructions call.
pub(crate) fn add_operators(env: &mut Environment<'_>) {
    env.add_function(CONCAT, concat);
    env.add_function(ADD, add);
    env.add_function(MUL, mul);
    env.add_function(SLICE, slice);
    env.add_function(IN, contains);
    env.add_function(LITERAL, |v: Value| v);
}

/// Hugging Face's whitespace settings for chat templates.
fn whitespace() -> WhitespaceConfig {
    WhitespaceConfig {
        keep_trailing_newline: false,
        lstrip_blocks: true,
        trim_blocks: true,
    }
}

/// `source` with every string and number literal wrapped in the identity (`'a' * 3`
/// becomes `(__rkv_literal('a')) * (__rkv_literal(3))`), so that minijinja folds no constant
/// expression while compiling. Lines are kept; columns move. A number right after a dot
/// (`x.0`, an item lookup) stays as it is.
// `SyntaxConfig` is a unit struct unless minijinja's `custom_syntax` is on: `default()`
// builds it either way.
#[allow(clippy::default_constructed_unit_structs)]
pub(crate) fn opaque_literals(source: &str) -> Result<String, Error> {
    let mut out = String::with_capacity(source.len() + source.len() / 4);
    let mut copied = 0;
    let mut after_dot = false;
    for token in tokenize(source, false, SyntaxConfig::default(), whitespace()) {
        let (token, span) = token?;
        let literal = matches!(
            token,
            Token::Str(_) | Token::String(_) | Token::Int(_) | Token::Int128(_) | Token::Float(_)
        );
        if literal && !after_dot {
            let (start, end) = (span.start_offset as usize, span.end_offset as usize);
            let text = source.get(start..end).ok_or_else(|| {
                Error::new(minijinja::ErrorKind::SyntaxError, "literal out of place")
            })?;
            // Parenthesised: `-1` must stay `-(f(1))`, not `(-f)(1)`.
            out.push_str(&source[copied..start]);
            out.push('(');
            out.push_str(LITERAL);
            out.push('(');
            out.push_str(text);
            out.push_str("))");
            copied = end;
        }
        after_dot = matches!(token, Token::Dot);
    }
    out.push_str(&source[copied..]);
    Ok(out)
}

/// Compiles `source` (already through [`opaque_literals`]) as `transformers` renders chat
/// templates (`trim_blocks`, `lstrip_blocks`, no trailing newline kept, no
/// auto-escaping), then bounds it.
#[allow(clippy::default_constructed_unit_structs)]
pub(crate) fn compile<'s>(name: &'s str, source: &'s str) -> Result<CompiledTemplate<'s>, Error> {
    let config = TemplateConfig {
        syntax_config: SyntaxConfig::default(),
        ws_config: whitespace(),
        default_auto_escape: Arc::new(|_: &str| AutoEscape::None),
    };
    let mut compiled = CompiledTemplate::new(name, source, &config)?;
    rewrite(&mut compiled.instructions);
    for block in compiled.blocks.values_mut() {
        rewrite(block);
    }
    Ok(compiled)
}

/// Replaces the growing operators with checked calls and raw emissions with trampolines
/// appended after a `Return` (so running off the original end still ends the program).
fn rewrite(instructions: &mut Instructions<'_>) {
    let len = instructions.len() as u32;
    let mut end_added = false;
    for i in 0..len {
        let replacement = match instructions.get(i) {
            Some(Instruction::StringConcat) => Instruction::CallFunction(CONCAT, Some(2)),
            Some(Instruction::Add) => Instruction::CallFunction(ADD, Some(2)),
            Some(Instruction::Mul) => Instruction::CallFunction(MUL, Some(2)),
            Some(Instruction::Slice) => Instruction::CallFunction(SLICE, Some(4)),
            Some(Instruction::In) => Instruction::CallFunction(IN, Some(2)),
            Some(Instruction::EmitRaw(raw)) => {
                let raw = *raw;
                let line = instructions.get_line(i).and_then(|l| u16::try_from(l).ok());
                if !end_added {
                    instructions.add(Instruction::Return);
                    end_added = true;
                }
                let at = instructions.len() as u32;
                for instr in [
                    // Safe: raw text is never escaped, inside `{% autoescape %}` too.
                    Instruction::LoadConst(Value::from_safe_string(raw.to_owned())),
                    Instruction::Emit,
                    Instruction::Jump(i + 1),
                ] {
                    match line {
                        Some(line) => instructions.add_with_line(instr, line),
                        None => instructions.add(instr),
                    };
                }
                Instruction::Jump(at)
            }
            _ => continue,
        };
        if let Some(slot) = instructions.get_mut(i) {
            *slot = replacement;
        }
    }
}

/// `a ~ b`: both as text, built only up to [`MAX_STRING_BYTES`].
fn concat(state: &State, a: Value, b: Value) -> Result<Value, Error> {
    let mut out = BoundedString::new(MAX_STRING_BYTES);
    write!(out, "{a}{b}").map_err(|_| bounds::string_too_long("~"))?;
    bounds::charge(state, out.buf.len())?;
    Ok(Value::from(out.buf))
}

fn is_sequence(v: &Value) -> bool {
    matches!(v.kind(), ValueKind::Seq | ValueKind::Iterable)
}

/// `a + b`: strings joined as by `~`, lists bounded in length; numbers by minijinja itself.
fn add(state: &State, a: Value, b: Value) -> Result<Value, Error> {
    if let (Some(x), Some(y)) = (a.as_str(), b.as_str()) {
        let len = x.len() + y.len();
        if len > MAX_STRING_BYTES {
            return Err(bounds::string_too_long("+"));
        }
        bounds::charge(state, len)?;
        return Ok(Value::from([x, y].concat()));
    }
    if is_sequence(&a) && is_sequence(&b) {
        let items = bounds::item_count(&a).saturating_add(bounds::item_count(&b));
        if items > MAX_ITEMS {
            return Err(bounds::too_many_items("+"));
        }
        // Lazily joined, but materialised now and then (minijinja copies long chains).
        bounds::charge(state, items.saturating_mul(8))?;
    }
    native(state, "a + b", minijinja::context! { a => a, b => b })
}

/// `a * b`: a repeated string or list checked before it is built; numbers by minijinja.
fn mul(state: &State, a: Value, b: Value) -> Result<Value, Error> {
    let seq = match (is_sequence(&a), is_sequence(&b)) {
        (true, false) => Some((&a, &b)),
        (false, true) => Some((&b, &a)),
        _ => None,
    };
    if let Some((seq, n)) = seq {
        if let Some(n) = n.as_usize() {
            let items = bounds::item_count(seq).checked_mul(n);
            let items = items.filter(|&i| i <= MAX_ITEMS);
            let items = items.ok_or_else(|| bounds::too_many_items("*"))?;
            bounds::charge(state, items.saturating_mul(bounds::ITEM_BYTES))?;
        }
    }
    let repeat = match (a.as_str(), b.as_str()) {
        (Some(s), None) => Some((s.len(), &b)),
        (None, Some(s)) => Some((s.len(), &a)),
        _ => None,
    };
    if let Some((len, n)) = repeat {
        if let Some(n) = n.as_usize() {
            let total = len.checked_mul(n).filter(|&t| t <= MAX_STRING_BYTES);
            let total = total.ok_or_else(|| bounds::string_too_long("*"))?;
            bounds::charge(state, total)?;
        }
    }
    native(state, "a * b", minijinja::context! { a => a, b => b })
}

/// `a[start:stop:step]`, the slice counted as built.
fn slice(state: &State, a: Value, start: Value, stop: Value, step: Value) -> Result<Value, Error> {
    let args = minijinja::context! { a => a, b => start, c => stop, d => step };
    let rv = native(state, "a[b:c:d]", args)?;
    bounds::charge_value(state, &rv)?;
    Ok(rv)
}

/// `value in container`: a value looked for in a string is text, sized first.
fn contains(state: &State, value: Value, container: Value) -> Result<Value, Error> {
    if container.as_str().is_some() && bounds::text_len(&value, MAX_STRING_BYTES).is_none() {
        return Err(bounds::string_too_long("in"));
    }
    native(
        state,
        "a in b",
        minijinja::context! { a => value, b => container },
    )
}

/// Runs minijinja's own operator (an expression compiled without the rewrite).
fn native(state: &State, expr: &str, args: Value) -> Result<Value, Error> {
    state.env().compile_expression(expr)?.eval(args)
}
