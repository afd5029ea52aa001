//! The local side of a send WQE (spec §3.2, §3.3): the sources a SEND or WRITE gathers
//! (inline bytes, or memory through its lkey) and the sinks a READ or atomic scatters
//! into, every key checked. Used by the requester's general path and by trains on the
//! packet wire.

use crate::access;
use crate::dma::{Ask, MrTable, Sgl, Src, SrcList};
use crate::wire::opcode;
use crate::wqe::{self, Piece, SendWqe};

/// The local side of WQE `w` (bytes `wqe`) of a QP in PD `pdn`: the sources a SEND or
/// WRITE gathers, or the sinks a READ or atomic scatters into, each lkey checked (an
/// SGE needs LOCAL_WRITE to be written), appended to `srcs` or `sink` (filled in place:
/// the two lists are 2.5 KiB, and returning them cost a copy of that per message). False:
/// a check failed (LOCAL_PROT_ERR).
pub(crate) fn local_side<'w>(
    mrs: &MrTable,
    pdn: u32,
    w: &SendWqe,
    wqe: &'w [u8],
    srcs: &mut SrcList<'w>,
    sink: &mut Sgl,
) -> bool {
    let gather = matches!(
        w.ctrl.opcode,
        opcode::SEND | opcode::SEND_IMM | opcode::SEND_INVAL | opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM
    );
    let mut local_err = false;
    wqe::data_pieces(w, wqe, |p| {
        if local_err {
            return;
        }
        match p {
            Piece::Inline { off, len } => {
                // At most MAX_SGL pieces fit a WQE: never full here.
                let _ = srcs.push(Src::Bytes(&wqe[off..off + len]));
            }
            Piece::Sge { len: 0, .. } => {} // zero-length SGE: 0 bytes, not checked
            Piece::Sge { len, lkey, addr } => {
                let need = if gather { 0 } else { access::LOCAL_WRITE };
                match mrs.check(lkey, addr, u64::from(len), need, pdn) {
                    Ok(r) if gather && srcs.push(Src::Mem(r)) => {}
                    Ok(r) if !gather && sink.push(r) => {}
                    Ok(_) => local_err = true,
                    Err(crate::dma::DmaError::Spans { .. }) => {
                        // An indirect mkey's range across its KLM entries.
                        let a = Ask { key: lkey, addr, len: u64::from(len), need, pdn, remote: None };
                        local_err = !spanned_local(mrs, a, gather, srcs, sink);
                    }
                    Err(e) => {
                        local_err = true;
                        let op = if gather { "reading the gather list" } else { "writing the result" };
                        crate::why::key(mrs, e, "lkey", op);
                    }
                }
            }
        }
    });
    !local_err
}

/// [`local_side`]'s SGE of an indirect mkey whose range spans several KLM entries: each
/// piece it resolves to goes to `srcs` (`gather`) or `sink`. False on a refused check
/// (its reason noted) or when the lists are full.
#[cold]
#[inline(never)]
fn spanned_local(mrs: &MrTable, a: Ask, gather: bool, srcs: &mut SrcList<'_>, sink: &mut Sgl) -> bool {
    let mut pieces = Sgl::new();
    if let Err(e) = mrs.check_sgl(a, &mut pieces) {
        let op = if gather { "reading the gather list" } else { "writing the result" };
        crate::why::key(mrs, e, "lkey", op);
        return false;
    }
    pieces.regions().iter().all(|&r| if gather { srcs.push(Src::Mem(r)) } else { sink.push(r) })
}
