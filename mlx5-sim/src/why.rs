//! Why a work request failed, in the simulator's words (step 13): the check that
//! refused it names the object (an lkey or rkey, an MR and its range, an address, a QP
//! and its rights). The failing check leaves its sentence here ([`note`]); the error CQE
//! that follows takes it ([`take`]) and keeps it with the host, by QP and WQE index
//! ([`Reasons`]), for the front-end's explanation of that completion. Only failure
//! paths touch this: the thread that carries out a message carries out its checks and
//! writes its CQEs.

use std::cell::RefCell;
use std::collections::VecDeque;

thread_local! {
    /// The last failing check's sentence, until an error CQE takes it.
    static WHY: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// A check refused a request: `f` says why (called now, on the failure path only).
#[cold]
pub(crate) fn note(f: impl FnOnce() -> String) {
    WHY.with(|w| *w.borrow_mut() = Some(f()));
}

/// A memory key check refused `e`: its sentence ([`crate::dma::MrTable::explain`]). Out
/// of line, with plain arguments: the hot paths that call it keep their registers.
#[cold]
#[inline(never)]
pub(crate) fn key(mrs: &crate::dma::MrTable, e: crate::dma::DmaError, which: &'static str, op: &'static str) {
    let s = mrs.explain(&e, which, op);
    WHY.with(|w| *w.borrow_mut() = Some(s));
}

/// The responder QP `qpn` lacks `right`, which `what` needs.
#[cold]
#[inline(never)]
pub(crate) fn qp_lacks(qpn: u32, right: &'static str, what: &'static str) {
    let s =
        format!("the responder QP 0x{qpn:x} was not given {right} in its access flags, which {what} needs");
    WHY.with(|w| *w.borrow_mut() = Some(s));
}

/// The reason the last failing check left, taken (the requester's error CQE).
#[cold]
pub(crate) fn take() -> Option<String> {
    WHY.with(|w| w.borrow_mut().take())
}

/// Forgets a reason no error CQE took (a request that ended otherwise).
#[cold]
pub(crate) fn clear() {
    WHY.with(|w| *w.borrow_mut() = None);
}

/// The reasons of a host's latest error CQEs, by QP and WQE index (the last 256), and
/// the reasons waiting for a QP's next error CQE where that CQE comes later, maybe in
/// another thread (the packet wire: a NAK that travels, a timer that runs out).
#[derive(Debug, Default)]
pub(crate) struct Reasons {
    kept: VecDeque<(u32, u16, String)>,
    pending: Vec<(u32, String)>,
}

impl Reasons {
    const KEEP: usize = 256;

    /// `why` goes with the next error CQE of QP `qpn` (it replaces one waiting).
    #[cold]
    pub(crate) fn pend(&mut self, qpn: u32, why: String) {
        self.pending.retain(|(q, _)| *q != qpn);
        self.pending.push((qpn, why));
    }

    /// The reason waiting for QP `qpn`'s error CQE, taken.
    #[cold]
    pub(crate) fn take_pending(&mut self, qpn: u32) -> Option<String> {
        let i = self.pending.iter().position(|(q, _)| *q == qpn)?;
        Some(self.pending.swap_remove(i).1)
    }

    /// Keeps `why` for the error CQE of WQE `counter` of QP `qpn`.
    pub(crate) fn keep(&mut self, qpn: u32, counter: u16, why: String) {
        if self.kept.len() == Self::KEEP {
            self.kept.pop_front();
        }
        self.kept.push_back((qpn, counter, why));
    }

    /// The reason kept for that CQE, the latest if several.
    pub(crate) fn of(&self, qpn: u32, counter: u16) -> Option<&str> {
        self.kept.iter().rev().find(|(q, c, _)| *q == qpn && *c == counter).map(|(_, _, w)| w.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_goes_to_the_next_error_cqe_once() {
        clear();
        note(|| "rkey 0x5 is unknown".into());
        assert_eq!(take().as_deref(), Some("rkey 0x5 is unknown"));
        assert_eq!(take(), None);
        let mut r = Reasons::default();
        for i in 0..300u16 {
            r.keep(7, i, format!("n{i}"));
        }
        assert_eq!(r.of(7, 299), Some("n299"));
        assert_eq!(r.of(7, 10), None, "only the last 256 are kept");
        r.keep(7, 299, "again".into());
        assert_eq!(r.of(7, 299), Some("again"));
        // A reason waiting for a QP's later error CQE: the latest one, taken once.
        r.pend(9, "first".into());
        r.pend(9, "second".into());
        r.pend(10, "other".into());
        assert_eq!(r.take_pending(9).as_deref(), Some("second"));
        assert_eq!(r.take_pending(9), None);
        assert_eq!(r.take_pending(10).as_deref(), Some("other"));
    }
}
