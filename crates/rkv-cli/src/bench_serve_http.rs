//! `rkv bench serve --url`: the same benchmark against a running `rkv serve` over HTTP.
//!
//! Keeps `--concurrency` streamed `POST {url}/v1/completions` requests in flight (the
//! rendered prompt text, `ignore_eos`, the configuration as `kv_compression`), times TTFT
//! (send to the first chunk with text) and TPOT ((last text chunk - first) / (tokens - 1))
//! from the SSE stream, counts tokens from the final usage chunk (else the text chunks),
//! and polls `GET {url}/metrics` every 50 ms for running sequences, KV blocks and
//! preemptions (the counter's difference over the run).
//! Must not know: the engine; the server's internals beyond its documented wire format.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rkv_core::config::CompressionConfig;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use super::{latencies, Occupancy, Outcome, ServeBenchArgs, Timing};

/// How often `/metrics` is read during a run.
const POLL: Duration = Duration::from_millis(50);

/// The gauges and counters of one `/metrics` scrape.
#[derive(Clone, Copy, Debug, Default)]
struct Scrape {
    running: usize,
    blocks_used: usize,
    blocks_total: usize,
    preemptions: u64,
}

/// Runs the benchmark of one configuration against the server at `url`.
pub(super) fn drive(
    url: &str,
    a: &ServeBenchArgs,
    prompts: &[String],
    name: &str,
    comp: &CompressionConfig,
) -> Result<Outcome> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the HTTP client's runtime")?;
    rt.block_on(drive_async(url, a, prompts, name, comp))
}

async fn drive_async(
    url: &str,
    a: &ServeBenchArgs,
    prompts: &[String],
    name: &str,
    comp: &CompressionConfig,
) -> Result<Outcome> {
    let base = url.trim_end_matches('/').to_string();
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .context("cannot build the HTTP client")?;
    let start = scrape(&client, &base)
        .await
        .with_context(|| format!("cannot read {base}/metrics: is `rkv serve` running there?"))?;
    let peaks = Arc::new(Mutex::new(Occupancy::default()));
    let poller = {
        let (client, base, peaks) = (client.clone(), base.clone(), peaks.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(POLL);
            loop {
                tick.tick().await;
                // A failed scrape is skipped: the requests report an unreachable server.
                if let Ok(s) = scrape(&client, &base).await {
                    if let Ok(mut p) = peaks.lock() {
                        p.see(s.running, s.blocks_used);
                    }
                }
            }
        })
    };
    let bar = progress(a, name);
    let kv = json!({
        "policy": comp.policy.name(),
        "budget": comp.budget,
        "buffer": comp.buffer,
        "window": comp.window,
        "lambda": comp.lambda,
        "threshold": comp.threshold,
    });
    let send = |set: &mut JoinSet<(usize, Result<Timing>)>, i: usize| {
        let body = json!({
            "prompt": prompts[i % prompts.len()],
            "max_tokens": a.max_tokens,
            "temperature": a.temperature,
            "seed": i,
            "stream": true,
            "stream_options": {"include_usage": true},
            "ignore_eos": a.ignore_eos,
            "kv_compression": kv,
        });
        let (client, base, bar) = (client.clone(), base.clone(), bar.clone());
        set.spawn(async move { (i, one(&client, &base, body.to_string(), &bar).await) });
    };
    let t0 = Instant::now();
    let mut set = JoinSet::new();
    let mut next = 0;
    while next < a.requests.min(a.concurrency) {
        send(&mut set, next);
        next += 1;
    }
    let mut timing = vec![Timing::default(); a.requests];
    let mut failure = None;
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((i, Ok(t))) => timing[i] = t,
            Ok((i, Err(e))) => failure = Some(e.context(format!("request {i}"))),
            Err(e) => failure = Some(anyhow!("a request task failed: {e}")),
        }
        if failure.is_some() {
            break;
        }
        if next < a.requests {
            send(&mut set, next);
            next += 1;
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    poller.abort();
    bar.finish_and_clear();
    if let Some(e) = failure {
        return Err(e);
    }
    let end = scrape(&client, &base)
        .await
        .with_context(|| format!("cannot read {base}/metrics after the run"))?;
    let occ = match peaks.lock() {
        Ok(mut p) => {
            p.see(end.running, end.blocks_used);
            p.clone()
        }
        Err(_) => Occupancy::default(),
    };
    let (ttft_ms, tpot_ms) = latencies(&timing);
    Ok(Outcome {
        generated: timing.iter().map(|t| t.tokens).sum(),
        seconds,
        peak_running: occ.peak_running,
        mean_running: occ.mean_running(),
        blocks_peak: occ.blocks_peak,
        blocks_total: end.blocks_total,
        preemptions: end.preemptions.saturating_sub(start.preemptions),
        cached_tokens: None,
        ttft_ms,
        ttft_later_ms: Vec::new(),
        output_digest: None,
        tpot_ms,
    })
}

