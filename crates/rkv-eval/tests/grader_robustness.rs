//! The grader sees arbitrary model text: no input may panic or overflow the stack.

use proptest::prelude::*;
use rkv_eval::grade::{extract_answer, gold_from_record, grade, math_equal, strip_string};

fn latexish() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "\\boxed{",
        "}",
        "{",
        "(",
        ")",
        "[",
        "]",
        "\\frac",
        "\\dfrac",
        "\\sqrt",
        "\\pi",
        "^",
        "_",
        "x",
        "y=",
        "=",
        ",",
        "1",
        "23",
        ".5",
        "-",
        "+",
        "\\cdot",
        "\\times",
        "\\left(",
        "\\right)",
        "\\text{",
        "cm",
        " ",
        "\n",
        "$",
        "\\%",
        "%",
        "\\infty",
        "\\begin{pmatrix}",
        "\\\\",
        "&",
        "\\end{pmatrix}",
        "The answer is ",
        "five",
        "and",
        "!",
        "|",
        "\\sin",
        "\\log_",
        "<",
        "\\ge",
        "</s>",
        "A",
        "(B)",
        "#### ",
        "e",
        "i",
        "j",
        "\\{",
        "\\}",
        "°",
        "−",
        "答案是",
    ]);
    prop::collection::vec(pieces, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn arbitrary_text_never_panics(out in any::<String>(), gold in any::<String>()) {
        let _ = grade(&out, &gold);
        let _ = strip_string(&out);
        let _ = gold_from_record(Some(&gold), Some(&out));
    }

    #[test]
    fn latex_like_text_never_panics(out in latexish(), gold in latexish()) {
        let v = grade(&out, &gold);
        prop_assert!(v.extracted.is_some() || v.extracted.is_none());
        let _ = math_equal(&out, &gold);
        let _ = extract_answer(&out);
    }

    #[test]
    fn a_boxed_answer_matches_itself(ans in "[0-9]{1,6}") {
        let out = format!("Thus $\\boxed{{{ans}}}$.");
        let gold = gold_from_record(Some(&ans), None).unwrap_or_default();
        prop_assert!(grade(&out, &gold).correct);
    }
}

#[test]
fn pathological_nesting() {
    let n = 20_000;
    let cases = [
        "(".repeat(n) + &")".repeat(n),
        "x".repeat(n),
        "-".repeat(n) + "1",
        "\\frac{".repeat(n / 10),
        "\\boxed{".repeat(n) + &"}".repeat(n),
        "(".repeat(n) + "1,2" + &")".repeat(n),
        "[(".repeat(n / 2) + "1,2" + &")]".repeat(n / 2),
        "1+".repeat(n) + "1",
        "x(".repeat(200) + "1",
        "\\sqrt{".repeat(n / 10) + "2" + &"}".repeat(n / 10),
        "2^".repeat(n / 2) + "2",
    ];
    for c in &cases {
        for gold in [c.as_str(), "1", "(1,2)"] {
            let _ = grade(c, gold);
            let _ = math_equal(c, gold);
            let _ = math_equal(gold, c);
        }
    }
}
