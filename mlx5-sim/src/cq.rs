//! Completion queue ring owned by the model: owner bit, overrun check against the
//! consumer index in the CQ doorbell record, `op_own` written last (spec §5.5, §5.6).

use crate::mem::DevMem;
use crate::wire::cqe::OP_OWN_OFFSET;

/// Initial `op_own` of every slot: opcode INVALID, owner 0 (spec §5.5).
pub(crate) const OP_OWN_INIT: u8 = 0xf0;

#[derive(Debug)]
pub(crate) struct Cq {
    pub mem: DevMem,
    pub dbrec: DevMem,
    pub cqe_cnt: u32,
    pub cqe_size: u32,
    log_cnt: u32,
    /// Free-running producer index.
    pi: u32,
    /// Set while the CQ is overrun (to raise one event per episode).
    pub overrun: bool,
}

/// The CQE did not fit: `pi - ci >= cqe_cnt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overrun;

impl Cq {
    pub(crate) fn new(cqe_cnt: u32, cqe_size: u32) -> Option<Cq> {
        let len = (cqe_cnt as usize).checked_mul(cqe_size as usize)?;
        let mem = DevMem::new(len, 4096)?;
        let dbrec = DevMem::new(64, 64)?;
        for i in 0..cqe_cnt as usize {
            mem.write(i * cqe_size as usize + cqe_size as usize - 1, &[OP_OWN_INIT]);
        }
        Some(Cq { mem, dbrec, cqe_cnt, cqe_size, log_cnt: cqe_cnt.trailing_zeros(), pi: 0, overrun: false })
    }

    /// Consumer index published by the driver in dbrec word 0 (24 bits).
    pub(crate) fn consumer_index(&self) -> u32 {
        self.dbrec.load_be32(0) & 0xff_ffff
    }

    /// Writes `cqe` (its owner bit is replaced) into the next slot: bytes 0..63 of the CQE
    /// proper (for 128-byte CQEs also the zeroed first half of the slot) except `op_own`,
    /// then `op_own` with a Release store.
    pub(crate) fn push(&mut self, cqe: &[u8; 64]) -> Result<(), Overrun> {
        let ci = self.consumer_index();
        if self.pi.wrapping_sub(ci) & 0xff_ffff >= self.cqe_cnt {
            return Err(Overrun);
        }
        let owner = ((self.pi >> self.log_cnt) & 1) as u8;
        let slot = (self.pi & (self.cqe_cnt - 1)) as usize * self.cqe_size as usize;
        let proper = if self.cqe_size == 128 {
            self.mem.write(slot, &[0u8; 64]);
            slot + 64
        } else {
            slot
        };
        self.mem.write(proper, &cqe[..OP_OWN_OFFSET]);
        let op_own = (cqe[OP_OWN_OFFSET] & !1) | owner;
        self.mem.store_u8_release(proper + OP_OWN_OFFSET, op_own);
        self.pi = self.pi.wrapping_add(1);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_flips_per_pass_and_overrun_is_detected() {
        let mut cq = Cq::new(2, 64).unwrap();
        let mut b = [0u8; 64];
        assert_eq!(b[63], 0);
        let mut slot = [0u8; 1];
        cq.mem.read(63, &mut slot);
        assert_eq!(slot[0], OP_OWN_INIT);
        b[63] = 0x01; // owner bit from the caller is ignored
        cq.push(&b).unwrap();
        cq.push(&b).unwrap();
        assert_eq!(cq.push(&b), Err(Overrun));
        cq.dbrec.store_be32(0, 2);
        cq.push(&b).unwrap();
        cq.mem.read(63, &mut slot);
        assert_eq!(slot[0], 0x01, "second pass: owner 1");
        cq.mem.read(127, &mut slot);
        assert_eq!(slot[0], 0x00, "first pass: owner 0");
    }

    #[test]
    fn cqe128_proper_is_second_half() {
        let mut cq = Cq::new(4, 128).unwrap();
        let mut b = [0u8; 64];
        b[0x3c] = 0xab;
        b[63] = 0x20;
        cq.push(&b).unwrap();
        let mut s = [0u8; 128];
        cq.mem.read(0, &mut s);
        assert_eq!(s[64 + 0x3c], 0xab);
        assert_eq!(s[127], 0x20);
        assert_eq!(s[63], 0);
    }
}
