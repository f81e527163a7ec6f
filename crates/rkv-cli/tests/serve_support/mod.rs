//! Helpers of the `rkv serve` tests: the binary on a free port with the default model,
//! and a minimal HTTP/1.1 client over std (no async runtime needed).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const MODEL_NAME: &str = "smol";

/// The default model in `$RKV_HOME` (default `~/.cache/rkv`); fails with instructions.
pub fn default_model() -> PathBuf {
    let home = std::env::var_os("RKV_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/rkv")
        });
    let p = home.join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "default model missing at {}: run `rkv fetch`",
        p.display()
    );
    p
}

/// A running `rkv serve`; killed if the test ends without stopping it.
pub struct Served {
    pub child: Option<Child>,
    pub port: u16,
    pub base: String,
    /// stderr lines after the "listening" line.
    pub stderr: mpsc::Receiver<String>,
}

/// Starts `rkv serve --port 0` with `extra` flags and waits for its "listening" line.
pub fn serve(extra: &[&str]) -> Served {
    serve_model(&default_model(), extra)
}

/// [`serve`] with the model file `model`.
pub fn serve_model(model: &std::path::Path, extra: &[&str]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rkv"))
        .args([
            "serve",
            "--port",
            "0",
            "--served-model-name",
            MODEL_NAME,
            "--model",
        ])
        .arg(model)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rkv serve");
    let err = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let end = Instant::now() + Duration::from_secs(120);
    let port = loop {
        let left = end.saturating_duration_since(Instant::now());
        let line = match rx.recv_timeout(left) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                panic!("rkv serve printed no listening line");
            }
        };
        if let Some(rest) = line.strip_prefix("rkv serve: listening on http://") {
            let addr = rest.split_whitespace().next().unwrap_or_default();
            let port = addr.rsplit(':').next().and_then(|p| p.parse().ok());
            break port.unwrap_or_else(|| panic!("no port in {line:?}"));
        }
    };
    Served {
        child: Some(child),
        port,
        base: format!("http://127.0.0.1:{port}"),
        stderr: rx,
    }
}

impl Served {
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// Sends `signal` (`TERM`, `INT`) with the `kill` command.
    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{signal} failed");
    }

    /// Waits for the process to exit (at most `secs` seconds).
    pub fn wait(&mut self, secs: u64) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(st) = child.try_wait().expect("wait") {
                return st;
            }
            if Instant::now() > end {
                let _ = child.kill();
                panic!("rkv serve did not exit within {secs} s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, then the exit status.
    pub fn stop(mut self) -> ExitStatus {
        self.signal("TERM");
        self.wait(60)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// An HTTP/1.1 request with `Connection: close`, written but not read.
pub fn open(port: u16, method: &str, path: &str, body: &str) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("write");
    s
}

/// Reads until `buf` contains `needle` (or the connection ends).
pub fn read_until(s: &mut TcpStream, buf: &mut Vec<u8>, needle: &str) {
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(buf).contains(needle) {
        let n = s.read(&mut chunk).expect("read");
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Reads the rest and splits the response: (status, body with chunking undone).
pub fn finish(mut s: TcpStream, mut buf: Vec<u8>) -> (u16, String) {
    s.read_to_end(&mut buf).expect("read");
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("headers");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    (
        status,
        if chunked {
            dechunk(body)
        } else {
            body.to_string()
        },
    )
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).expect("chunk size");
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// One whole request.
pub fn request(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    finish(open(port, method, path, body), Vec::new())
}

/// The `data:` payloads of an SSE body.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|ev| {
            let d: Vec<&str> = ev
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            (!d.is_empty()).then(|| d.join("\n"))
        })
        .collect()
}
