//! Queue sizing from requested capabilities (spec §1.4, §4.1): the rdma-core
//! rules, shared so that every backend sizes rings the same way.

use crate::backend::{QpCaps, QpKind};
use crate::error::{Error, Result};
use crate::types::DeviceCaps;

pub use crate::ring::seg::{DS_BYTES, MAX_DS, WQEBB_BYTES};
/// Largest SQ ring: the 16-bit `wqe_index` must identify a WQEBB unambiguously.
pub const MAX_SQ_WQEBBS: u32 = 32768;

/// Ring geometry of a QP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpGeometry {
    /// SQ WQEBBs (power of two).
    pub sq_wqe_cnt: u32,
    /// Largest WQE this QP may build, in DS units.
    pub max_wqe_ds: u32,
    /// Receive queue WQEs (a power of two; 0: none).
    pub rq_wqe_cnt: u32,
    /// Bytes per receive WQE (a power of two).
    pub rq_stride: u32,
}

fn align(v: u32, a: u32) -> u32 {
    v.div_ceil(a) * a
}

/// Size a QP's rings (spec §1.4, §3.8). The largest WQE is the largest of:
/// the fixed segments (ctrl, the 48-byte AV of UD/DCI, the raddr of RC/DCI)
/// plus `max_send_sge` data segments; an atomic (fixed + atomic + result);
/// the fixed segments plus `max_inline_data` inline bytes. A SEND carrying
/// the full inline payload must fit the device's WQE size.
pub fn qp_geometry(kind: QpKind, caps: &QpCaps, dev: &DeviceCaps) -> Result<QpGeometry> {
    let av = if matches!(kind, QpKind::Ud | QpKind::Dci) { 48 } else { 0 };
    let raddr = if matches!(kind, QpKind::Rc | QpKind::Dci) { DS_BYTES } else { 0 };
    let max_wqe_bytes = dev.max_wqe_sz_sq.min(MAX_DS * DS_BYTES);
    if caps.max_send_wr == 0 || caps.max_send_wr > dev.max_qp_wr {
        return Err(Error::InvalidArgument(format!(
            "max_send_wr {} not in 1..={}",
            caps.max_send_wr, dev.max_qp_wr
        )));
    }
    if caps.max_recv_wr > dev.max_qp_wr {
        return Err(Error::InvalidArgument(format!("max_recv_wr {} > {}", caps.max_recv_wr, dev.max_qp_wr)));
    }
    if caps.max_send_sge > dev.max_sge || caps.max_recv_sge > dev.max_sge {
        return Err(Error::InvalidArgument(format!(
            "max_send_sge {} / max_recv_sge {} > device max_sge {}",
            caps.max_send_sge, caps.max_recv_sge, dev.max_sge
        )));
    }
    // A SEND with the full inline payload must fit the device WQE size.
    let inline_bytes = DS_BYTES + av + align(4 + caps.max_inline_data, DS_BYTES);
    if caps.max_inline_data > 0 && inline_bytes > max_wqe_bytes {
        return Err(Error::InvalidArgument(format!(
            "max_inline_data {} does not fit a {max_wqe_bytes}-byte WQE",
            caps.max_inline_data
        )));
    }
    let fixed = DS_BYTES + av + raddr;
    let sge_bytes = fixed + DS_BYTES * caps.max_send_sge;
    let atomic_bytes = if raddr > 0 { fixed + 2 * DS_BYTES } else { 0 };
    let inline_write = if caps.max_inline_data > 0 { raddr + inline_bytes } else { 0 };
    let wqe_bytes = align(sge_bytes.max(atomic_bytes).max(inline_write).min(max_wqe_bytes), WQEBB_BYTES);
    let sq_wqe_cnt = (caps.max_send_wr * (wqe_bytes / WQEBB_BYTES)).next_power_of_two();
    if sq_wqe_cnt > MAX_SQ_WQEBBS {
        return Err(Error::InvalidArgument(format!(
            "send queue of {sq_wqe_cnt} WQEBBs exceeds {MAX_SQ_WQEBBS} (16-bit wqe_index)"
        )));
    }
    let (rq_wqe_cnt, rq_stride) = if caps.max_recv_wr == 0 {
        (0, DS_BYTES)
    } else {
        (caps.max_recv_wr.next_power_of_two(), (DS_BYTES * caps.max_recv_sge.max(1)).next_power_of_two())
    };
    Ok(QpGeometry { sq_wqe_cnt, max_wqe_ds: max_wqe_bytes / DS_BYTES, rq_wqe_cnt, rq_stride })
}

/// Ring geometry of an SRQ: `wqe_cnt` (a power of two, one more than the
/// usable capacity: the list keeps a spare) and `stride` (next segment plus
/// `max_sge` data segments, at least 32, a power of two).
pub fn srq_geometry(max_wr: u32, max_sge: u32, dev: &DeviceCaps) -> Result<(u32, u32)> {
    if max_wr == 0 || max_wr >= dev.max_qp_wr || max_sge > dev.max_sge {
        return Err(Error::InvalidArgument(format!(
            "SRQ of {max_wr} WQEs x {max_sge} SGEs exceeds the device limits ({} WQEs, {} SGEs)",
            dev.max_qp_wr, dev.max_sge
        )));
    }
    let wqe_cnt = (max_wr + 1).next_power_of_two();
    let stride = (DS_BYTES + DS_BYTES * max_sge.max(1)).max(32).next_power_of_two();
    Ok((wqe_cnt, stride))
}
