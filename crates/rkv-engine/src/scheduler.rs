//! The scheduler: which sequences run, which wait, which are preempted, and how many
//! tokens each feeds in the next forward.
//!
//! The scheduling model, in one paragraph: there is no prefill or decode phase. Each
//! running sequence has tokens computed and tokens it still has to feed (the rest of its
//! prompt, the tokens it recomputes after a preemption, or the token it just sampled);
//! each step takes up to `max_batch_tokens` of them, one-token decodes first, then prompt
//! and recompute chunks, oldest sequence first. Admission is against free blocks: a
//! compressing sequence reserves every block it can ever hold when admitted, a FullKV
//! sequence needs its prompt's blocks and then grows a block at a time. When a step's
//! growth does not fit, the newest running sequence is preempted (its blocks freed, its
//! tokens recomputed when it resumes, as vLLM does); preempted sequences resume oldest
//! first and before any waiting one, so nothing starves. A step therefore never runs out
//! of memory.
//!
//! Owns the waiting, running and preempted queues and these decisions. Sees sequence ids
//! and block counts only, through [`KvMemory`]: no tensors, no model, no policy maths.

use std::collections::{BTreeSet, VecDeque};

use crate::request::SeqId;

/// What the scheduler asks of the engine's memory about each sequence.
pub trait KvMemory {
    /// Free blocks not promised to any sequence's reservation.
    fn available(&self) -> usize;
    /// Blocks that admitting (or resuming) `id` takes out of [`Self::available`].
    fn admit_need(&self, id: SeqId) -> usize;
    /// Sequences that admitting `id` adds to the running set (the samples of a request).
    fn admit_width(&self, id: SeqId) -> usize;
    /// Records the admission of `id`: reserves its blocks and returns `true` where it
    /// reserves (a compressing sequence); `false` where it grows as it goes, and the
    /// scheduler then keeps its need promised for the rest of this round.
    fn admit(&mut self, id: SeqId) -> bool;
    /// Tokens `id` feeds in a step with `room` tokens left (at least 1 when it has any).
    fn feed_len(&self, id: SeqId, room: usize) -> usize;
    /// Whether `id`'s next feed is a single decode token.
    fn decoding(&self, id: SeqId) -> bool;
    /// Blocks, beyond its reservation, that feeding `n` tokens of `id` takes from the pool.
    fn grow_need(&self, id: SeqId, n: usize) -> usize;
    /// Frees every block of `id` and its reservation; its tokens will be recomputed.
    fn preempt(&mut self, id: SeqId);
}

/// What one step runs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    /// `(sequence, tokens to feed)`, decodes first, then chunks, each by age.
    pub feeds: Vec<(SeqId, usize)>,
    /// Sequences preempted while planning this step.
    pub preempted: Vec<SeqId>,
}

#[derive(Debug, Clone)]
pub struct Scheduler {
    max_num_seqs: usize,
    max_batch_tokens: usize,
    waiting: VecDeque<SeqId>,
    running: BTreeSet<SeqId>, // ids grow with arrival: the last is the newest
    preempted: BTreeSet<SeqId>,
    preemptions: u64,
}

impl Scheduler {
    pub fn new(max_num_seqs: usize, max_batch_tokens: usize) -> Self {
        Self {
            max_num_seqs: max_num_seqs.max(1),
            max_batch_tokens: max_batch_tokens.max(1),
            waiting: VecDeque::new(),
            running: BTreeSet::new(),
            preempted: BTreeSet::new(),
            preemptions: 0,
        }
    }

    pub fn enqueue(&mut self, id: SeqId) {
        self.waiting.push_back(id);
    }

    /// A sequence that joins the running set without admission (a sample forked from a
    /// running request, whose memory the request's admission already counted).
    pub fn join_running(&mut self, id: SeqId) {
        self.running.insert(id);
    }

    /// Forgets `id` wherever it is (finished, failed or aborted).
    pub fn remove(&mut self, id: SeqId) {
        self.running.remove(&id);
        self.preempted.remove(&id);
        self.waiting.retain(|&w| w != id);
    }

    pub fn n_running(&self) -> usize {
        self.running.len()
    }

    pub fn n_waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn n_preempted(&self) -> usize {
        self.preempted.len()
    }

    /// Preemptions since the scheduler was made.
    pub fn preemptions(&self) -> u64 {
        self.preemptions
    }

    pub fn is_running(&self, id: SeqId) -> bool {
        self.running.contains(&id)
    }

