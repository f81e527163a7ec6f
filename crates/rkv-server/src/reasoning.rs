//! Splits a thinking model's output into reasoning and answer: the text inside
//! `<think>...</think>` becomes `reasoning_content`, the rest `content` (the field
//! DeepSeek's API and vLLM's reasoning parsers use).
//!
//! A think block is recognised only at the start of the output (after whitespace), or
//! from the very first token when the rendered prompt itself ends by opening `<think>`
//! (DeepSeek-R1's and Qwen3's templates do), in which case the model emits only the
//! closing tag. On a whole text, a lone `</think>` also marks what precedes it as
//! reasoning; a stream cannot take back text it sent, so there the prompt must say so.
//! Tags split across stream chunks are held back until they are complete.
//!
//! Must not know: HTTP, the engine, tokenizers.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// One piece of output, divided.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Split {
    pub reasoning: String,
    pub content: String,
}

impl Split {
    fn append(&mut self, other: Split) {
        self.reasoning.push_str(&other.reasoning);
        self.content.push_str(&other.content);
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Nothing but whitespace seen: a `<think>` may still open.
    Before,
    Thinking,
    /// Past the think block, or past the first visible content: all content from here.
    After,
}

/// Divides a stream of text chunks.
#[derive(Debug, Clone)]
pub struct ReasoningSplitter {
    state: State,
    held: String,
    saw_reasoning: bool,
}

impl ReasoningSplitter {
    /// `starts_thinking`: the prompt opened a think block (see [`prompt_opens_think`]).
    pub fn new(starts_thinking: bool) -> Self {
        Self {
            state: if starts_thinking {
                State::Thinking
            } else {
                State::Before
            },
            held: String::new(),
            saw_reasoning: starts_thinking,
        }
    }

    /// Whether any of the output was (or is) in a think block.
    pub fn saw_reasoning(&self) -> bool {
        self.saw_reasoning
    }

    /// The next chunk; what can be told apart now (a partial tag waits for more).
    pub fn push(&mut self, text: &str) -> Split {
        let mut out = Split::default();
        let buf = std::mem::take(&mut self.held) + text;
        let mut rest = buf.as_str();
        loop {
            match self.state {
                State::After => {
                    out.content.push_str(rest);
                    break;
                }
                State::Before => {
                    let trimmed = rest.trim_start();
                    if let Some(after) = trimmed.strip_prefix(OPEN) {
                        self.state = State::Thinking;
                        self.saw_reasoning = true;
                        rest = after;
                    } else if OPEN.starts_with(trimmed) {
                        // Whitespace and perhaps the start of the tag: wait.
                        self.held = rest.to_string();
                        break;
                    } else {
                        self.state = State::After;
                    }
                }
                State::Thinking => {
                    if let Some(p) = rest.find(CLOSE) {
                        out.reasoning.push_str(&rest[..p]);
                        rest = &rest[p + CLOSE.len()..];
                        self.state = State::After;
                    } else {
                        let keep = partial_tag_suffix(rest, CLOSE);
                        let (now, later) = rest.split_at(rest.len() - keep);
                        out.reasoning.push_str(now);
                        self.held = later.to_string();
                        break;
                    }
                }
            }
        }
        out
    }

    /// The end of the output: whatever was held back goes where it stands.
    pub fn finish(&mut self) -> Split {
        let held = std::mem::take(&mut self.held);
        match self.state {
            State::Thinking => Split {
                reasoning: held,
                content: String::new(),
            },
            State::Before | State::After => Split {
                reasoning: String::new(),
                content: held,
            },
        }
    }
}

/// Length of the longest proper prefix of `tag` that `s` ends with (tags are ASCII, so
/// the cut is on a character boundary).
fn partial_tag_suffix(s: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&k| s.ends_with(&tag[..k]))
        .unwrap_or(0)
}

/// Whether a rendered prompt ends by opening a think block.
pub fn prompt_opens_think(rendered: &str) -> bool {
    rendered.trim_end().ends_with(OPEN)
}

/// Divides a whole output: `(reasoning, content)`, reasoning `None` when the output had
/// no think block.
pub fn split_reasoning(text: &str, starts_thinking: bool) -> (Option<String>, String) {
    let lone_close = text.find(CLOSE).is_some_and(|c| !text[..c].contains(OPEN));
    let mut s = ReasoningSplitter::new(starts_thinking || lone_close);
    let mut out = s.push(text);
    out.append(s.finish());
    let reasoning = s.saw_reasoning().then_some(out.reasoning);
    (reasoning, out.content)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `chunks` one by one and joins the pieces.
    fn stream(chunks: &[&str], starts: bool) -> Split {
        let mut s = ReasoningSplitter::new(starts);
        let mut out = Split::default();
        for c in chunks {
            out.append(s.push(c));
        }
        out.append(s.finish());
        out
    }

    #[test]
    fn whole_block_then_answer() {
        let (r, c) = split_reasoning("<think>\nlet me see</think>\n\nIt is 4.", false);
        assert_eq!(r.as_deref(), Some("\nlet me see"));
        assert_eq!(c, "\n\nIt is 4.");
    }

    #[test]
    fn no_tags_is_all_content() {
        let (r, c) = split_reasoning("Just an answer.", false);
        assert_eq!(r, None);
        assert_eq!(c, "Just an answer.");
        let s = stream(&["Just ", "an <", "answer."], false);
        assert_eq!(s.content, "Just an <answer.");
        assert_eq!(s.reasoning, "");
    }

    #[test]
    fn lone_closing_tag_on_a_whole_text() {
        let (r, c) = split_reasoning("so 2+2=4</think>The answer is 4.", false);
        assert_eq!(r.as_deref(), Some("so 2+2=4"));
        assert_eq!(c, "The answer is 4.");
    }

    #[test]
    fn prompt_that_opens_the_block() {
        assert!(prompt_opens_think("<｜User｜>hi<｜Assistant｜><think>\n"));
        assert!(!prompt_opens_think("<|im_start|>assistant\n"));
        assert!(!prompt_opens_think(
            "use <think> tags</think> please\nassistant:"
        ));
        let s = stream(&["hmm, ", "2+2", "</th", "ink>", "4"], true);
        assert_eq!(s.reasoning, "hmm, 2+2");
        assert_eq!(s.content, "4");
    }

    #[test]
    fn tags_split_across_chunks() {
        let s = stream(&["<", "thi", "nk>a", "b</", "think", ">c"], false);
        assert_eq!(s.reasoning, "ab");
        assert_eq!(s.content, "c");
        // Every split point of one text gives the same division.
        let text = "  <think>x < y </thinking? no</think>done";
        for i in 0..=text.len() {
            let s = stream(&[&text[..i], &text[i..]], false);
            assert_eq!(s.reasoning, "x < y </thinking? no", "split at {i}");
            assert_eq!(s.content, "done", "split at {i}");
        }
    }

    #[test]
    fn a_think_tag_after_content_is_content() {
        let s = stream(&["Answer: ", "<think>x</think>"], false);
        assert_eq!(s.content, "Answer: <think>x</think>");
        assert_eq!(s.reasoning, "");
    }

    #[test]
    fn cut_off_while_thinking() {
        let s = stream(&["<think>still going</"], false);
        assert_eq!(s.reasoning, "still going</");
        assert_eq!(s.content, "");
    }

    #[test]
    fn leading_whitespace_then_content_is_kept() {
        let s = stream(&["\n", " hello"], false);
        assert_eq!(s.content, "\n hello");
        let s = stream(&["\n"], false);
        assert_eq!(s.content, "\n");
    }
}
