//! How a command ends: the exit status of each kind of failure, and the ends that print
//! nothing more.
//!
//! - 0: done.
//! - 1: anything else that failed (a model or file that cannot be read, a prompt too long
//!   for the model, a failure while running), as one line `error: ...`.
//! - 2: a usage error: clap's own (an unknown flag, a missing or malformed value, a value
//!   out of its range) or a [`Usage`] error raised by a flag check of a command, as one
//!   line `error: ...`.
//! - 130: the command was interrupted (SIGINT) and has printed what it had ([`Interrupted`]).
//! - 141: standard output was closed under the command (a pipe whose reader went away,
//!   [`StdoutClosed`]); it stops quietly, as a Unix tool killed by SIGPIPE does.

use std::error::Error;
use std::fmt;

/// A command line that names something impossible (exit status 2).
#[derive(Debug)]
pub struct Usage(pub String);

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for Usage {}

/// A usage error with a formatted message, as `anyhow::anyhow!` builds an error.
macro_rules! usage {
    ($($t:tt)*) => {
        anyhow::Error::new($crate::exit::Usage(format!($($t)*)))
    };
}
pub(crate) use usage;

/// Standard output is closed (exit status 141, no message).
#[derive(Debug)]
pub struct StdoutClosed;

impl fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("standard output is closed")
    }
}

impl Error for StdoutClosed {}

/// The command was interrupted and has reported what it had (exit status 130, no message).
#[derive(Debug)]
pub struct Interrupted;

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("interrupted")
    }
}

impl Error for Interrupted {}

/// The exit status of a failed command, and whether its message is to be printed.
pub fn status(e: &anyhow::Error) -> (i32, bool) {
    for cause in e.chain() {
        if is::<StdoutClosed>(cause) {
            return (141, false);
        }
        if is::<Interrupted>(cause) {
            return (130, false);
        }
        if is::<Usage>(cause) {
            return (2, true);
        }
    }
    (1, true)
}

/// Whether `cause` is a `T`, or an I/O error carrying one (how [`crate::out`] reports a
/// closed pipe through `std::io::Write`).
fn is<T: Error + 'static>(cause: &(dyn Error + 'static)) -> bool {
    cause.is::<T>()
        || cause
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .is_some_and(|inner| inner.is::<T>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_status_through_context_and_io() {
        let closed = std::io::Error::new(std::io::ErrorKind::BrokenPipe, StdoutClosed);
        let e = anyhow::Error::new(closed).context("writing a row");
        assert_eq!(status(&e), (141, false));
        assert_eq!(status(&anyhow::Error::new(Interrupted)), (130, false));
        assert_eq!(
            status(&usage!("--x must be 1").context("generate")),
            (2, true)
        );
        let pipe = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert_eq!(status(&anyhow::Error::new(pipe)), (1, true));
    }
}