    /// Admits what fits, then lays out the next forward, preempting the newest running
    /// sequences until the growth it needs fits the free blocks.
    pub fn schedule(&mut self, mem: &mut impl KvMemory) -> Plan {
        self.admit(mem);
        let mut plan = Plan::default();
        loop {
            plan.feeds = self.lay_out(mem);
            let grow: usize = plan.feeds.iter().map(|&(id, n)| mem.grow_need(id, n)).sum();
            if grow <= mem.available() {
                return plan;
            }
            let Some(victim) = self.running.pop_last() else {
                plan.feeds.clear();
                return plan;
            };
            mem.preempt(victim);
            self.preempted.insert(victim);
            self.preemptions += 1;
            plan.preempted.push(victim);
        }
    }

    /// Preempted sequences first (oldest first), then waiting ones in arrival order; stops
    /// at the first that does not fit, so that none is overtaken for ever.
    fn admit(&mut self, mem: &mut impl KvMemory) {
        let mut promised = 0;
        loop {
            let (id, from_preempted) = match self.preempted.first() {
                Some(&id) => (id, true),
                None => match self.waiting.front() {
                    Some(&id) => (id, false),
                    None => return,
                },
            };
            let need = mem.admit_need(id);
            if self.running.len() + mem.admit_width(id) > self.max_num_seqs
                || need.saturating_add(promised) > mem.available()
            {
                return;
            }
            if from_preempted {
                self.preempted.remove(&id);
            } else {
                self.waiting.pop_front();
            }
            if !mem.admit(id) {
                promised += need;
            }
            self.running.insert(id);
        }
    }

