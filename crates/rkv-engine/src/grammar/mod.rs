//! Constrained decoding: a request's grammar (a JSON Schema, any JSON object, a regular
//! expression or a Lark grammar) compiled once when the request is submitted, and per
//! sequence a matcher that masks the logits before each draw (tokens that would leave
//! the grammar get `-inf`) and consumes each token drawn.
//!
//! The grammar engine is llguidance (<https://github.com/guidance-ai/llguidance>, the
//! engine behind vLLM's and llama.cpp's `guidance` backends): it walks the token trie
//! with an Earley parser over lazily built lexer automata, with no per-schema index over
//! the vocabulary to build first. Measured by `scripts/bench_grammar.sh` (BENCHMARKS.md,
//! 2-core Xeon): a JSON Schema compiles in 0.6 ms; the token trie takes 0.14 s for
//! SmolLM2-135M's 49,152 logits and 0.55 s for Qwen2.5-Coder-1.5B's 151,936, once per
//! engine; a step's mask, applied and consumed, costs 0.2 and 0.44 ms per token, 2.2% and
//! 0.7% of a decode step, so it runs inline rather than overlapped with the forward.
//!
//! End of sequence: EOS is in the mask only where the grammar accepts the output as
//! complete; once no token can extend it (a JSON value's closing brace) the sequence
//! ends with `stop` without drawing EOS. Log-probabilities stay those of the raw logits,
//! before the mask (as vLLM reports them).
//!
//! Owns: grammar specs, their compilation, the per-sequence matcher and masking.
//! Must not know: HTTP, wire formats (`response_format` is the server's), sampling maths.

mod tok_env;

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use rkv_model::Tokenizer;
use serde_json::{json, Value};
use thiserror::Error;

pub use tok_env::RkvTokEnv;

/// What a request's output must match.
#[derive(Debug, Clone, PartialEq)]
pub enum GrammarSpec {
    /// Any JSON object (OpenAI's `response_format: {"type": "json_object"}`).
    JsonObject,
    /// A JSON Schema (the subset llguidance enforces; see docs/serving.md).
    JsonSchema(Value),
    /// A regular expression (Rust `regex` syntax, no look-around) the whole output
    /// matches.
    Regex(String),
    /// A Lark grammar in llguidance's dialect.
    Lark(String),
}

/// A grammar that cannot be enforced, or the token environment that cannot be built.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum GrammarError {
    #[error("{0}")]
    Invalid(String),
    #[error("constrained decoding is unavailable for this tokenizer: {0}")]
    Unavailable(String),
    /// A running matcher failed (it should not: every token drawn was in its mask).
    #[error("the grammar failed: {0}")]
    Failed(String),
}

/// JSON Schemas without their own `x-guidance` options are enforced as compact JSON:
/// no whitespace between tokens of the value. llguidance's default (any run of
/// whitespace anywhere) lets a small model spend its whole `max_tokens` on newlines.
const JSON_OPTIONS: &str = "x-guidance";

/// Compiles grammars for one model. The token environment (the trie of the vocabulary
/// and llguidance's token-class slices) is built on first use, once, and shared by every
/// grammar compiled here. Cheap to clone.
#[derive(Clone)]
pub struct Grammars {
    inner: Arc<GrammarsInner>,
}

struct GrammarsInner {
    tokenizer: Tokenizer,
    n_vocab: usize,
    factory: OnceLock<Result<ParserFactory, GrammarError>>,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammars")
            .field("n_vocab", &self.inner.n_vocab)
            .field("built", &self.inner.factory.get().is_some())
            .finish()
    }
}

impl Grammars {
    /// Grammars over `tokenizer` for a model with `n_vocab` logits.
    pub fn new(tokenizer: Tokenizer, n_vocab: usize) -> Self {
        Self {
            inner: Arc::new(GrammarsInner {
                tokenizer,
                n_vocab,
                factory: OnceLock::new(),
            }),
        }
    }

    fn factory(&self) -> Result<&ParserFactory, GrammarError> {
        let built = self.inner.factory.get_or_init(|| {
            let env = RkvTokEnv::build(&self.inner.tokenizer, self.inner.n_vocab)
                .map_err(GrammarError::Unavailable)?;
            let mut f = ParserFactory::new_simple(&env)
                .map_err(|e| GrammarError::Unavailable(e.to_string()))?;
            f.quiet();
            // Errors name the problem, not the whole grammar and parser state.
            f.limits_mut().verbose_errors = false;
            Ok(f)
        });
        built.as_ref().map_err(Clone::clone)
    }

    /// Builds the token environment now rather than at the first grammar (a server may
    /// want to pay it at start).
    pub fn warm(&self) -> Result<(), GrammarError> {
        self.factory().map(|_| ())
    }

