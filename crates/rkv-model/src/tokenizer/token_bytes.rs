//! One token's own bytes and text, as log-probabilities show them: a byte-level BPE token
//! (GPT-2, Qwen, SmolLM) maps its vocabulary characters back through GPT-2's byte table,
//! a byte-fallback token `<0xAB>` is that byte, a SentencePiece piece has `▁` for a space.
//! A token may hold part of a character; its text then has U+FFFD where the part is.
//! Also which ids are added tokens (control tokens such as `<|im_end|>`), which a grammar
//! engine must never let stand for text.
//!
//! Must not know: sampling, responses.

use tokenizers::DecoderWrapper;

use super::Tokenizer;

/// GPT-2's `bytes_to_unicode`: every byte as a printable character. Printable Latin-1
/// bytes stand for themselves; the other 68 take the characters from U+0100 on.
fn byte_of_char(c: char) -> Option<u8> {
    let printable = |b: u32| (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || b >= 0xae;
    let c = c as u32;
    if c < 0x100 {
        return printable(c).then_some(c as u8);
    }
    // The non-printable bytes, in order, took U+0100, U+0101, ...
    let k = c - 0x100;
    (0u32..256)
        .filter(|&b| !printable(b))
        .nth(k as usize)
        .map(|b| b as u8)
}

impl Tokenizer {
    /// The bytes token `id` stands for (empty for an id outside the vocabulary).
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        let Some(piece) = self.token_str(id) else {
            return Vec::new();
        };
        if let Some(b) = byte_fallback(&piece) {
            return vec![b];
        }
        let byte_level = matches!(
            self.inner.hf.get_decoder(),
            Some(DecoderWrapper::ByteLevel(_))
        );
        if byte_level {
            if let Some(bytes) = piece.chars().map(byte_of_char).collect::<Option<Vec<u8>>>() {
                return bytes;
            }
        }
        piece.replace('\u{2581}', " ").into_bytes()
    }

    /// The added tokens (those the tokenizer matches whole in text, outside the merges),
    /// as `(id, special)`: `special` for control tokens (`<|im_end|>`, GGUF type 3), which
    /// `decode(.., skip_special = true)` drops. In id order.
    pub fn added_tokens(&self) -> Vec<(u32, bool)> {
        let mut v: Vec<(u32, bool)> = self
            .inner
            .hf
            .get_added_tokens_decoder()
            .into_iter()
            .map(|(id, t)| (id, t.special))
            .collect();
        v.sort_unstable();
        v
    }

    /// The text of token `id` alone ([`Self::token_bytes`] as UTF-8, U+FFFD for a part
    /// of a character).
    pub fn token_text(&self, id: u32) -> String {
        String::from_utf8_lossy(&self.token_bytes(id)).into_owned()
    }
}

/// `<0xAB>` is byte 0xAB.
fn byte_fallback(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2).then(|| u8::from_str_radix(hex, 16).ok())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_table_is_gpt2s() {
        // Space, newline and the first non-printable byte, as GPT-2 writes them.
        assert_eq!(byte_of_char('Ġ'), Some(b' '));
        assert_eq!(byte_of_char('Ċ'), Some(b'\n'));
        assert_eq!(byte_of_char('\u{100}'), Some(0));
        assert_eq!(byte_of_char('a'), Some(b'a'));
        assert_eq!(byte_of_char('\u{ad}'), None);
        // Every byte has exactly one character.
        let chars: Vec<char> = (0x21u32..0x200).filter_map(char::from_u32).collect();
        let mut seen = [0u32; 256];
        for c in chars {
            if let Some(b) = byte_of_char(c) {
                seen[b as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
    }

    #[test]
    fn byte_fallback_pieces_are_their_byte() {
        assert_eq!(byte_fallback("<0x0A>"), Some(10));
        assert_eq!(byte_fallback("<0xE2>"), Some(0xe2));
        assert_eq!(byte_fallback("<0x0>"), None);
        assert_eq!(byte_fallback("<s>"), None);
    }
}
