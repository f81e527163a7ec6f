//! What a request's answer shows of its outputs besides the text: log-probabilities,
//! the echoed prompt, token ids (vLLM's `return_token_ids`), and a scored-only prompt
//! (`max_tokens: 0` with `echo`) whose one sampled token is left out. The whole answer
//! and the stream go through the same [`Shaper`], so both show the same tokens.
//!
//! In a stream each chunk of a sample carries the tokens (ids, log-probabilities) that
//! arrived since its previous chunk, so every token is shown exactly once, in order, even
//! when a stop string holds text back. Chat puts `prompt_token_ids` at the top of the
//! answer (of the first chunk when streaming); completions put it in each choice (of the
//! choice's first chunk), as vLLM does.
//!
//! Must not know: HTTP, SSE framing, the engine's internals.

use rkv_engine::{GenerationOutput, TokenLogprob};
use rkv_model::Tokenizer;
use serde_json::{json, Map, Value};

use crate::logprobs::{chat_content, CompletionLogprobs};
use crate::params::Shown;
use crate::prompt::Prompt;
use crate::response::{choice, Endpoint};
use crate::state::random_u64;
use crate::tool_calls::{parse, CallFormat, ToolCall};

/// One request's way of showing its outputs.
pub struct Shaper {
    endpoint: Endpoint,
    tok: Tokenizer,
    /// Choice `i` answers prompt `i / n`.
    prompts: Vec<Prompt>,
    n: usize,
    shown: Shown,
    score_only: bool,
    /// Chat with tools: how the output's calls are found.
    calls: Option<CallFormat>,
}

/// A streamed sample's tokens not yet shown in a chunk.
#[derive(Debug, Default)]
pub struct Pending {
    ids: Vec<u32>,
    logprobs: Vec<TokenLogprob>,
    /// Completions: characters of token text shown so far (`text_offset`).
    offset: usize,
    /// Whether a chunk of this sample was sent.
    started: bool,
}

impl Pending {
    pub fn push(&mut self, id: u32, logprob: Option<TokenLogprob>) {
        self.ids.push(id);
        self.logprobs.extend(logprob);
    }
}

impl Shaper {
    pub fn new(
        endpoint: Endpoint,
        tok: Tokenizer,
        prompts: Vec<Prompt>,
        n: usize,
        shown: Shown,
        score_only: bool,
        calls: Option<CallFormat>,
    ) -> Self {
        Self {
            endpoint,
            tok,
            prompts,
            n: n.max(1),
            shown,
            score_only,
            calls,
        }
    }

    /// How calls are found in the output (chat with tools).
    pub fn calls(&self) -> Option<&CallFormat> {
        self.calls.as_ref()
    }

    /// The prompt choice `index` answers.
    fn prompt(&self, index: usize) -> Option<&Prompt> {
        self.prompts.get(index / self.n)
    }

    /// Whether the (chat) prompt opens a think block.
    pub fn opens_think(&self) -> bool {
        self.prompts.first().is_some_and(|p| p.opens_think)
    }

    /// Whether nothing generated is shown (`max_tokens: 0` with `echo`).
    pub fn score_only(&self) -> bool {
        self.score_only
    }

    fn prompt_text(&self, p: &Prompt) -> String {
        match &p.text {
            Some(t) => t.clone(),
            None => self.tok.decode(&p.tokens, false).unwrap_or_default(),
        }
    }

