//! The math answer grader: a port of the Qwen2.5-Math evaluation toolkit that R-KV ships in
//! `evaluation/` (`parser.py`: `extract_answer`, `strip_string`, `choice_answer_clean`;
//! `grader.py`: `math_equal`, `symbolic_equal`; `eval_math.py`: stop words and the
//! multiple-choice step), with the reference's quirks kept so that verdicts agree with
//! the official scores.

pub mod choice;
pub mod equal;
pub mod extract;
pub mod latex;
pub mod normalize;
pub mod outputs;
pub mod pyfloat;
pub mod units;
pub mod verdict;
pub mod word_number;

pub use choice::postprocess_choice;
pub use equal::math_equal;
pub use extract::{extract_answer, extract_answer_once};
pub use normalize::strip_string;
pub use outputs::{grade_outputs, GradeReport, LineVerdict, Summary};
pub use verdict::{gold_from_record, grade, Verdict};
