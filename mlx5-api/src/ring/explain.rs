//! Error completions explained in words (step 13): what each syndrome of spec §5.4
//! means, the vendor syndromes seen in practice, and the usual causes, as one sentence
//! naming the work request (its opcode, QP and WQE index). This is what can be said
//! from the CQE alone, as on hardware. `no_std`: the sentence goes to any
//! [`core::fmt::Write`] (a `String`, or the C ABI's buffer).

use core::fmt::{self, Write};

use super::cqe::Syndrome;

/// What a syndrome means, its `ibv_wc_status` name and the usual causes, from spec §5.4
/// (rdma-core's `mlx5_handle_error_cqe` and the IB specification's error classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyndromeText {
    /// The mlx5 name (`MLX5_CQE_SYNDROME_*`).
    pub name: &'static str,
    /// The `ibv_wc_status` rdma-core reports for it.
    pub ibv_status: &'static str,
    /// What happened, in a phrase.
    pub meaning: &'static str,
    /// What usually leads to it.
    pub causes: &'static str,
}

impl Syndrome {
    /// The words for this syndrome.
    pub fn text(self) -> SyndromeText {
        let t = |name, ibv_status, meaning, causes| SyndromeText { name, ibv_status, meaning, causes };
        match self {
            Syndrome::LocalLength => t(
                "LOCAL_LENGTH_ERR",
                "IBV_WC_LOC_LEN_ERR",
                "local length error: a message did not fit where it had to go",
                "a SEND longer than the receive buffer posted for it, a UD message longer than \
                 the path MTU, or a message above the QP's maximum size",
            ),
            Syndrome::LocalQpOperation => t(
                "LOCAL_QP_OP_ERR",
                "IBV_WC_LOC_QP_OP_ERR",
                "local QP operation error: the device could not carry out this WQE on this QP",
                "a malformed WQE (its DS count, segment order or inline size), or an opcode this \
                 QP type or this device does not carry",
            ),
            Syndrome::LocalProtection => t(
                "LOCAL_PROT_ERR",
                "IBV_WC_LOC_PROT_ERR",
                "local protection error: a local buffer failed its memory key check",
                "an lkey that is not registered or belongs to another PD, an address range \
                 outside its MR, or an MR without LOCAL_WRITE for a buffer the device writes \
                 (a receive, a READ's or an atomic's result)",
            ),
            Syndrome::WrFlush => t(
                "WR_FLUSH_ERR",
                "IBV_WC_WR_FLUSH_ERR",
                "flushed: the QP was in the error state, so this work request was not carried out",
                "an earlier work request on this QP failed (its completion carries the real \
                 error) or the QP was moved to ERR; reset the QP and post again",
            ),
            Syndrome::MwBind => t(
                "MW_BIND_ERR",
                "IBV_WC_MW_BIND_ERR",
                "memory window bind error: the window could not be bound",
                "an MR without MW_BIND access, a window range or rights beyond its MR's, or a \
                 window of the wrong type or already bound",
            ),
            Syndrome::BadResponse => t(
                "BAD_RESP_ERR",
                "IBV_WC_BAD_RESP_ERR",
                "bad response: the responder's answer did not match the request",
                "an unexpected response opcode or length from the remote QP",
            ),
            Syndrome::LocalAccess => t(
                "LOCAL_ACCESS_ERR",
                "IBV_WC_LOC_ACCESS_ERR",
                "local access error: this side's memory check failed while it handled an \
                 incoming request",
                "a receive buffer whose lkey or range is invalid when a SEND or a WRITE with \
                 immediate arrived",
            ),
            Syndrome::RemoteInvalidRequest => t(
                "REMOTE_INVAL_REQ_ERR",
                "IBV_WC_REM_INV_REQ_ERR",
                "remote invalid request: the responder refused the request as invalid",
                "a remote QP whose access flags lack REMOTE_WRITE, REMOTE_READ or \
                 REMOTE_ATOMIC for this operation, a SEND longer than the receive posted \
                 there, a misaligned atomic, or more READs and atomics than its \
                 max_dest_rd_atomic",
            ),
            Syndrome::RemoteAccess => t(
                "REMOTE_ACCESS_ERR",
                "IBV_WC_REM_ACCESS_ERR",
                "remote access error: the responder refused the rkey or the address range",
                "an rkey that is wrong, invalidated or of another PD, a range outside the \
                 remote MR, or a remote MR registered without the right (REMOTE_WRITE, \
                 REMOTE_READ, REMOTE_ATOMIC)",
            ),
            Syndrome::RemoteOperation => t(
                "REMOTE_OP_ERR",
                "IBV_WC_REM_OP_ERR",
                "remote operation error: the responder could not complete the operation",
                "an internal error at the remote QP, e.g. its receive queue or the memory it \
                 writes failed",
            ),
            Syndrome::TransportRetryExceeded => t(
                "TRANSPORT_RETRY_EXC_ERR",
                "IBV_WC_RETRY_EXC_ERR",
                "transport retry counter exceeded: no acknowledgement came after retry_cnt retries",
                "a remote QP that is gone, not in RTR/RTS or not connected back to this QP; a \
                 wrong LID, GID or QPN in the connection; a link that is down or loses \
                 packets; a local ACK timeout shorter than the round trip",
            ),
            Syndrome::RnrRetryExceeded => t(
                "RNR_RETRY_EXC_ERR",
                "IBV_WC_RNR_RETRY_EXC_ERR",
                "receiver-not-ready retry counter exceeded: the responder had no receive \
                 posted, rnr_retry times",
                "a peer that posts receives too slowly or not at all; raise rnr_retry (7 \
                 retries forever) or min_rnr_timer",
            ),
            Syndrome::RemoteAborted => t(
                "REMOTE_ABORTED_ERR",
                "IBV_WC_REM_ABORT_ERR",
                "remote aborted: the responder aborted the operation",
                "with vendor syndrome 0x93, a page fault of on-demand paging at the responder",
            ),
            Syndrome::Other(_) => t(
                "unknown",
                "IBV_WC_GENERAL_ERR",
                "an error syndrome this library does not name",
                "see the device's programming manual for this syndrome",
            ),
        }
    }
}