    /// One choice of a whole answer.
    pub fn choice(&self, index: usize, out: &GenerationOutput) -> Value {
        let empty = Prompt {
            tokens: Vec::new(),
            text: None,
            opens_think: false,
        };
        let prompt = self.prompt(index).unwrap_or(&empty);
        let mut c = choice(self.endpoint, index, out, prompt.opens_think);
        let generated: &[TokenLogprob] = match (&out.logprobs, self.score_only) {
            (Some(l), false) => l,
            _ => &[],
        };
        let ids: &[u32] = if self.score_only { &[] } else { &out.token_ids };
        match self.endpoint {
            Endpoint::Chat => {
                if let (Some(f), Some(text)) = (&self.calls, c["message"]["content"].as_str()) {
                    let parsed = parse(f.parser, text, &f.names);
                    if !parsed.calls.is_empty() {
                        c["message"]["content"] = json!(parsed.content);
                        c["message"]["tool_calls"] =
                            json!(parsed.calls.iter().map(whole_call).collect::<Vec<_>>());
                        c["finish_reason"] = json!("tool_calls");
                    }
                }
                if self.shown.logprobs.is_some() {
                    c["logprobs"] = json!({"content": chat_content(&self.tok, generated)});
                }
            }
            Endpoint::Completion => {
                if self.shown.echo {
                    let text = if self.score_only {
                        ""
                    } else {
                        out.text.as_str()
                    };
                    c["text"] = json!(format!("{}{text}", self.prompt_text(prompt)));
                }
                if self.score_only {
                    c["finish_reason"] = json!("length");
                }
                if self.shown.logprobs.is_some() {
                    let mut lp = CompletionLogprobs::at(0);
                    if self.shown.echo {
                        self.push_prompt(&mut lp, prompt, out);
                    }
                    for t in generated {
                        lp.push(&self.tok, t);
                    }
                    c["logprobs"] = lp.take();
                }
                if self.shown.token_ids {
                    c["prompt_token_ids"] = json!(prompt.tokens);
                }
            }
        }
        if self.shown.token_ids {
            c["token_ids"] = json!(ids);
        }
        c
    }

    /// An echoed prompt's tokens: the first bare, the others with theirs.
    fn push_prompt(&self, lp: &mut CompletionLogprobs, prompt: &Prompt, out: &GenerationOutput) {
        let Some(&first) = prompt.tokens.first() else {
            return;
        };
        lp.push_bare(&self.tok, first);
        for t in out.prompt_logprobs.iter().flatten() {
            lp.push(&self.tok, t);
        }
    }

    /// Fields at the top of a whole answer, or of a stream's first chunk.
    pub fn top_level(&self, m: &mut Map<String, Value>) {
        if let (Endpoint::Chat, true, Some(p)) =
            (self.endpoint, self.shown.token_ids, self.prompts.first())
        {
            m.insert("prompt_token_ids".into(), json!(p.tokens));
        }
    }

    /// Adds to a streamed chunk's choice the tokens of `p` since its last chunk.
    pub fn stream_choice(&self, index: usize, c: &mut Value, p: &mut Pending) {
        let first = !p.started;
        p.started = true;
        let ids = std::mem::take(&mut p.ids);
        let lps = std::mem::take(&mut p.logprobs);
        if self.shown.logprobs.is_some() {
            c["logprobs"] = match self.endpoint {
                Endpoint::Chat => json!({"content": chat_content(&self.tok, &lps)}),
                Endpoint::Completion => {
                    let mut lp = CompletionLogprobs::at(p.offset);
                    for t in &lps {
                        lp.push(&self.tok, t);
                    }
                    p.offset = lp.offset();
                    lp.take()
                }
            };
        }
        if self.shown.token_ids {
            if let (true, Endpoint::Completion, Some(prompt)) =
                (first, self.endpoint, self.prompt(index))
            {
                c["prompt_token_ids"] = json!(prompt.tokens);
            }
            c["token_ids"] = json!(ids);
        }
    }
}

/// A call as a whole answer shows it.
fn whole_call(c: &ToolCall) -> Value {
    json!({"id": call_id(), "type": "function",
           "function": {"name": c.name, "arguments": c.arguments}})
}

/// A new call id, `call_` and 24 hex digits.
pub fn call_id() -> String {
    format!(
        "call_{:024x}",
        u128::from(random_u64()) << 32 | u128::from(random_u64() as u32)
    )
}
