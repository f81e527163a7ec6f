//! rkv-eval: datasets, answer extraction and grading, fidelity metrics and reports, and
//! the passkey-retrieval generator ([`passkey`]).
//!
//! The math answer grader lives in [`grade`]: a Rust port of the Qwen2.5-Math evaluation
//! toolkit that R-KV ships in `evaluation/` (`parser.py`, `grader.py`, `eval_math.py`).

pub mod dataset;
pub mod error;
pub mod grade;
mod jsonl;
pub mod passkey;

pub use dataset::{r1_prompt, read_math_problems, MathProblem, R1_SUFFIX};
pub use error::EvalError;