/// Vendor syndromes seen with a syndrome (spec §5.4, informative and firmware
/// specific), in words; `None` for the others.
pub fn vendor_text(syndrome: Syndrome, vendor: u8) -> Option<&'static str> {
    match (syndrome, vendor) {
        (Syndrome::WrFlush, 0xf9) => Some("the usual flush"),
        (Syndrome::TransportRetryExceeded, 0x81) => Some("retries exhausted"),
        (Syndrome::RemoteAborted, 0x93) => Some("an on-demand-paging page fault"),
        _ => None,
    }
}

/// The name of an mlx5 send opcode (spec §2.3), for the sentence.
pub fn send_opcode_name(op: u8) -> &'static str {
    match op {
        0x00 => "NOP",
        0x01 => "SEND with invalidate",
        0x08 => "RDMA WRITE",
        0x09 => "RDMA WRITE with immediate",
        0x0a => "SEND",
        0x0b => "SEND with immediate",
        0x10 => "RDMA READ",
        0x11 => "atomic compare-and-swap",
        0x12 => "atomic fetch-and-add",
        0x14 => "masked compare-and-swap",
        0x15 => "masked fetch-and-add",
        0x25 => "UMR",
        _ => "send WQE",
    }
}

/// What failed, for the sentence: a send WQE (its mlx5 opcode), a receive, or
/// nothing known (a syndrome seen elsewhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// A send WQE.
    Send {
        /// Its mlx5 opcode.
        opcode: u8,
        /// The QP (DCI) that posted it.
        qpn: u32,
        /// Its WQE index.
        wqe_counter: u16,
    },
    /// A receive.
    Recv {
        /// The QP it was posted to (or that took it from its SRQ).
        qpn: u32,
        /// The receive counter (or SRQ WQE index).
        wqe_counter: u16,
    },
    /// Only the syndrome is known.
    Unknown,
}

