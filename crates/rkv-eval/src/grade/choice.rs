//! Multiple-choice handling: the two `choice_answer_clean` functions (the one in
//! `parser.py`, used by `eval_math.py`, and the shorter one in `grader.py`, used by
//! `math_equal`) and `eval_math.py`'s post-processing of predictions whose gold answer is a
//! choice letter. Quirk kept: when the gold is `A`..`E` and the prediction is not, the
//! prediction becomes the cleaned *first character* of the output (`code[j]` with `j = 0`).

use regex::Regex;
use std::sync::OnceLock;

const LETTERS: [&str; 5] = ["A", "B", "C", "D", "E"];

fn letter_re() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"\b(A|B|C|D|E)\b").ok())
        .as_ref()
}

fn letters_in(s: &str) -> Vec<String> {
    let upper = s.to_uppercase();
    letter_re()
        .map(|re| {
            re.find_iter(&upper)
                .map(|m| m.as_str().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn py_strip_chars<'a>(s: &'a str, chars: &[char]) -> &'a str {
    s.trim_matches(|c| chars.contains(&c))
}

/// `grader.py`'s `choice_answer_clean`: the last standalone letter `A`..`E`, else the text.
pub fn choice_answer_clean_grader(pred: &str) -> String {
    let p = pred
        .trim_matches('\n')
        .trim_end_matches('.')
        .trim_end_matches('/');
    let p = p.trim_matches(' ').trim_start_matches(':');
    let found = letters_in(p);
    let chosen = match found.last() {
        Some(l) => l.clone(),
        None => py_strip_chars(p.trim(), &['.']).to_string(),
    };
    chosen
        .trim_end_matches('.')
        .trim_end_matches('/')
        .to_string()
}

/// `parser.py`'s `choice_answer_clean` (few-shot aware: the text after the last
/// `answer is`/`choice is` and then the first letter, else the last letter).
pub fn choice_answer_clean_parser(pred: &str) -> String {
    let mut p = pred.trim_matches('\n').to_string();
    let icl = ["choice is", "answer is"]
        .iter()
        .any(|t| p.matches(t).count() > 1);
    if icl {
        p = p.split("\n\n").next().unwrap_or_default().to_string();
    }
    let mut answer_flag = false;
    let pieces: Vec<&str> = split_triggers(&p);
    if pieces.len() > 1 {
        answer_flag = true;
        p = pieces.last().copied().unwrap_or_default().to_string();
    }
    let q = p
        .trim_matches('\n')
        .trim_end_matches('.')
        .trim_end_matches('/');
    let q = q.trim_matches(' ').trim_start_matches(':');
    let found = letters_in(q);
    let list: Vec<String> = if found.is_empty() {
        vec![py_strip_chars(q.trim(), &['.']).to_string()]
    } else {
        found
    };
    let chosen = if answer_flag {
        list.first()
    } else {
        list.last()
    };
    let chosen = chosen.cloned().unwrap_or_default();
    chosen
        .trim_end_matches('.')
        .trim_end_matches('/')
        .to_string()
}

/// `re.split("choice is|answer is", s)`.
fn split_triggers(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s;
    loop {
        let next = ["choice is", "answer is"]
            .iter()
            .filter_map(|t| rest.find(t).map(|i| (i, t.len())))
            .min();
        match next {
            Some((i, len)) => {
                out.push(&rest[..i]);
                rest = &rest[i + len..];
            }
            None => {
                out.push(rest);
                return out;
            }
        }
    }
}

/// `eval_math.py`'s `is_multi_choice`: every character is one of `A`..`E` (so `""` is).
pub fn is_multi_choice(answer: &str) -> bool {
    answer.chars().all(|c| ('A'..='E').contains(&c))
}

/// The multiple-choice step of `eval_math.py`, applied to the prediction `pred` of the
/// (stop-word-cut) output `code` given the normalised gold answer.
pub fn postprocess_choice(pred: Option<String>, code: &str, gold: &str) -> Option<String> {
    let pred_is_letter = pred.as_deref().is_some_and(|p| LETTERS.contains(&p));
    if LETTERS.contains(&gold) && !pred_is_letter {
        // `code[0]`: the reference raises on an empty output; that case stays ungraded.
        let first = code.chars().next()?;
        return Some(choice_answer_clean_parser(&first.to_string()));
    }
    if is_multi_choice(gold) && !pred.as_deref().is_some_and(is_multi_choice) {
        let p = pred.unwrap_or_default();
        return Some(p.chars().filter(|c| ('A'..='E').contains(c)).collect());
    }
    pred
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleaners() {
        assert_eq!(choice_answer_clean_grader("(C)"), "C");
        assert_eq!(choice_answer_clean_grader("the answer is b."), "B");
        assert_eq!(choice_answer_clean_grader("42."), "42");
        assert_eq!(choice_answer_clean_parser("T"), "T");
        assert_eq!(choice_answer_clean_parser("a"), "A");
        assert_eq!(choice_answer_clean_parser("The answer is (B) or C"), "B");
    }

    #[test]
    fn postprocess() {
        let out = "Therefore, $\\boxed{\\textbf{(B)}}$";
        assert_eq!(
            postprocess_choice(Some("textbf{(B)}".into()), out, "B").as_deref(),
            Some("T")
        );
        assert_eq!(
            postprocess_choice(Some("C".into()), out, "C").as_deref(),
            Some("C")
        );
        assert_eq!(
            postprocess_choice(Some("East".into()), out, "").as_deref(),
            Some("E")
        );
        assert_eq!(postprocess_choice(None, "", "").as_deref(), Some(""));
        assert_eq!(postprocess_choice(None, "", "B"), None);
        assert_eq!(
            postprocess_choice(Some("5".into()), out, "5").as_deref(),
            Some("5")
        );
    }
}
