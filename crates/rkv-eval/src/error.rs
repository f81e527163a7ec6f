//! Errors of the evaluation crate.

use thiserror::Error;

/// What can go wrong while reading or grading evaluation records.
#[derive(Debug, Error)]
pub enum EvalError {
    /// Reading the input failed.
    #[error("reading line {line}: {source}")]
    Io {
        /// 1-based line number.
        line: usize,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A line is not a JSON object of the expected shape.
    #[error("line {line}: malformed record: {message}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
}
