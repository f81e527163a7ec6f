//! The engine's answers to the scheduler's questions about memory ([`KvMemory`]): what a
//! sequence needs to be admitted, what it feeds, what its feed takes from the pool, and
//! what preempting it means (blocks freed, reservation dropped, observations forgotten,
//! tokens to recompute).
//!
//! Must not know: the scheduler's decisions, the forward, HTTP.

use std::collections::BTreeMap;

use crate::engine::prompt_chunk;
use crate::kv::KvCache;
use crate::limits::RequestLimits;
use crate::logprobs::PROMPT_LOGITS_PER_STEP;
use crate::request::SeqId;
use crate::scheduler::KvMemory;
use crate::sequence::Sequence;

/// The engine's memory as the scheduler sees it during one `schedule` call.
pub struct EngineMemory<'a> {
    pub kv: &'a mut KvCache,
    pub seqs: &'a mut BTreeMap<SeqId, Sequence>,
    pub limits: RequestLimits,
    /// Prompt tokens of sequences admitted for the first time.
    pub prompt_tokens: u64,
    /// Prompt tokens looked up in the prefix cache on admission, and found there.
    pub prefix_queries: u64,
    pub prefix_hits: u64,
}

impl EngineMemory<'_> {
    fn seq(&self, id: SeqId) -> Option<&Sequence> {
        self.seqs.get(&id)
    }

    /// Blocks the reservation of `s` and the samples it still stands for holds (`None`: a
    /// growing FullKV sequence, no reservation).
    fn reservation(&self, s: &Sequence) -> Option<usize> {
        let comp = s.compression.config();
        let blocks = self.limits.blocks();
        blocks
            .reserves(comp)
            .then(|| blocks.request_blocks(&s.req, comp, s.width()))
    }
}

/// Starts `s`, which holds no blocks, on the longest cached prefix of its prompt it may
/// take ([`Sequence::prefix_limit`]): those tokens count as fed. Returns the prompt tokens
/// looked up and those found.
fn take_cached_prefix(kv: &mut KvCache, block_size: usize, s: &mut Sequence) -> (u64, u64) {
    if !kv.prefix_caching() || !s.table.is_empty() || s.fed != 0 {
        return (0, 0);
    }
    let bs = block_size.max(1);
    let ids = kv.lookup_prefix(&s.req.prompt, s.prefix_limit(bs));
    let queries = s.req.prompt.len() as u64;
    // Adopting blocks the lookup just found cannot fail; if it did, the sequence computes
    // its prompt as if nothing were cached.
    if ids.is_empty() || kv.adopt(&mut s.table, &ids).is_err() {
        return (queries, 0);
    }
    let n = ids.len() * bs;
    s.fed = n;
    s.fed_most = s.fed_most.max(n);
    s.prefix_blocks = Some(ids.len());
    if !s.started {
        s.stats.cached_tokens = n;
    }
    (queries, n as u64)
}

impl KvMemory for EngineMemory<'_> {
    fn available(&self) -> usize {
        let seqs = &*self.seqs;
        self.kv.available(|id| seqs.get(&id).map(|s| &s.table))
    }

    fn admit_need(&self, id: SeqId) -> usize {
        let Some(s) = self.seq(id) else { return 0 };
        match self.reservation(s) {
            Some(r) => r,
            // Its tokens so far, and a block for each sample to grow (or copy) into, but
            // never more than the request can ever hold (else one that fills the pool
            // would wait for ever).
            None => {
                let bs = self.limits.block_size.max(1);
                let most =
                    self.limits
                        .blocks()
                        .request_blocks(&s.req, s.compression.config(), s.width());
                (s.total_len().div_ceil(bs) + s.width()).min(most)
            }
        }
    }

    fn admit_width(&self, id: SeqId) -> usize {
        self.seq(id).map_or(1, Sequence::width)
    }

    fn admit(&mut self, id: SeqId) -> bool {
        let Some(s) = self.seqs.get(&id) else {
            return false;
        };
        let reserve = self.reservation(s);
        if !s.started {
            self.prompt_tokens += s.req.prompt.len() as u64;
        }
        if let Some(s) = self.seqs.get_mut(&id) {
            let (queries, hits) = take_cached_prefix(self.kv, self.limits.block_size, s);
            self.prefix_queries += queries;
            self.prefix_hits += hits;
            s.started = true;
        }
        self.kv.admit(id, reserve);
        reserve.is_some()
    }

    fn feed_len(&self, id: SeqId, room: usize) -> usize {
        let Some(s) = self.seq(id) else { return 0 };
        let comp = s.compression.config();
        if s.in_prefill() {
            // Up to the end of the prompt's append (the whole prompt unless it is
            // compressed), in pieces that fit the room.
            let end = comp.prompt_append_end(s.fed, s.req.prompt.len());
            // Every token of a prompt whose log-probabilities are asked for has a logits
            // row ([n, vocab] floats): a bounded number per step.
            let room = match s.req.logprobs.prompt {
                Some(_) => room.min(PROMPT_LOGITS_PER_STEP),
                None => room,
            };
            return prompt_chunk(end - s.fed, room, comp.window);
        }
        let mut n = (s.total_len() - s.fed).min(room.max(1));
        // Recomputed generated tokens go in chunks that end where the schedule compressed
        // them the first time, as teacher forcing does: the same kept sets.
        if let Some(cap) = comp.max_resident_slots() {
            n = n.min(cap.saturating_sub(s.table.len()).max(1));
        }
        n
    }

    fn decoding(&self, id: SeqId) -> bool {
        self.seq(id).is_some_and(Sequence::decoding)
    }

    fn grow_need(&self, id: SeqId, n: usize) -> usize {
        let Some(s) = self.seq(id) else { return 0 };
        self.kv.grow_need(id, &s.table, n)
    }

    fn preempt(&mut self, id: SeqId) {
        if let Some(s) = self.seqs.get_mut(&id) {
            self.kv.preempt(id, &mut s.table);
            s.fed = 0;
            s.prefix_blocks = Some(0);
            s.compression.reset();
        }
    }
}
