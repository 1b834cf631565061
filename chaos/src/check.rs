//! Linearizability of register histories (Wing & Gong's search with memoisation, as in Lowe's
//! and porcupine's checkers), one key at a time.
//!
//! A history is the calls clients made: when each was invoked, when (if) its answer came, and
//! the answer. A write whose answer never came, or came as an error, may have taken effect at any
//! point after its invocation, or never: it is open-ended and optional. Failed reads are dropped.
//! The history is linearizable if the calls can be put in one order that respects real time
//! (a call answered before another was invoked comes first) in which every answer is what a
//! single register would have given.

use std::collections::HashSet;
use std::time::Duration;

/// What a call asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    /// Writes a unique value.
    Write(u64),
    /// Deletes the key.
    Delete,
    /// Writes `new` if the register holds `expect` (`None`: absent).
    Cas {
        expect: Option<u64>,
        new: u64,
    },
}

/// What came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The value read (`None`: absent).
    Read(Option<u64>),
    /// A put or delete was acknowledged.
    Written,
    /// Whether the compare held (and the write happened).
    Cas(bool),
    /// No answer, or an error: the outcome is unknown (only writes and CAS are kept).
    Unknown,
}

/// One call on one key.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    pub client: usize,
    pub op: Op,
    pub answer: Answer,
    pub invoked: Duration,
    /// When the answer came; `None` for unknown outcomes.
    pub answered: Option<Duration>,
}

/// The register after applying `call` to `state`, or `None` if the call's answer is impossible
/// from `state`.
fn step(state: Option<u64>, call: &Call) -> Option<Option<u64>> {
    match (call.op, call.answer) {
        (Op::Read, Answer::Read(v)) => (v == state).then_some(state),
        (Op::Write(v), Answer::Written | Answer::Unknown) => Some(Some(v)),
        (Op::Delete, Answer::Written | Answer::Unknown) => Some(None),
        (Op::Cas { expect, new }, Answer::Cas(true)) => (state == expect).then_some(Some(new)),
        (Op::Cas { expect, .. }, Answer::Cas(false)) => (state != expect).then_some(state),
        // An unknown CAS that took effect: it found `expect`.
        (Op::Cas { expect, new }, Answer::Unknown) => (state == expect).then_some(Some(new)),
        _ => None,
    }
}

/// Whether `calls` (all on one key, the register starting absent) are linearizable.
pub fn linearizable(calls: &[Call]) -> bool {
    let calls: Vec<Call> =
        calls.iter().filter(|c| !(c.op == Op::Read && c.answer == Answer::Unknown)).copied().collect();
    let n = calls.len();
    let words = n.div_ceil(64);
    let required: Vec<bool> = calls.iter().map(|c| c.answered.is_some()).collect();
    let mut done = vec![0u64; words];
    let mut seen: HashSet<(Vec<u64>, Option<u64>)> = HashSet::new();
    search(&calls, &required, &mut done, None, &mut seen)
}

