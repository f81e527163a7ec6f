//! `GET /metrics`: the engine's gauges and counters and the server's latency histograms
//! in the Prometheus text exposition format (version 0.0.4), written by hand.
//!
//! Owns the histograms of time to first token (request arrival to its first token) and
//! time per output token (per sample: finish minus first token over tokens - 1), which
//! the server records from the arrival times of engine events.
//! Must not know: HTTP routing, the engine's internals (it reads `EngineMetrics` only).

use std::fmt::Write;
use std::sync::Mutex;

use rkv_engine::handle::EngineMetrics;

/// Bucket upper bounds (seconds) of the time-to-first-token histogram.
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
];
/// Bucket upper bounds (seconds) of the time-per-output-token histogram.
const TPOT_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
    5.0,
];

/// A cumulative histogram with fixed buckets.
#[derive(Debug, Clone)]
struct Histogram {
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative), and one for `+Inf`.
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        }
    }

    fn observe(&mut self, v: f64) {
        if !v.is_finite() {
            return;
        }
        let i = self.bounds.partition_point(|&b| b < v);
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.sum += v;
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cum = 0u64;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cum += c;
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cum}");
        }
        cum += self.counts.last().copied().unwrap_or(0);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cum}");
        let _ = writeln!(out, "{name}_sum {}", self.sum);
        let _ = writeln!(out, "{name}_count {cum}");
    }
}

/// What the server itself measures.
#[derive(Debug)]
pub struct ServerMetrics {
    ttft: Mutex<Histogram>,
    tpot: Mutex<Histogram>,
}

impl Default for ServerMetrics {
    fn default() -> Self {
        Self {
            ttft: Mutex::new(Histogram::new(TTFT_BUCKETS)),
            tpot: Mutex::new(Histogram::new(TPOT_BUCKETS)),
        }
    }
}

impl ServerMetrics {
    pub fn observe_ttft(&self, seconds: f64) {
        if let Ok(mut h) = self.ttft.lock() {
            h.observe(seconds);
        }
    }

    pub fn observe_tpot(&self, seconds: f64) {
        if let Ok(mut h) = self.tpot.lock() {
            h.observe(seconds);
        }
    }

    /// The whole exposition.
    pub fn render(&self, engine: &EngineMetrics) -> String {
        let c = &engine.counters;
        let mut out = String::new();
        let gauges: [(&str, &str, u64); 6] = [
            (
                "rkv_requests_running",
                "Sequences running in the engine.",
                c.running as u64,
            ),
            (
                "rkv_requests_waiting",
                "Sequences waiting for admission.",
                c.waiting as u64,
            ),
            (
                "rkv_requests_preempted",
                "Sequences preempted and waiting to be recomputed.",
                c.preempted as u64,
            ),
            (
                "rkv_kv_blocks_used",
                "KV blocks in use.",
                c.kv_blocks_used as u64,
            ),
            (
                "rkv_kv_blocks_total",
                "KV blocks in the pool.",
                c.kv_blocks_total as u64,
            ),
            (
                "rkv_kv_blocks_cached",
                "Free KV blocks holding cached prompt prefixes (reclaimed before anything waits).",
                c.kv_blocks_cached as u64,
            ),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            let _ = writeln!(out, "{name} {v}");
        }
        let counters: [(&str, &str, u64); 8] = [
            (
                "rkv_prompt_tokens_total",
                "Prompt tokens prefilled.",
                c.prompt_tokens_total,
            ),
            (
                "rkv_generated_tokens_total",
                "Tokens generated.",
                c.generated_tokens_total,
            ),
            (
                "rkv_compressions_total",
                "KV compression events.",
                c.compressions_total,
            ),
            (
                "rkv_evicted_tokens_total",
                "Tokens evicted by compression (per layer and KV head).",
                c.evicted_tokens_total,
            ),
            (
                "rkv_preemptions_total",
                "Sequences preempted for lack of KV blocks.",
                c.preemptions_total,
            ),
            (
                "rkv_prefix_cache_queries_total",
                "Prompt tokens looked up in the prefix cache.",
                c.prefix_cache_queries_total,
            ),
            (
                "rkv_prefix_cache_hits_total",
                "Prompt tokens found in the prefix cache (not computed).",
                c.prefix_cache_hits_total,
            ),
            (
                "rkv_requests_rejected_total",
                "Requests refused because the queue was full.",
                engine.requests_rejected_total,
            ),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name} {v}");
        }
        if let Ok(h) = self.ttft.lock() {
            h.write(
                &mut out,
                "rkv_time_to_first_token_seconds",
                "Time from a request's arrival to its first token.",
            );
        }
        if let Ok(h) = self.tpot.lock() {
            h.write(
                &mut out,
                "rkv_time_per_output_token_seconds",
                "Per sample, time from its first token to its last over tokens after the first.",
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative() {
        let m = ServerMetrics::default();
        m.observe_ttft(0.003);
        m.observe_ttft(0.003);
        m.observe_ttft(1000.0);
        m.observe_ttft(f64::NAN);
        let text = m.render(&EngineMetrics::default());
        assert!(text.contains("rkv_time_to_first_token_seconds_bucket{le=\"0.001\"} 0\n"));
        assert!(text.contains("rkv_time_to_first_token_seconds_bucket{le=\"0.005\"} 2\n"));
        assert!(text.contains("rkv_time_to_first_token_seconds_bucket{le=\"80\"} 2\n"));
        assert!(text.contains("rkv_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(text.contains("rkv_time_to_first_token_seconds_count 3\n"));
        assert!(text.contains("# TYPE rkv_kv_blocks_used gauge\nrkv_kv_blocks_used 0\n"));
        assert!(text.contains("# TYPE rkv_preemptions_total counter\n"));
        assert!(text.contains("# TYPE rkv_kv_blocks_cached gauge\nrkv_kv_blocks_cached 0\n"));
        assert!(text.contains("# TYPE rkv_prefix_cache_hits_total counter\n"));
        assert!(text.contains("# TYPE rkv_prefix_cache_queries_total counter\n"));
    }
}
