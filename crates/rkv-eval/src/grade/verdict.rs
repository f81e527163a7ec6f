//! One graded answer: the gold answer of a record (as `parse_ground_truth` and `evaluate.py`
//! normalise it) and the verdict on one output (`run_execute`, the multiple-choice step of
//! `eval_math.py`, then `math_equal`).

use super::choice::postprocess_choice;
use super::equal::math_equal;
use super::extract::{cut_at_stop_words, extract_answer_once, extract_from_code};
use super::normalize::strip_string;
use serde::{Deserialize, Serialize};

/// The verdict on one output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// The prediction that was graded (`None`: empty output, no prediction).
    pub extracted: Option<String>,
    /// The normalised gold answer.
    pub gold: String,
    /// `math_equal(extracted, gold)`; always false without a prediction.
    pub correct: bool,
}

/// The normalised gold answer of a record.
///
/// - `answer` with `####` (GSM8K): the text after it through `strip_string` twice (once in
///   `parse_ground_truth`, once in `evaluate.py`).
/// - other `answer`: normalised as the reference normalises `\boxed{answer}` (MATH-style
///   gold, one `strip_string`; the stress set was graded this way). Normalising once
///   matters: `x \in [-2,7]` keeps its `x\in` (the space hides it from the first pass),
///   exactly as the gold extracted from the MATH solution does. For AIME's integer answers
///   once and twice agree.
/// - no `answer`: the normalised content of the last `\boxed{}` of `solution`.
///
/// `None` when the record has neither.
pub fn gold_from_record(answer: Option<&str>, solution: Option<&str>) -> Option<String> {
    if let Some(a) = answer {
        if let Some((_, after)) = a.rsplit_once("####") {
            return Some(strip_string(&strip_string(after)));
        }
        return Some(extract_answer_once(&format!("\\boxed{{{a}}}")));
    }
    solution.map(|s| extract_answer_once(s.trim()))
}

/// Grade one model output against a normalised gold answer.
pub fn grade(output: &str, gold: &str) -> Verdict {
    let code = cut_at_stop_words(output);
    let pred = postprocess_choice(extract_from_code(&code), &code, gold);
    let correct = pred.as_deref().is_some_and(|p| math_equal(p, gold));
    Verdict {
        extracted: pred,
        gold: gold.to_string(),
        correct,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gold_sources() {
        assert_eq!(
            gold_from_record(Some("\\left( 3, \\frac{\\pi}{2} \\right)"), None).as_deref(),
            Some("(3,\\frac{\\pi}{2})")
        );
        assert_eq!(
            gold_from_record(Some("He pays 3*4 = 12\n#### 12"), None).as_deref(),
            Some("12")
        );
        assert_eq!(
            gold_from_record(None, Some("So $x = \\boxed{\\dfrac{1}{2}}$.")).as_deref(),
            Some("\\frac{1}{2}")
        );
        assert_eq!(gold_from_record(None, None), None);
        assert_eq!(
            gold_from_record(Some("x \\in [-2,7]"), None).as_deref(),
            Some("x\\in[-2,7]")
        );
        assert_eq!(gold_from_record(Some("204"), None).as_deref(), Some("204"));
    }

    #[test]
    fn verdicts() {
        let v = grade(
            "Therefore, the final answer is $\\boxed{\\dfrac{14}{3}}$.",
            "4\\frac{2}{3}",
        );
        assert_eq!(v.extracted.as_deref(), Some("\\frac{14}{3}"));
        assert!(!v.correct);
        let v = grade("", "5");
        assert_eq!(v.extracted, None);
        assert!(!v.correct);
        let v = grade(
            "Therefore, the final answer is $\\boxed{\\textbf{(B)}}$.",
            "B",
        );
        assert_eq!(v.extracted.as_deref(), Some("T"));
        assert!(!v.correct);
        assert!(grade("x = \\boxed{5}", "5").correct);
    }
}