    /// The feeds of every running sequence within the step's token budget.
    fn lay_out(&self, mem: &impl KvMemory) -> Vec<(SeqId, usize)> {
        let mut room = self.max_batch_tokens;
        let mut feeds = Vec::new();
        let (decodes, chunks): (Vec<SeqId>, Vec<SeqId>) =
            self.running.iter().partition(|&&id| mem.decoding(id));
        for id in decodes.into_iter().chain(chunks) {
            if room == 0 {
                break;
            }
            let n = mem.feed_len(id, room);
            if n == 0 {
                continue;
            }
            room = room.saturating_sub(n);
            feeds.push((id, n));
        }
        feeds
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A sequence as the fake memory sees it.
    #[derive(Clone)]
    struct Fake {
        /// Blocks reserved on admission (compressing) or 0 (FullKV).
        reserve: Option<usize>,
        /// Tokens still to feed before the next sample, then one per step.
        to_feed: usize,
        held: usize,
        slots: usize,
    }

    /// Blocks of 4 slots; FullKV sequences grow, compressing ones reserve.
    struct Mem {
        free: usize,
        seqs: HashMap<SeqId, Fake>,
        admitted: Vec<SeqId>,
    }

    impl Mem {
        fn outstanding(&self) -> usize {
            self.seqs
                .iter()
                .filter(|(id, _)| self.admitted.contains(id))
                .filter_map(|(_, s)| s.reserve.map(|r| r.saturating_sub(s.held)))
                .sum()
        }
    }

    impl KvMemory for Mem {
        fn available(&self) -> usize {
            self.free.saturating_sub(self.outstanding())
        }
        fn admit_need(&self, id: SeqId) -> usize {
            let s = &self.seqs[&id];
            s.reserve.unwrap_or((s.slots + s.to_feed).div_ceil(4) + 1)
        }
        fn admit_width(&self, _: SeqId) -> usize {
            1
        }
        fn admit(&mut self, id: SeqId) -> bool {
            self.admitted.push(id);
            self.seqs[&id].reserve.is_some()
        }
        fn feed_len(&self, id: SeqId, room: usize) -> usize {
            self.seqs[&id].to_feed.clamp(1, room.max(1))
        }
        fn decoding(&self, id: SeqId) -> bool {
            self.seqs[&id].to_feed <= 1
        }
        fn grow_need(&self, id: SeqId, n: usize) -> usize {
            let s = &self.seqs[&id];
            match s.reserve {
                Some(_) => 0,
                None => (s.slots + n).div_ceil(4).saturating_sub(s.held),
            }
        }
        fn preempt(&mut self, id: SeqId) {
            let s = self.seqs.get_mut(&id).expect("seq");
            self.free += s.held;
            s.to_feed += s.slots;
            s.held = 0;
            s.slots = 0;
        }
    }

    /// Runs the plan's feeds against the fake memory.
    fn apply(mem: &mut Mem, plan: &Plan) {
        for &(id, n) in &plan.feeds {
            let grow = mem.grow_need(id, n);
            let s = mem.seqs.get_mut(&id).expect("seq");
            s.slots += n;
            s.to_feed = if s.to_feed > n { s.to_feed - n } else { 1 };
            if s.reserve.is_some() {
                let need = s.slots.div_ceil(4).saturating_sub(s.held);
                s.held += need;
                mem.free -= need;
            } else {
                s.held += grow;
                mem.free -= grow;
            }
        }
    }

    fn fake(reserve: Option<usize>, prompt: usize) -> Fake {
        Fake {
            reserve,
            to_feed: prompt,
            held: 0,
            slots: 0,
        }
    }

    #[test]
    fn admits_in_order_against_free_blocks_and_stops_at_the_first_misfit() {
        let mut mem = Mem {
            free: 10,
            seqs: HashMap::from([
                (0, fake(Some(4), 8)),
                (1, fake(Some(4), 8)),
                (2, fake(None, 4)),
                (3, fake(None, 4)),
            ]),
            admitted: Vec::new(),
        };
        let mut s = Scheduler::new(8, 64);
        for id in 0..4 {
            s.enqueue(id);
        }
        let plan = s.schedule(&mut mem);
        // 4 + 4 reserved, then 2 free: sequence 2 needs its block and one to grow into,
        // and sequence 3 the same, which is no longer there.
        assert_eq!(mem.admitted, vec![0, 1, 2]);
        assert_eq!(plan.feeds, vec![(0, 8), (1, 8), (2, 4)]);
        apply(&mut mem, &plan);
        assert_eq!((mem.free, mem.available()), (5, 1));
        // Later arrivals queue behind sequence 3, even one that would fit.
        mem.seqs.insert(4, fake(None, 1));
        s.enqueue(4);
        let plan = s.schedule(&mut mem);
        assert_eq!(mem.admitted, vec![0, 1, 2]);
        assert_eq!(s.n_waiting(), 2);
        assert_eq!(plan.preempted, Vec::<SeqId>::new());
        assert_eq!(plan.feeds, vec![(0, 1), (1, 1), (2, 1)]);
    }

    #[test]
    fn max_num_seqs_and_token_budget_bound_a_step_decodes_first() {
        let mut mem = Mem {
            free: 100,
            seqs: (0..4).map(|i| (i, fake(None, 10))).collect(),
            admitted: Vec::new(),
        };
        let mut s = Scheduler::new(3, 12);
        for id in 0..4 {
            s.enqueue(id);
        }
        let plan = s.schedule(&mut mem);
        assert_eq!(s.n_running(), 3);
        assert_eq!(plan.feeds, vec![(0, 10), (1, 2)]);
        apply(&mut mem, &plan);
        // Sequence 0 now decodes: it goes first, then the chunks by age.
        let plan = s.schedule(&mut mem);
        assert_eq!(plan.feeds, vec![(0, 1), (1, 8), (2, 3)]);
    }

    #[test]
    fn growth_that_does_not_fit_preempts_the_newest_and_resumes_it_first() {
        // Two FullKV sequences with three full blocks each, one block free.
        let full = Fake {
            reserve: None,
            to_feed: 1,
            held: 3,
            slots: 12,
        };
        let mut mem = Mem {
            free: 1,
            seqs: HashMap::from([(0, full.clone()), (1, full), (2, fake(None, 2))]),
            admitted: Vec::new(),
        };
        let mut s = Scheduler::new(8, 64);
        s.join_running(0);
        s.join_running(1);
        s.enqueue(2);
        // Both decode into a new block, one is free: the newest (1) goes; 2 still waits.
        let plan = s.schedule(&mut mem);
        assert_eq!(plan.preempted, vec![1]);
        assert_eq!(plan.feeds, vec![(0, 1)]);
        assert_eq!((s.n_running(), s.n_preempted(), s.n_waiting()), (1, 1, 1));
        assert_eq!(s.preemptions(), 1);
        apply(&mut mem, &plan);
        assert_eq!(mem.free, 3);
        // Sequence 1 must recompute 13 tokens (5 blocks with its headroom): it waits, and
        // 2 waits behind it although 2 alone would fit.
        let plan = s.schedule(&mut mem);
        assert_eq!(plan.feeds, vec![(0, 1)]);
        assert!(mem.admitted.is_empty());
        // 0 finishes: 1 resumes before 2, and both fit.
        s.remove(0);
        mem.free += mem.seqs[&0].held;
        let plan = s.schedule(&mut mem);
        assert_eq!(mem.admitted, vec![1, 2]);
        assert_eq!(plan.feeds, vec![(1, 13), (2, 2)]);
    }

    #[test]
    fn a_lone_sequence_that_cannot_grow_is_preempted_not_fed() {
        let mut mem = Mem {
            free: 0,
            seqs: HashMap::from([(0, fake(None, 4))]),
            admitted: Vec::new(),
        };
        let mut s = Scheduler::new(8, 64);
        s.join_running(0);
        let plan = s.schedule(&mut mem);
        assert!(plan.feeds.is_empty());
        assert_eq!(plan.preempted, vec![0]);
    }
}