    /// Compiles `spec`. A grammar that is not valid, uses what llguidance cannot
    /// enforce, or admits no output at all is refused here, before anything runs.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Grammar, GrammarError> {
        let factory = self.factory()?;
        let top = match spec {
            GrammarSpec::JsonObject => {
                TopLevelGrammar::from_json_schema(compact(json!({"type": "object"})))
            }
            GrammarSpec::JsonSchema(s) => {
                if !(s.is_object() || s.is_boolean()) {
                    return Err(GrammarError::Invalid(
                        "a JSON Schema is an object or a boolean".into(),
                    ));
                }
                // Not JSON Schema at all (`"type": "objekt"`) is said as such, before
                // llguidance says what it cannot enforce.
                jsonschema::meta::validate(s)
                    .map_err(|e| GrammarError::Invalid(format!("not a valid JSON Schema: {e}")))?;
                TopLevelGrammar::from_json_schema(compact(s.clone()))
            }
            GrammarSpec::Regex(r) => TopLevelGrammar::from_regex(r),
            GrammarSpec::Lark(l) => TopLevelGrammar::from_lark(l.clone()),
        };
        let parser = factory
            .create_parser(top)
            .map_err(|e| GrammarError::Invalid(e.to_string()))?;
        let proto = Matcher::new(Ok(parser));
        // Some grammars fail only when asked for their first mask (one that matches
        // nothing): ask now, on a copy.
        let mut probe = proto.clone();
        probe
            .compute_mask()
            .map_err(|e| GrammarError::Invalid(e.to_string()))?;
        Ok(Grammar {
            proto,
            n_vocab: self.inner.n_vocab,
        })
    }
}

/// `schema` with compact JSON whitespace unless it sets its own `x-guidance` options.
fn compact(mut schema: Value) -> Value {
    if let Some(obj) = schema.as_object_mut() {
        if !obj.contains_key(JSON_OPTIONS) {
            obj.insert(JSON_OPTIONS.into(), json!({"whitespace_flexible": false}));
        }
    }
    schema
}

/// A compiled grammar, in its start state: what a request carries. Cloning is cheap
/// (the compiled grammar and lexer are shared).
#[derive(Clone)]
pub struct Grammar {
    proto: Matcher,
    n_vocab: usize,
}

impl std::fmt::Debug for Grammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammar")
            .field("n_vocab", &self.n_vocab)
            .finish_non_exhaustive()
    }
}

impl Grammar {
    /// The logits width it was compiled for.
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// A matcher at the start of the output.
    pub fn start(&self) -> GrammarState {
        GrammarState {
            matcher: self.proto.clone(),
            masked: Vec::new(),
            seconds: 0.0,
        }
    }
}

/// One sequence's place in its grammar.
pub struct GrammarState {
    matcher: Matcher,
    /// The last masked logits: [n_vocab].
    masked: Vec<f32>,
    /// Time spent computing masks and consuming tokens.
    seconds: f64,
}

impl GrammarState {
    /// `logits` ([n_vocab]) with every token the grammar forbids next set to `-inf`.
    /// EOS stays only where the output is complete.
    pub fn mask(&mut self, logits: &[f32]) -> Result<&[f32], GrammarError> {
        let t = Instant::now();
        let mask = self
            .matcher
            .compute_mask()
            .map_err(|e| GrammarError::Failed(format!("no next token: {e}")))?;
        self.masked.clear();
        self.masked.extend_from_slice(logits);
        let words = mask.as_slice();
        for (w, chunk) in self.masked.chunks_mut(32).enumerate() {
            let bits = words.get(w).copied().unwrap_or(0);
            if bits == u32::MAX {
                continue;
            }
            for (j, x) in chunk.iter_mut().enumerate() {
                if bits & (1 << j) == 0 {
                    *x = f32::NEG_INFINITY;
                }
            }
        }
        self.seconds += t.elapsed().as_secs_f64();
        Ok(&self.masked)
    }

    /// Moves past `token` (one the last mask allowed). Returns whether the output is
    /// now complete: nothing can extend it (or it ended with EOS where it may).
    pub fn consume(&mut self, token: u32) -> Result<bool, GrammarError> {
        let t = Instant::now();
        self.matcher
            .consume_token(token)
            .map_err(|e| GrammarError::Failed(format!("token {token}: {e}")))?;
        self.seconds += t.elapsed().as_secs_f64();
        Ok(self.matcher.is_stopped())
    }

    /// Seconds spent on masks and tokens so far.
    pub fn seconds(&self) -> f64 {
        self.seconds
    }
}
