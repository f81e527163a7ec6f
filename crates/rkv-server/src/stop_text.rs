//! What one streamed sample may send now. The engine cuts a stop string out of the final
//! text but reports each token's text as it comes, so a stream holds back any tail that
//! could be the start of a stop string, and at the end sends whatever of the final text
//! it has not sent: the streamed deltas then join to exactly the non-streamed text.
//!
//! Must not know: HTTP, the engine, reasoning tags.

/// The text sent so far of one sample, and the tail held back.
#[derive(Debug, Clone, Default)]
pub struct StopHoldback {
    stops: Vec<String>,
    sent: String,
    held: String,
}

impl StopHoldback {
    pub fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            sent: String::new(),
            held: String::new(),
        }
    }

    /// A token's text; returns what can be sent now.
    pub fn push(&mut self, text: &str) -> String {
        self.held.push_str(text);
        let keep = self
            .stops
            .iter()
            .map(|s| longest_prefix_suffix(&self.held, s))
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let now: String = self.held[..cut].to_string();
        self.held.drain(..cut);
        self.sent.push_str(&now);
        now
    }

    /// The sample's final text; returns what of it was not sent yet. (A final text that
    /// does not extend what was sent cannot happen with the holdback; nothing more is
    /// sent then.)
    pub fn finish(&mut self, final_text: &str) -> String {
        self.held.clear();
        let rest = final_text
            .strip_prefix(self.sent.as_str())
            .unwrap_or_default()
            .to_string();
        self.sent.push_str(&rest);
        rest
    }
}

/// Length of the longest proper prefix of `stop` that `s` ends with, on a character
/// boundary of `s`.
fn longest_prefix_suffix(s: &str, stop: &str) -> usize {
    let max = stop.len().saturating_sub(1).min(s.len());
    (1..=max)
        .rev()
        .find(|&k| {
            s.is_char_boundary(s.len() - k) && stop.is_char_boundary(k) && s.ends_with(&stop[..k])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_stops_everything_goes_at_once() {
        let mut h = StopHoldback::new(&[]);
        assert_eq!(h.push("Hello"), "Hello");
        assert_eq!(h.push(" world"), " world");
        assert_eq!(h.finish("Hello world"), "");
    }

    #[test]
    fn a_possible_stop_start_waits() {
        let stops = vec!["\n\nUser".to_string()];
        let mut h = StopHoldback::new(&stops);
        assert_eq!(h.push("Yes.\n"), "Yes.");
        assert_eq!(h.push("\nUs"), "");
        // The engine cut the stop string: the final text is what was sent.
        assert_eq!(h.finish("Yes."), "");
        let mut h = StopHoldback::new(&stops);
        assert_eq!(h.push("a\n"), "a");
        assert_eq!(h.push("b"), "\nb");
        assert_eq!(h.finish("a\nbc"), "c");
    }

    #[test]
    fn multibyte_text_is_cut_on_boundaries() {
        let stops = vec!["é!".to_string()];
        let mut h = StopHoldback::new(&stops);
        assert_eq!(h.push("caf"), "caf");
        assert_eq!(h.push("é"), "");
        assert_eq!(h.push("s"), "és");
        assert_eq!(h.finish("cafés"), "");
    }
}