fn progress(a: &ServeBenchArgs, name: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        Some((a.requests * a.max_tokens) as u64),
        ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} chunks {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(format!("{name} (HTTP)"));
    bar
}

/// One streamed completion: its timings as the chunks arrive.
async fn one(
    client: &reqwest::Client,
    base: &str,
    body: String,
    bar: &ProgressBar,
) -> Result<Timing> {
    let sent = Instant::now();
    let mut resp = client
        .post(format!("{base}/v1/completions"))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .with_context(|| format!("cannot send to {base}/v1/completions"))?;
    let status = resp.status();
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        bail!("the server answered {status}: {}", text.trim());
    }
    let mut t = Timing {
        sent: Some(sent),
        ..Timing::default()
    };
    let (mut chunks, mut usage, mut buf) = (0usize, None, Vec::<u8>::new());
    while let Some(bytes) = resp.chunk().await.context("the stream broke off")? {
        let now = Instant::now();
        buf.extend_from_slice(&bytes);
        while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line);
            let Some(data) = line.trim_end().strip_prefix("data:") else {
                continue; // blank separators, SSE comments
            };
            let data = data.trim_start();
            if data == "[DONE]" {
                t.done = true;
                continue;
            }
            let v: Value = serde_json::from_str(data)
                .with_context(|| format!("a stream chunk is not JSON: {data}"))?;
            if let Some(err) = v.get("error") {
                bail!("the server sent an error in the stream: {err}");
            }
            let text = v.pointer("/choices/0/text").and_then(Value::as_str);
            if text.is_some_and(|s| !s.is_empty()) {
                t.first.get_or_insert(now);
                t.last = Some(now);
                chunks += 1;
                bar.inc(1);
            }
            if let Some(n) = v
                .pointer("/usage/completion_tokens")
                .and_then(Value::as_u64)
            {
                usage = Some(n as usize);
            }
        }
    }
    if !t.done {
        bail!("the stream ended without `data: [DONE]`");
    }
    t.tokens = usage.unwrap_or(chunks);
    Ok(t)
}

/// Reads `GET {base}/metrics` (Prometheus text).
async fn scrape(client: &reqwest::Client, base: &str) -> Result<Scrape> {
    let resp = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .context("no answer")?;
    let status = resp.status();
    if !status.is_success() {
        bail!("HTTP {status}");
    }
    parse_metrics(&resp.text().await.context("cannot read the body")?)
}

/// The four values the benchmark needs from a Prometheus text exposition.
fn parse_metrics(text: &str) -> Result<Scrape> {
    let value = |name: &str| -> Result<f64> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                let mut it = l.split_whitespace();
                (it.next() == Some(name)).then(|| it.next()?.parse::<f64>().ok())?
            })
            .ok_or_else(|| anyhow!("no `{name}` in the metrics (not an `rkv serve`?)"))
    };
    // Gauges and counters are non-negative integers; `as` saturates anything else.
    Ok(Scrape {
        running: value("rkv_requests_running")? as usize,
        blocks_used: value("rkv_kv_blocks_used")? as usize,
        blocks_total: value("rkv_kv_blocks_total")? as usize,
        preemptions: value("rkv_preemptions_total")? as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_metrics_it_needs() {
        let text = "# TYPE rkv_requests_running gauge\nrkv_requests_running 3\n\
                    rkv_kv_blocks_used 17\nrkv_kv_blocks_total 512\n\
                    # TYPE rkv_preemptions_total counter\nrkv_preemptions_total 2\n";
        let s = parse_metrics(text).expect("parses");
        assert_eq!(
            (s.running, s.blocks_used, s.blocks_total, s.preemptions),
            (3, 17, 512, 2)
        );
        assert!(parse_metrics("rkv_requests_running 1\n").is_err());
    }
}
