//! The compression recorder: what each compression event of one sequence kept, per
//! (layer, KV head), and the terms that decided it, for `rkv inspect` (issue 28).
//!
//! Owns [`CompressionRecord`] (the events of one sequence, compactly: positions as
//! half-open ranges, scores as f16) and the translation of one head's
//! [`Explained`] selection from slot indices to absolute positions.
//! Must not know: HTML, JSON, files, the CLI. It is off unless a caller asks for it
//! ([`crate::compression::SeqCompression::start_recording`]); off, a compression checks
//! one `Option` and allocates nothing for it.

use half::f16;
use rkv_core::policy::Explained;

/// Half-open ranges `[start, end)` of ascending positions.
pub type Ranges = Vec<(u32, u32)>;

/// One (layer, KV head) at one compression event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeadEvent {
    /// Positions resident before the event, in slot order (ascending).
    pub resident: Ranges,
    /// Positions kept by the event.
    pub kept: Ranges,
    /// Importance of the candidates, in slot order: the first `L - w` resident slots for
    /// R-KV and SnapKV, all `L` (accumulated attention) for H2O; empty for StreamingLLM.
    pub importance: Vec<f16>,
    /// Redundancy of the same candidates (R-KV only; else empty).
    pub redundancy: Vec<f16>,
    /// For each evicted position, ascending: the position of the newer slot whose key
    /// made it redundant (its latest similar slot `r(i)`, when that is newer), else
    /// `None`. R-KV only; else empty.
    pub redundant_by: Vec<Option<u32>>,
}

/// One compression event of a sequence.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventRecord {
    /// Resident slots per (layer, head) before the event.
    pub slots_before: usize,
    /// Absolute position of the newest token when the event ran.
    pub position: u32,
    /// `[n_layers * n_kv_heads]`, layer-major.
    pub heads: Vec<HeadEvent>,
}

/// Every compression event of one sequence, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompressionRecord {
    pub n_layers: usize,
    pub n_kv_heads: usize,
    pub events: Vec<EventRecord>,
}

impl CompressionRecord {
    pub fn new(n_layers: usize, n_kv_heads: usize) -> Self {
        Self {
            n_layers,
            n_kv_heads,
            events: Vec::new(),
        }
    }
}

/// Ascending positions as half-open ranges.
pub fn to_ranges(positions: impl IntoIterator<Item = u32>) -> Ranges {
    let mut out: Ranges = Vec::new();
    for p in positions {
        match out.last_mut() {
            Some((_, end)) if *end == p => *end = p + 1,
            _ => out.push((p, p + 1)),
        }
    }
    out
}

/// One head's event: `positions` are the `L` resident slots' positions before the event
/// (slot order), `ex` the selection over those slots.
pub fn head_event(positions: &[u32], ex: &Explained) -> HeadEvent {
    let mut is_kept = vec![false; positions.len()];
    for &s in &ex.kept {
        if let Some(k) = is_kept.get_mut(s) {
            *k = true;
        }
    }
    let redundant_by = if ex.latest_similar.is_empty() {
        Vec::new()
    } else {
        (0..positions.len())
            .filter(|&s| !is_kept[s])
            .map(|s| match ex.latest_similar.get(s) {
                Some(&Some(r)) if r > s => positions.get(r).copied(),
                _ => None,
            })
            .collect()
    };
    HeadEvent {
        resident: to_ranges(positions.iter().copied()),
        kept: to_ranges(ex.kept.iter().filter_map(|&s| positions.get(s).copied())),
        importance: ex.importance.iter().map(|&x| f16::from_f32(x)).collect(),
        redundancy: ex.redundancy.iter().map(|&x| f16::from_f64(x)).collect(),
        redundant_by,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_runs() {
        assert_eq!(to_ranges([]), Vec::<(u32, u32)>::new());
        assert_eq!(to_ranges([3]), vec![(3, 4)]);
        assert_eq!(to_ranges([0, 1, 2, 5, 6, 9]), vec![(0, 3), (5, 7), (9, 10)]);
    }

    /// Slots map to their positions; an evicted slot names its latest similar slot only
    /// when that slot is newer.
    #[test]
    fn head_event_maps_slots_to_positions() {
        let positions = [0, 1, 2, 7, 8, 9, 10];
        let ex = Explained {
            kept: vec![0, 3, 5, 6],
            importance: vec![0.5, 0.25, 0.125, 1.0, 2.0],
            redundancy: vec![0.1, 0.2, 0.3, 0.4, 0.5],
            latest_similar: vec![None, Some(4), Some(0), None, Some(2), None, None],
        };
        let ev = head_event(&positions, &ex);
        assert_eq!(ev.resident, vec![(0, 3), (7, 11)]);
        assert_eq!(ev.kept, vec![(0, 1), (7, 8), (9, 11)]);
        // Evicted slots 1, 2, 4: slot 1's match (slot 4, position 8) is newer; slot 2's
        // (slot 0) is older; slot 4's (slot 2) is older.
        assert_eq!(ev.redundant_by, vec![Some(8), None, None]);
        assert_eq!(ev.importance[3], f16::from_f32(1.0));
        assert_eq!(ev.redundancy.len(), 5);
        let plain = head_event(
            &positions,
            &Explained {
                kept: vec![0, 1, 2, 6],
                ..Explained::default()
            },
        );
        assert!(plain.redundant_by.is_empty() && plain.importance.is_empty());
        assert_eq!(plain.kept, vec![(0, 3), (10, 11)]);
    }
}
