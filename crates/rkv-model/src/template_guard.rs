//! A chat template compiled into minijinja's instructions with every way it can grow a
//! value bounded. minijinja has no hook on its operators, so after compiling (through its
//! `unstable_machinery` interface) the instructions are rewritten: `~`, `+` and `*` become
//! calls of checked functions with the same stack effect, and each emission of raw template
//! text jumps to a trampoline that prints it through the counting formatter (so raw text in
//! an endless loop meets the output bound as printed values do).
//!
//! Owns: compiling a template source with Hugging Face's whitespace settings, the
//! instruction rewrite and the checked operators.
//! Must not know: messages, tokenizers, models, filters (see `template_filters`).

use std::fmt::Write as _;
use std::sync::Arc;

use minijinja::machinery::{
    CompiledTemplate, Instruction, Instructions, TemplateConfig, WhitespaceConfig,
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

/// Registers the checked operators the rewritten instructions call.
pub(crate) fn add_operators(env: &mut Environment<'_>) {
    env.add_function(CONCAT, concat);
    env.add_function(ADD, add);
    env.add_function(MUL, mul);
}

/// Compiles `source` as `transformers` renders chat templates (`trim_blocks`,
/// `lstrip_blocks`, no trailing newline kept, no auto-escaping), then bounds it.
// `SyntaxConfig` is a unit struct unless minijinja's `custom_syntax` is on: `default()`
// builds it either way.
#[allow(clippy::default_constructed_unit_structs)]
pub(crate) fn compile<'s>(name: &'s str, source: &'s str) -> Result<CompiledTemplate<'s>, Error> {
    let config = TemplateConfig {
        syntax_config: SyntaxConfig::default(),
        ws_config: WhitespaceConfig {
            keep_trailing_newline: false,
            lstrip_blocks: true,
            trim_blocks: true,
        },
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
            Some(Instruction::EmitRaw(raw)) => {
                let raw = *raw;
                let line = instructions.get_line(i).and_then(|l| u16::try_from(l).ok());
                if !end_added {
                    instructions.add(Instruction::Return);
                    end_added = true;
                }
                let at = instructions.len() as u32;
                for instr in [
                    Instruction::LoadConst(Value::from(raw)),
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
    }
    native(state, "a + b", a, b)
}

/// `a * b`: a repeated string checked before it is built; numbers by minijinja itself.
fn mul(state: &State, a: Value, b: Value) -> Result<Value, Error> {
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
    native(state, "a * b", a, b)
}

/// Runs minijinja's own operator (an expression compiled without the rewrite).
fn native(state: &State, expr: &str, a: Value, b: Value) -> Result<Value, Error> {
    let expr = state.env().compile_expression(expr)?;
    expr.eval(minijinja::context! { a => a, b => b })
}
