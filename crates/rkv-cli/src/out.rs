//! Standard output of every command: [`Stdout`] and [`outln!`] write to it and report a
//! closed pipe as [`StdoutClosed`], which `main` turns into a quiet exit (status 141)
//! instead of the panic of `println!`.

use std::io::{self, Write};

use crate::exit::StdoutClosed;

/// Standard output, whose write errors say when the reader has gone away.
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::stdout().write(buf).map_err(tag)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        io::stdout().lock().write_all(buf).map_err(tag)
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stdout().flush().map_err(tag)
    }
}

/// A broken pipe becomes an error carrying [`StdoutClosed`]; other errors pass as they are.
fn tag(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        io::Error::new(io::ErrorKind::BrokenPipe, StdoutClosed)
    } else {
        e
    }
}

/// Writes `text` and flushes it (streamed output that has no line end yet).
pub fn text(text: &str) -> io::Result<()> {
    let mut out = Stdout;
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// `println!` that returns `std::io::Result<()>` (use `?`) instead of panicking when
/// standard output is closed.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!($crate::out::Stdout, $($t)*).and_then(|()| $crate::out::Stdout.flush())
    }};
}
pub(crate) use outln;
