//! Answer extraction: `eval_math.py`'s stop-word cut and `parser.py`'s `extract_answer`
//! (data_name `math`, prompt type `cot`), then `run_execute`'s second `strip_string`.
//!
//! Order of precedence, as in the reference: Minerva's `final answer is $..$. I hope`, the
//! content of the *last* `boxed` (balanced braces; without a brace, up to the next `$`),
//! the text after the last `he answer is`, after the last `final answer is`, after the
//! first `答案是` (to the next blank line), else the last number (commas removed).

use super::normalize::strip_string;
use regex::Regex;
use std::sync::OnceLock;

/// `eval_math.py`'s default `--stop_words`.
pub const STOP_WORDS: [&str; 4] = ["</s>", "<|im_end|>", "<|endoftext|>", "\n题目："];

/// Cut the output at each stop word in turn (and strip it, only where one was found).
pub fn cut_at_stop_words(output: &str) -> String {
    let mut code = output.to_string();
    for stop in STOP_WORDS {
        if let Some(pos) = code.find(stop) {
            code = code[..pos].trim().to_string();
        }
    }
    code
}

/// The content of the last `boxed`: balanced braces (an unclosed brace takes the rest), or
/// without a brace the text up to the next `$`. `""` when nothing follows `boxed`.
pub fn find_box(text: &str) -> String {
    let ans = text.rsplit("boxed").next().unwrap_or_default();
    if ans.is_empty() {
        return String::new();
    }
    if let Some(body) = ans.strip_prefix('{') {
        let mut depth = 1usize;
        let mut out = String::new();
        for c in body.chars() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            out.push(c);
        }
        out
    } else {
        ans.split('$').next().unwrap_or_default().trim().to_string()
    }
}

fn last_number(text: &str) -> String {
    static NUM: OnceLock<Option<Regex>> = OnceLock::new();
    let re = NUM.get_or_init(|| Regex::new(r"-?\d*\.?\d+").ok());
    let cleaned = text.replace(',', "");
    re.as_ref()
        .and_then(|re| re.find_iter(&cleaned).last())
        .map(|m| m.as_str().to_string())
        .unwrap_or_default()
}

fn newline_runs() -> Option<&'static Regex> {
    static NL: OnceLock<Option<Regex>> = OnceLock::new();
    NL.get_or_init(|| Regex::new(r"\n\s*").ok()).as_ref()
}

/// The raw answer text before the final clean-up (the branch chain of `extract_answer`).
/// `None` stands for the reference's early `return ""` on a trailing `boxed`.
fn raw_answer(text: &str) -> Option<String> {
    if text.contains("final answer is $") && text.contains("$. I hope") {
        let tail = text.split_once("final answer is $").map_or("", |(_, t)| t);
        let pred = tail.split_once("$. I hope").map_or(tail, |(h, _)| h);
        return Some(pred.trim().to_string());
    }
    if text.contains("boxed") {
        if text.ends_with("boxed") {
            return None;
        }
        return Some(find_box(text));
    }
    for phrase in ["he answer is", "final answer is"] {
        if text.contains(phrase) {
            let tail = text.rsplit(phrase).next().unwrap_or_default();
            return Some(tail.trim().to_string());
        }
    }
    if let Some((_, tail)) = text.split_once("答案是") {
        let first = tail.trim().split("\n\n").next().unwrap_or_default();
        return Some(first.trim().to_string());
    }
    Some(last_number(text))
}

/// `extract_answer(pred_str, "math")`: the extracted answer after one `strip_string`.
pub fn extract_answer_once(output: &str) -> String {
    let text = output.replace("\u{43a}\u{438}", "");
    let Some(mut pred) = raw_answer(&text) else {
        return String::new();
    };
    if let Some(re) = newline_runs() {
        pred = re.replace_all(&pred, "").into_owned();
    }
    if let Some(rest) = pred.strip_prefix(':') {
        pred = rest.to_string();
    }
    if let Some(rest) = pred.strip_suffix('.') {
        pred = rest.to_string();
    }
    if let Some(rest) = pred.strip_suffix('/') {
        pred = rest.to_string();
    }
    strip_string(&pred)
}

/// The prediction the reference grades (before the multiple-choice step): the output is cut
/// at the stop words; an empty result gives `None` (`run_execute` returns no prediction);
/// otherwise `strip_string(extract_answer(output))`.
pub fn extract_answer(output: &str) -> Option<String> {
    extract_from_code(&cut_at_stop_words(output))
}

/// [`extract_answer`] of an output already cut at the stop words.
pub(super) fn extract_from_code(code: &str) -> Option<String> {
    if code.is_empty() {
        return None;
    }
    Some(strip_string(&extract_answer_once(code)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(s: &str) -> Option<String> {
        extract_answer(s)
    }

    #[test]
    fn boxed() {
        assert_eq!(find_box("a \\boxed{\\frac{1}{2}} b"), "\\frac{1}{2}");
        assert_eq!(find_box("\\boxed{3} then \\boxed{4}"), "4");
        assert_eq!(find_box("\\boxed{\\{1,2\\}"), "\\{1,2\\}");
        assert_eq!(find_box("\\boxed 12. $x$"), "12.");
        assert_eq!(
            ex("First \\boxed{3}, then corrected: \\boxed{4}").as_deref(),
            Some("4")
        );
        assert_eq!(ex("The answer is \\boxed").as_deref(), Some(""));
        assert_eq!(
            ex("**Final Answer**\n\\[\n\\boxed{\n\\frac{3}{4}\n}\n\\]").as_deref(),
            Some("\\frac{3}{4}")
        );
    }

    #[test]
    fn phrases_and_numbers() {
        assert_eq!(ex("So the answer is: 7").as_deref(), Some("7"));
        assert_eq!(ex("the answer is 12 apples").as_deref(), Some("12"));
        assert_eq!(
            ex("Final Answer: The final answer is $16$. I hope it is correct.").as_deref(),
            Some("16")
        );
        assert_eq!(ex("答案是 8\n\n解析").as_deref(), Some("8"));
        assert_eq!(ex("Total: 1,234 items").as_deref(), Some("1234"));
        assert_eq!(ex("result .5").as_deref(), Some("0.5"));
        assert_eq!(ex("no numbers here").as_deref(), Some(""));
        assert_eq!(ex("3/4").as_deref(), Some("4"));
    }

    #[test]
    fn stop_words_and_empty() {
        assert_eq!(ex(""), None);
        assert_eq!(ex("<|im_end|> 5"), None);
        assert_eq!(ex("\\boxed{5}</s>\\boxed{6}").as_deref(), Some("5"));
        assert_eq!(ex("   ").as_deref(), Some(""));
    }
}
