//! Shared receive queue (spec §4.3): a linked list of WQEs in model-owned memory. The driver
//! posts along the list and re-links freed WQEs at its tail; the device consumes WQEs in
//! list order starting at index 0, following each consumed WQE's `next_wqe_index`, and never
//! more than the count of posted WQEs in doorbell-record word 0.

use crate::mem::DevMem;
use crate::wire::SrqNextSeg;
use crate::{SimError, SrqInitAttr};

/// Largest SRQ stride the model accepts (next segment + 63 scatter entries).
pub(crate) const MAX_SRQ_STRIDE: u32 = 1024;

#[derive(Debug)]
pub(crate) struct Srq {
    pub pdn: u32,
    pub wqe_cnt: u32,
    pub stride: u32,
    pub buf: DevMem,
    pub dbrec: DevMem,
    /// Index of the WQE the device consumes next.
    pub head: u16,
    /// WQEs consumed so far (16 bits, compared with the posted count in dbrec word 0).
    pub consumed: u16,
    /// The armed limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): when a receive leaves
    /// fewer WQEs posted than this, the SRQ-limit event fires once and disarms.
    pub limit: Option<u16>,
}

impl Srq {
    /// Validates `attr` and allocates the ring and doorbell record, or takes them in the
    /// program's memory when `user` names them (CREATE_SRQ's udata).
    ///
    /// # Safety
    /// As [`DevMem::borrowed`] for `user.buf` (`wqe_cnt * stride` bytes) and
    /// `user.dbrec` (4 bytes).
    pub(crate) unsafe fn new_in(attr: &SrqInitAttr, user: Option<crate::UserRings>) -> Result<Srq, SimError> {
        let bad = |what| Err(SimError::InvalidArgument { what });
        // mlx5_ib makes roundup_pow_of_two(max_wr + 1) entries: one for max_wr 0.
        if !attr.wqe_cnt.is_power_of_two() || !(1..=32768).contains(&attr.wqe_cnt) {
            return bad("SRQ wqe_cnt must be a power of two in 1..=32768");
        }
        if !attr.stride.is_power_of_two() || !(32..=MAX_SRQ_STRIDE).contains(&attr.stride) {
            return bad("SRQ stride must be a power of two in 32..=1024");
        }
        if attr.user_index > 0xff_ffff {
            return bad("user_index must fit in 24 bits");
        }
        let len = attr.wqe_cnt as usize * attr.stride as usize;
        let (buf, dbrec) = match user {
            None => (
                DevMem::new(len, 4096).ok_or(SimError::OutOfMemory)?,
                DevMem::new(64, 64).ok_or(SimError::OutOfMemory)?,
            ),
            // SAFETY: caller contract.
            Some(u) => unsafe {
                (
                    DevMem::borrowed(u.buf, len, 64).ok_or(SimError::InvalidArgument {
                        what: "SRQ buffer: null or not 64-byte aligned",
                    })?,
                    DevMem::borrowed(u.dbrec, 4, 4).ok_or(SimError::InvalidArgument {
                        what: "doorbell record: null or not 4-byte aligned",
                    })?,
                )
            },
        };
        Ok(Srq {
            pdn: attr.pdn,
            wqe_cnt: attr.wqe_cnt,
            stride: attr.stride,
            buf,
            dbrec,
            head: 0,
            consumed: 0,
            limit: None,
        })
    }

    /// WQEs posted and not yet consumed.
    pub(crate) fn available(&self) -> u16 {
        (self.dbrec.load_be32(0) as u16).wrapping_sub(self.consumed)
    }

    /// Copies the WQE the device would consume next (one stride) into `out`; returns its
    /// index and length, or `None` when no WQE is available.
    pub(crate) fn peek(&self, out: &mut [u8]) -> Option<(u16, usize)> {
        if self.available() == 0 {
            return None;
        }
        let stride = self.stride as usize;
        let idx = self.head & (self.wqe_cnt as u16).wrapping_sub(1);
        let out = out.get_mut(..stride)?;
        self.buf.read(usize::from(idx) * stride, out).then_some((idx, stride))
    }

    /// Consumes the head WQE: the next head is its `next_wqe_index` (read now, so a
    /// driver that linked the WQE before posting it is followed). Out-of-range indices are
    /// masked to the ring.
    pub(crate) fn consume(&mut self) {
        let stride = self.stride as usize;
        let idx = self.head & (self.wqe_cnt as u16).wrapping_sub(1);
        let mut next = [0u8; 16];
        self.buf.read(usize::from(idx) * stride, &mut next);
        let n = SrqNextSeg::new_unchecked(&next[..]).next_wqe_index();
        self.head = n & (self.wqe_cnt as u16).wrapping_sub(1);
        self.consumed = self.consumed.wrapping_add(1);
    }

    /// After a consumption: whether the armed limit was crossed (fewer WQEs posted than
    /// the limit); if so the limit disarms, and the caller raises the event.
    pub(crate) fn limit_crossed(&mut self) -> bool {
        match self.limit {
            Some(l) if self.available() < l => {
                self.limit = None;
                true
            }
            _ => false,
        }
    }
}
