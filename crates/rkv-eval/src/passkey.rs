//! Passkey retrieval, the standard long-context check (Mohtashami & Jaggi, "Landmark
//! Attention", arXiv 2305.16300; LongLoRA and most long-context papers since): a
//! five-digit number is hidden at some depth of repeated filler text and asked for at the
//! end. A model that still has the number's keys and values answers it; a cache that
//! evicted them cannot.
//!
//! Owns the prompt's text (the wording of Landmark Attention's generator), the keys, and
//! the grading. Sizing a prompt to a token count needs a tokenizer: the caller measures
//! [`PasskeyPrompt`]s of two sizes and asks [`filler_units_for`].
//! Must not know: models, tokenizers, engines.

/// What the model is told first.
pub const INTRO: &str = "There is an important info hidden inside a lot of irrelevant text. \
Find it and memorize it. I will quiz you about the important information there.\n";

/// One unit of filler, repeated.
pub const FILLER: &str =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";

/// The question the prompt ends with; the model completes the sentence.
pub const QUESTION: &str = "\nWhat is the pass key? The pass key is";

/// One passkey prompt: `units` filler units with the key's sentence after
/// `round(depth * units)` of them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PasskeyPrompt {
    pub key: u32,
    /// Where the key sits, from 0 (first) to 1 (last).
    pub depth: f64,
    pub units: usize,
}

impl PasskeyPrompt {
    /// Filler units before the key's sentence.
    pub fn units_before(&self) -> usize {
        let d = self.depth.clamp(0.0, 1.0);
        ((d * self.units as f64).round() as usize).min(self.units)
    }

    /// The sentence that hides the key.
    pub fn needle(&self) -> String {
        format!(
            "The pass key is {k}. Remember it. {k} is the pass key. ",
            k = self.key
        )
    }

    /// The whole prompt text.
    pub fn text(&self) -> String {
        let before = self.units_before();
        let mut s =
            String::with_capacity(INTRO.len() + FILLER.len() * self.units + 64 + QUESTION.len());
        s.push_str(INTRO);
        for _ in 0..before {
            s.push_str(FILLER);
        }
        s.push_str(&self.needle());
        for _ in before..self.units {
            s.push_str(FILLER);
        }
        s.push_str(QUESTION);
        s
    }
}

/// The key of case `index` of a run seeded with `seed`: five digits (10000..=99999),
/// the same on every machine.
pub fn key_for(seed: u64, index: u64) -> u32 {
    // splitmix64 of the pair: well mixed, no dependency.
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(index)
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    10_000 + (z % 90_000) as u32
}

/// Filler units that bring a prompt to about `target` tokens, given the token counts of
/// two prompts of `units_a < units_b` units (`tokens_a`, `tokens_b`): tokens grow by the
/// same amount per unit. `None` when the two sizes do not grow or `target` is below the
/// prompt without filler.
pub fn filler_units_for(
    target: usize,
    (units_a, tokens_a): (usize, usize),
    (units_b, tokens_b): (usize, usize),
) -> Option<usize> {
    if units_b <= units_a || tokens_b <= tokens_a {
        return None;
    }
    let per_unit = (tokens_b - tokens_a) as f64 / (units_b - units_a) as f64;
    let fixed = tokens_a as f64 - per_unit * units_a as f64;
    let units = (target as f64 - fixed) / per_unit;
    (units >= 1.0).then(|| units.floor() as usize)
}

/// Whether `output` answers `key`: its first run of digits is the key.
pub fn is_correct(output: &str, key: u32) -> bool {
    first_number(output) == Some(key)
}

/// The first run of ASCII digits in `s`, if it fits a `u32`.
pub fn first_number(s: &str) -> Option<u32> {
    let start = s.find(|c: char| c.is_ascii_digit())?;
    let digits: String = s[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_sits_at_its_depth() {
        let p = PasskeyPrompt {
            key: 12345,
            depth: 0.5,
            units: 10,
        };
        let t = p.text();
        assert!(t.starts_with(INTRO) && t.ends_with(QUESTION));
        let at = t.find("The pass key is 12345").unwrap();
        assert_eq!(&t[INTRO.len()..at], FILLER.repeat(5));
        assert_eq!(t.matches(FILLER).count(), 10);
        assert_eq!(t.matches("12345").count(), 2);
        for (depth, before) in [(0.0, 0), (0.1, 1), (0.9, 9), (1.0, 10), (7.0, 10)] {
            let q = PasskeyPrompt { depth, ..p };
            assert_eq!(q.units_before(), before, "{depth}");
        }
    }

    #[test]
    fn keys_have_five_digits_and_differ_by_case() {
        let keys: Vec<u32> = (0..200).map(|i| key_for(7, i)).collect();
        assert!(keys.iter().all(|k| (10_000..=99_999).contains(k)));
        let mut distinct = keys.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() > 190, "{}", distinct.len());
        assert_eq!(key_for(7, 3), keys[3]);
        assert_ne!(key_for(8, 3), keys[3]);
    }

    #[test]
    fn units_follow_the_measured_growth() {
        // 20 tokens fixed, 25 per unit.
        let a = (10, 270);
        let b = (20, 520);
        assert_eq!(filler_units_for(4000, a, b), Some(159));
        assert_eq!(filler_units_for(30, a, b), None);
        assert_eq!(filler_units_for(4000, b, a), None);
        assert_eq!(filler_units_for(4000, (10, 270), (20, 270)), None);
    }

    #[test]
    fn grading_takes_the_first_number() {
        assert!(is_correct(" 71432. Remember it.", 71432));
        assert!(is_correct("71432", 71432));
        assert!(!is_correct(" 7143", 71432));
        assert!(!is_correct(" 714321", 71432));
        assert!(!is_correct(" not given, but 71432", 1));
        assert!(!is_correct(" blue.", 71432));
        assert_eq!(first_number("x 99999999999 y"), None);
        assert_eq!(first_number("a1b2"), Some(1));
    }
}