/// Writes the sentence: what failed, the syndrome's meaning with its names and the
/// vendor syndrome, then the usual causes. E.g. "RDMA WRITE on QP 0x123 (WQE 5)
/// failed: remote access error: the responder refused the rkey or the address range
/// (syndrome 0x13 REMOTE_ACCESS_ERR, IBV_WC_REM_ACCESS_ERR; vendor syndrome 0x88).
/// Usual causes: ...".
pub fn write_explanation(w: &mut impl Write, failed: Failed, syndrome: Syndrome, vendor: u8) -> fmt::Result {
    write_explanation_with(w, failed, syndrome, vendor, None)
}

/// [`write_explanation`] with what the device knows of the failed check (the
/// simulator: the key, MR, range or QP and what it lacked), said before the usual
/// causes: "... What failed: rkey 0x1000 does not allow RDMA WRITE (its MR was
/// registered without REMOTE_WRITE). Usual causes: ...".
pub fn write_explanation_with(
    w: &mut impl Write,
    failed: Failed,
    syndrome: Syndrome,
    vendor: u8,
    detail: Option<&str>,
) -> fmt::Result {
    let t = syndrome.text();
    match failed {
        Failed::Send { opcode, qpn, wqe_counter } => {
            write!(w, "{} on QP 0x{qpn:x} (WQE {wqe_counter}) failed: ", send_opcode_name(opcode))?
        }
        Failed::Recv { qpn, wqe_counter } => {
            write!(w, "A receive on QP 0x{qpn:x} (WQE {wqe_counter}) failed: ")?
        }
        Failed::Unknown => {}
    }
    write!(w, "{} (syndrome 0x{:02x} {}, {}", t.meaning, syndrome.raw(), t.name, t.ibv_status)?;
    if vendor != 0 {
        write!(w, "; vendor syndrome 0x{vendor:02x}")?;
        if let Some(v) = vendor_text(syndrome, vendor) {
            write!(w, ", {v}")?;
        }
    }
    write!(w, ").")?;
    if let Some(d) = detail {
        write!(w, " What failed: {d}.")?;
    }
    write!(w, " Usual causes: {}.", t.causes)
}

/// A [`Write`] into a byte buffer that keeps what fits (leaving room for a NUL) and
/// counts everything, as `snprintf` does.
#[derive(Debug)]
pub struct Truncating<'a> {
    buf: &'a mut [u8],
    /// Bytes the whole text takes.
    pub needed: usize,
}

impl<'a> Truncating<'a> {
    /// Writes into `buf` (which may be empty).
    pub fn new(buf: &'a mut [u8]) -> Self {
        Truncating { buf, needed: 0 }
    }

    /// NUL-terminates what was kept (when the buffer has a byte for it).
    pub fn finish(self) -> usize {
        if !self.buf.is_empty() {
            let end = self.needed.min(self.buf.len() - 1);
            self.buf[end] = 0;
        }
        self.needed
    }
}

