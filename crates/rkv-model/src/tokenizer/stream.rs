//! Streaming detokenisation: turns generated ids, one at a time, into text increments that
//! are always complete UTF-8 (a character split over several byte tokens is held back until
//! its last byte arrives).
//!
//! It decodes a short window of already-printed ids together with the new ones and emits
//! only the difference, so decoders that depend on context (leading-space stripping of
//! SentencePiece) behave as in a full decode.
//! Owns: the window state. Must not know: sampling, stop conditions, HTTP.

use super::{Tokenizer, TokenizerError};

/// Incremental decoder; see [`Tokenizer::stream`].
#[derive(Debug)]
pub struct TokenStream {
    tokenizer: Tokenizer,
    skip_special: bool,
    /// The context window: ids already printed (kept for context), then unprinted ones.
    ids: Vec<u32>,
    /// Ids before this one have been printed.
    read_offset: usize,
}

impl TokenStream {
    pub fn new(tokenizer: Tokenizer, skip_special: bool) -> Self {
        Self {
            tokenizer,
            skip_special,
            ids: Vec::new(),
            read_offset: 0,
        }
    }

    fn decode(&self, from: usize, to: usize) -> Result<String, TokenizerError> {
        self.tokenizer
            .decode(&self.ids[from..to], self.skip_special)
    }

    /// Adds one id; returns the new text, or `None` while it does not yet end in complete
    /// UTF-8.
    pub fn push(&mut self, id: u32) -> Result<Option<String>, TokenizerError> {
        if id as usize >= self.tokenizer.vocab_size() {
            return Err(TokenizerError::UnknownId(id));
        }
        self.ids.push(id);
        let prefix = self.decode(0, self.read_offset)?;
        let full = self.decode(0, self.ids.len())?;
        if full.len() <= prefix.len() || full.ends_with('\u{FFFD}') {
            return Ok(None);
        }
        let Some(new_text) = full.get(prefix.len()..) else {
            return Ok(None);
        };
        let new_text = new_text.to_owned();
        // The old context is no longer needed: the ids just printed become the context.
        self.ids.drain(..self.read_offset);
        self.read_offset = self.ids.len();
        Ok(Some(new_text))
    }

    /// Text held back so far (possibly ending in an incomplete character, rendered as
    /// U+FFFD); clears it. Call at the end of generation.
    pub fn finish(&mut self) -> Result<Option<String>, TokenizerError> {
        let prefix = self.decode(0, self.read_offset)?;
        let full = self.decode(0, self.ids.len())?;
        self.ids.clear();
        self.read_offset = 0;
        Ok(full
            .get(prefix.len()..)
            .filter(|s| !s.is_empty())
            .map(str::to_owned))
    }
}
