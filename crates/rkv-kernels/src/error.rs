//! Errors of the kernel entry points: only length / shape contract violations.

use thiserror::Error;

/// A slice handed to a kernel does not have the length its shape implies.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KernelError {
    /// `what` has `got` elements where `expected` were needed.
    #[error("{what}: expected length {expected}, got {got}")]
    Length {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// The length `what` needs does not fit in `usize`.
    #[error("{what}: the shape's length overflows")]
    Overflow { what: &'static str },
    /// `what` (of length `len`) must be a multiple of `multiple`.
    #[error("{what}: length {len} is not a multiple of {multiple}")]
    NotMultiple {
        what: &'static str,
        len: usize,
        multiple: usize,
    },
}

/// Returns `Err(KernelError::Length)` unless `got == expected`.
pub(crate) fn check_len(
    what: &'static str,
    expected: usize,
    got: usize,
) -> Result<(), KernelError> {
    if expected == got {
        Ok(())
    } else {
        Err(KernelError::Length {
            what,
            expected,
            got,
        })
    }
}

/// Returns `Err(KernelError::NotMultiple)` unless `multiple` divides `len`.
pub(crate) fn check_multiple(
    what: &'static str,
    len: usize,
    multiple: usize,
) -> Result<(), KernelError> {
    if multiple != 0 && len.is_multiple_of(multiple) {
        Ok(())
    } else {
        Err(KernelError::NotMultiple {
            what,
            len,
            multiple,
        })
    }
}