impl Write for Truncating<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.buf.len().saturating_sub(1);
        if self.needed < room {
            let n = s.len().min(room - self.needed);
            self.buf[self.needed..self.needed + n].copy_from_slice(&s.as_bytes()[..n]);
        }
        self.needed += s.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every syndrome of spec §5.4 has its own name and the rdma-core status of the
    /// reference's table, and an explanation of more than its name.
    #[test]
    fn each_syndrome_of_the_reference_has_its_words() {
        let table = [
            (0x01, "LOCAL_LENGTH_ERR", "IBV_WC_LOC_LEN_ERR"),
            (0x02, "LOCAL_QP_OP_ERR", "IBV_WC_LOC_QP_OP_ERR"),
            (0x04, "LOCAL_PROT_ERR", "IBV_WC_LOC_PROT_ERR"),
            (0x05, "WR_FLUSH_ERR", "IBV_WC_WR_FLUSH_ERR"),
            (0x06, "MW_BIND_ERR", "IBV_WC_MW_BIND_ERR"),
            (0x10, "BAD_RESP_ERR", "IBV_WC_BAD_RESP_ERR"),
            (0x11, "LOCAL_ACCESS_ERR", "IBV_WC_LOC_ACCESS_ERR"),
            (0x12, "REMOTE_INVAL_REQ_ERR", "IBV_WC_REM_INV_REQ_ERR"),
            (0x13, "REMOTE_ACCESS_ERR", "IBV_WC_REM_ACCESS_ERR"),
            (0x14, "REMOTE_OP_ERR", "IBV_WC_REM_OP_ERR"),
            (0x15, "TRANSPORT_RETRY_EXC_ERR", "IBV_WC_RETRY_EXC_ERR"),
            (0x16, "RNR_RETRY_EXC_ERR", "IBV_WC_RNR_RETRY_EXC_ERR"),
            (0x22, "REMOTE_ABORTED_ERR", "IBV_WC_REM_ABORT_ERR"),
            (0x7e, "unknown", "IBV_WC_GENERAL_ERR"),
        ];
        let mut meanings = std::collections::HashSet::new();
        for (raw, name, status) in table {
            let t = Syndrome::from_raw(raw).text();
            assert_eq!((t.name, t.ibv_status), (name, status), "syndrome {raw:#x}");
            assert!(meanings.insert(t.meaning) && t.causes.len() > 20, "{raw:#x}: {t:?}");
        }
    }

    #[test]
    fn the_sentence_names_the_work_request_and_the_syndrome() {
        let mut s = String::new();
        let f = Failed::Send { opcode: 0x08, qpn: 0x123, wqe_counter: 5 };
        write_explanation(&mut s, f, Syndrome::RemoteAccess, 0x88).unwrap();
        assert!(s.starts_with("RDMA WRITE on QP 0x123 (WQE 5) failed: remote access error: "), "{s}");
        assert!(
            s.contains("(syndrome 0x13 REMOTE_ACCESS_ERR, IBV_WC_REM_ACCESS_ERR; vendor syndrome 0x88)"),
            "{s}"
        );
        assert!(s.contains("Usual causes: an rkey that is wrong"), "{s}");
        let mut s = String::new();
        write_explanation(&mut s, Failed::Unknown, Syndrome::TransportRetryExceeded, 0x81).unwrap();
        assert!(s.starts_with("transport retry counter exceeded"), "{s}");
        assert!(s.contains("vendor syndrome 0x81, retries exhausted"), "{s}");
        let mut s = String::new();
        write_explanation(&mut s, Failed::Recv { qpn: 7, wqe_counter: 0 }, Syndrome::WrFlush, 0).unwrap();
        assert!(s.starts_with("A receive on QP 0x7 (WQE 0) failed: flushed") && !s.contains("vendor"), "{s}");
    }

    #[test]
    fn a_short_buffer_keeps_what_fits_and_counts_all() {
        let mut whole = String::new();
        write_explanation(&mut whole, Failed::Unknown, Syndrome::LocalLength, 0).unwrap();
        let mut buf = [0xffu8; 16];
        let mut t = Truncating::new(&mut buf);
        write_explanation(&mut t, Failed::Unknown, Syndrome::LocalLength, 0).unwrap();
        assert_eq!(t.finish(), whole.len());
        assert_eq!(&buf[..15], &whole.as_bytes()[..15]);
        assert_eq!(buf[15], 0);
        let mut t = Truncating::new(&mut []);
        write_explanation(&mut t, Failed::Unknown, Syndrome::LocalLength, 0).unwrap();
        assert_eq!(t.finish(), whole.len());
    }
}