/// The shortest prefix of `calls` (in invocation order) that is already not linearizable, found
/// by bisection; `None` if the whole history is linearizable. The violation is near its end.
pub fn shortest_failing_prefix(calls: &[Call]) -> Option<Vec<Call>> {
    let mut calls = calls.to_vec();
    calls.sort_by_key(|c| c.invoked);
    if linearizable(&calls) {
        return None;
    }
    let prefix = |n: usize| calls[..n].to_vec();
    let (mut good, mut bad) = (0, calls.len());
    while bad - good > 1 {
        let mid = (good + bad) / 2;
        if linearizable(&prefix(mid)) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Some(prefix(bad))
}

fn is_done(done: &[u64], i: usize) -> bool {
    done[i / 64] & (1 << (i % 64)) != 0
}

fn search(
    calls: &[Call],
    required: &[bool],
    done: &mut Vec<u64>,
    state: Option<u64>,
    seen: &mut HashSet<(Vec<u64>, Option<u64>)>,
) -> bool {
    // Every answered call placed: the rest are unknown writes that may never have happened.
    if (0..calls.len()).all(|i| is_done(done, i) || !required[i]) {
        return true;
    }
    if !seen.insert((done.clone(), state)) {
        return false;
    }
    // A call may go next only if it was invoked before every pending answered call returned.
    let horizon = (0..calls.len())
        .filter(|&i| !is_done(done, i))
        .filter_map(|i| calls[i].answered)
        .min()
        .unwrap_or(Duration::MAX);
    for i in 0..calls.len() {
        if is_done(done, i) || calls[i].invoked > horizon {
            continue;
        }
        if let Some(next) = step(state, &calls[i]) {
            done[i / 64] |= 1 << (i % 64);
            let ok = search(calls, required, done, next, seen);
            done[i / 64] &= !(1 << (i % 64));
            if ok {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(op: Op, answer: Answer, invoked: u64, answered: Option<u64>) -> Call {
        Call {
            client: 0,
            op,
            answer,
            invoked: Duration::from_millis(invoked),
            answered: answered.map(Duration::from_millis),
        }
    }

    #[test]
    fn sequential_histories() {
        let ok = [
            call(Op::Write(1), Answer::Written, 0, Some(1)),
            call(Op::Read, Answer::Read(Some(1)), 2, Some(3)),
            call(Op::Cas { expect: Some(1), new: 2 }, Answer::Cas(true), 4, Some(5)),
            call(Op::Cas { expect: Some(1), new: 3 }, Answer::Cas(false), 6, Some(7)),
            call(Op::Read, Answer::Read(Some(2)), 8, Some(9)),
        ];
        assert!(linearizable(&ok));
        // A stale read after a completed write is not.
        let stale = [call(Op::Write(1), Answer::Written, 0, Some(1)), call(Op::Read, Answer::Read(None), 2, Some(3))];
        assert!(!linearizable(&stale));
        // A lost acknowledged write is not.
        let lost = [
            call(Op::Write(1), Answer::Written, 0, Some(1)),
            call(Op::Write(2), Answer::Written, 2, Some(3)),
            call(Op::Read, Answer::Read(Some(1)), 4, Some(5)),
        ];
        assert!(!linearizable(&lost));
    }

    #[test]
    fn concurrency_and_unknown_outcomes() {
        // Overlapping writes: either order explains the read.
        let overlap = [
            call(Op::Write(1), Answer::Written, 0, Some(10)),
            call(Op::Write(2), Answer::Written, 1, Some(9)),
            call(Op::Read, Answer::Read(Some(1)), 11, Some(12)),
        ];
        assert!(linearizable(&overlap));
        // An unknown write may show up late, or never.
        let late = [
            call(Op::Write(1), Answer::Unknown, 0, None),
            call(Op::Read, Answer::Read(None), 5, Some(6)),
            call(Op::Read, Answer::Read(Some(1)), 7, Some(8)),
        ];
        assert!(linearizable(&late));
        let never = [call(Op::Write(1), Answer::Unknown, 0, None), call(Op::Read, Answer::Read(None), 5, Some(6))];
        assert!(linearizable(&never));
        // But not before it was invoked.
        let early = [call(Op::Read, Answer::Read(Some(1)), 0, Some(1)), call(Op::Write(1), Answer::Unknown, 2, None)];
        assert!(!linearizable(&early));
        // Nor back and forth.
        let shortest = shortest_failing_prefix(&[
            call(Op::Write(1), Answer::Written, 0, Some(1)),
            call(Op::Read, Answer::Read(Some(1)), 2, Some(3)),
            call(Op::Read, Answer::Read(None), 4, Some(5)),
            call(Op::Write(2), Answer::Written, 6, Some(7)),
        ])
        .expect("not linearizable");
        assert_eq!(shortest.len(), 3, "the stale read ends the shortest failing prefix");
        let flicker = [
            call(Op::Write(1), Answer::Unknown, 0, None),
            call(Op::Read, Answer::Read(Some(1)), 5, Some(6)),
            call(Op::Read, Answer::Read(None), 7, Some(8)),
        ];
        assert!(!linearizable(&flicker));
    }
}
