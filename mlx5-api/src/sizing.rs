//! Queue sizing from requested capabilities (spec §1.4, §4.1), computed as
//! rdma-core's mlx5 provider does (`providers/mlx5/verbs.c`: `_sq_overhead`,
//! `mlx5_calc_send_wqe`, `mlx5_calc_sq_size`, `mlx5_calc_rcv_wqe`,
//! `mlx5_calc_rq_size`), so that both backends size rings alike and a QP the
//! hardware would refuse with EINVAL is refused here first, with a typed error.

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
    /// Bytes of one send WQE slot as rdma-core sizes it (a multiple of 64).
    pub sq_wqe_size: u32,
    /// The inline payload that slot holds (rdma-core reports it back in
    /// `cap.max_inline_data`; at least what was asked).
    pub max_inline_data: u32,
}

fn align(v: u32, a: u32) -> u32 {
    v.div_ceil(a) * a
}

/// The send-WQE overhead rdma-core reserves (`_sq_overhead`) for the
/// operations this front-end posts, which the hardware backend names in
/// `send_ops_flags`: the control segment and room for the largest operation
/// (RDMA: ctrl + raddr; atomic: ctrl + raddr + atomic segment), plus the
/// 48-byte datagram segment of UD and DCI. Without `send_ops_flags`
/// rdma-core would also reserve memory-window / UMR room (192 bytes).
pub fn sq_overhead(kind: QpKind) -> u32 {
    const CTRL: u32 = 16;
    const RADDR: u32 = 16;
    const ATOMIC: u32 = 16;
    const DATAGRAM: u32 = 48;
    match kind {
        // SEND / SEND_IMM / SEND_INV, WRITE(_IMM), READ, CS, FA.
        QpKind::Rc => CTRL + RADDR + ATOMIC,
        // SEND, SEND_IMM.
        QpKind::Ud => CTRL + DATAGRAM,
        // As RC (no SEND_INV), plus the address vector.
        QpKind::Dci => CTRL + RADDR + ATOMIC + DATAGRAM,
        _ => 0,
    }
}

/// Size a QP's rings (spec §1.4, §3.8) as rdma-core does.
///
/// Send WQE: `overhead + 16 × max_send_sge`, or `overhead +
/// align(4 + max_inline_data, 16)` if larger; it must fit the device's send
/// descriptor size; rounded up to 64 bytes. SQ: `max_send_wr` of them, the
/// ring rounded up to a power of two. RQ: `16 × max(max_recv_sge, 1)` rounded
/// up to a power of two per WQE; `max_recv_wr` rounded up to a power of two,
/// at least 64 bytes of ring.
pub fn qp_geometry(kind: QpKind, caps: &QpCaps, dev: &DeviceCaps) -> Result<QpGeometry> {
    let max_desc = dev.max_wqe_sz_sq.min(MAX_DS * DS_BYTES);
    let exceeded = |what, asked, max| Error::CapsExceeded { what, asked, max };
    // The post path relies on this: a WQE of one WQEBB always fits.
    if max_desc < WQEBB_BYTES {
        return Err(Error::InvalidArgument(crate::error::InvalidArgument::DeviceDescriptorTooSmall {
            bytes: dev.max_wqe_sz_sq,
        }));
    }
    if caps.max_send_wr == 0 {
        return Err(Error::InvalidArgument(crate::error::InvalidArgument::OutOfRange {
            arg: crate::error::Arg::MaxSendWr,
            value: 0,
            min: 1,
            max: dev.max_qp_wr.into(),
        }));
    }
    if caps.max_send_wr > dev.max_qp_wr {
        return Err(exceeded("max_send_wr", caps.max_send_wr, dev.max_qp_wr));
    }
    if caps.max_recv_wr > dev.max_qp_wr {
        return Err(exceeded("max_recv_wr", caps.max_recv_wr, dev.max_qp_wr));
    }
    if caps.max_recv_sge > dev.max_sge {
        return Err(exceeded("max_recv_sge", caps.max_recv_sge, dev.max_sge));
    }
    let overhead = sq_overhead(kind);
    let room = max_desc.saturating_sub(overhead);
    // mlx5_calc_send_wqe: the gather list, then the inline payload.
    let max_gather = (room / DS_BYTES).min(dev.max_sge);
    if caps.max_send_sge > max_gather {
        return Err(exceeded("max_send_sge", caps.max_send_sge, max_gather));
    }
    // Largest inline payload: its 4-byte header and the data, 16-aligned, in the room.
    let max_inline = (room / DS_BYTES * DS_BYTES).saturating_sub(4);
    if caps.max_inline_data > max_inline {
        return Err(exceeded("max_inline_data", caps.max_inline_data, max_inline));
    }
    let gather = overhead + DS_BYTES * caps.max_send_sge;
    let inline =
        if caps.max_inline_data > 0 { overhead + align(4 + caps.max_inline_data, DS_BYTES) } else { 0 };
    let wqe_size = align(gather.max(inline), WQEBB_BYTES);
    let max_wr = MAX_SQ_WQEBBS / (wqe_size / WQEBB_BYTES);
    if caps.max_send_wr > max_wr {
        return Err(exceeded("max_send_wr", caps.max_send_wr, max_wr));
    }
    let sq_wqe_cnt = (caps.max_send_wr * wqe_size).next_power_of_two() / WQEBB_BYTES;
    let (rq_wqe_cnt, rq_stride) = if caps.max_recv_wr == 0 {
        (0, DS_BYTES)
    } else {
        let stride = (DS_BYTES * caps.max_recv_sge.max(1)).next_power_of_two();
        let ring = (caps.max_recv_wr.next_power_of_two() * stride).max(WQEBB_BYTES);
        (ring / stride, stride)
    };
    Ok(QpGeometry {
        sq_wqe_cnt,
        max_wqe_ds: max_desc / DS_BYTES,
        rq_wqe_cnt,
        rq_stride,
        sq_wqe_size: wqe_size,
        max_inline_data: wqe_size - overhead - 4,
    })
}

/// Ring geometry of an SRQ: `wqe_cnt` (a power of two, one more than the
/// usable capacity: the list keeps a spare) and `stride` (next segment plus
/// `max_sge` data segments, at least 32, a power of two).
pub fn srq_geometry(max_wr: u32, max_sge: u32, dev: &DeviceCaps) -> Result<(u32, u32)> {
    if max_wr == 0 || max_wr >= dev.max_qp_wr || max_sge > dev.max_sge {
        return Err(Error::InvalidArgument(crate::error::InvalidArgument::SrqTooLarge {
            max_wr,
            max_sge,
            dev_wr: dev.max_qp_wr,
            dev_sge: dev.max_sge,
        }));
    }
    let wqe_cnt = (max_wr + 1).next_power_of_two();
    let stride = (DS_BYTES + DS_BYTES * max_sge.max(1)).max(32).next_power_of_two();
    Ok((wqe_cnt, stride))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ConnectX-5-like device: 512-byte send descriptors (rdma-core's
    /// max_sge 30 = (512 - 32) / 16), 32K WRs.
    fn cx5() -> DeviceCaps {
        DeviceCaps {
            max_qp_wr: 32768,
            max_sge: 30,
            max_cqe: 4_194_303,
            max_wqe_sz_sq: 512,
            bf_size: 0,
            max_rd_atomic: 16,
            dc: true,
        }
    }

    fn caps(wr: u32, sge: u32, inline: u32) -> QpCaps {
        QpCaps {
            max_send_wr: wr,
            max_recv_wr: 16,
            max_send_sge: sge,
            max_recv_sge: 1,
            max_inline_data: inline,
        }
    }

    /// The post path counts on one WQEBB always fitting a WQE: a device
    /// whose send descriptor is smaller is refused at creation.
    #[test]
    fn a_send_descriptor_below_one_wqebb_is_refused() {
        let tiny = DeviceCaps { max_wqe_sz_sq: 48, ..cx5() };
        let e = qp_geometry(QpKind::Rc, &caps(1, 0, 0), &tiny).unwrap_err();
        assert_eq!(
            e,
            Error::InvalidArgument(crate::error::InvalidArgument::DeviceDescriptorTooSmall { bytes: 48 })
        );
        let g = qp_geometry(QpKind::Rc, &caps(1, 0, 0), &DeviceCaps { max_wqe_sz_sq: 64, ..cx5() }).unwrap();
        assert_eq!(g.max_wqe_ds, 4);
    }

    /// Values worked out from rdma-core's formulas by hand (see the module doc).
    #[test]
    fn sizes_as_rdma_core() {
        // RC, perftest's latency set-up: overhead 48; inline 48 + align(224) = 272 → 320.
        let g = qp_geometry(QpKind::Rc, &caps(128, 1, 220), &cx5()).unwrap();
        assert_eq!((g.sq_wqe_size, g.max_inline_data), (320, 268));
        assert_eq!(g.sq_wqe_cnt, (128u32 * 320).next_power_of_two() / 64);
        // RC, one SGE and no inline: 48 + 16 = 64: one WQEBB per WR.
        let g = qp_geometry(QpKind::Rc, &caps(64, 1, 0), &cx5()).unwrap();
        assert_eq!((g.sq_wqe_size, g.sq_wqe_cnt, g.max_inline_data), (64, 64, 12));
        // UD: 16 + 48 datagram = 64; 188 inline (perftest's UD default): 64 + 192 = 256.
        let g = qp_geometry(QpKind::Ud, &caps(16, 1, 188), &cx5()).unwrap();
        assert_eq!((g.sq_wqe_size, g.max_inline_data), (256, 188));
        // DCI: 96 overhead; 2 SGEs: 128.
        let g = qp_geometry(QpKind::Dci, &caps(8, 2, 0), &cx5()).unwrap();
        assert_eq!((g.sq_wqe_size, g.sq_wqe_cnt), (128, 16));
        assert_eq!((g.rq_wqe_cnt, g.rq_stride), (16, 16));
        // RQ: 1 WR of 1 SGE is 16 bytes, but the ring is at least 64: 4 WQEs.
        let g = qp_geometry(QpKind::Rc, &QpCaps { max_recv_wr: 1, ..caps(8, 1, 0) }, &cx5()).unwrap();
        assert_eq!((g.rq_wqe_cnt, g.rq_stride), (4, 16));
    }

    #[test]
    fn what_rdma_core_refuses_is_refused_first() {
        // RC: 512 - 48 = 464 bytes of room: 460 inline bytes fit, 461 do not.
        assert!(qp_geometry(QpKind::Rc, &caps(8, 1, 460), &cx5()).is_ok());
        assert_eq!(
            qp_geometry(QpKind::Rc, &caps(8, 1, 461), &cx5()),
            Err(Error::CapsExceeded { what: "max_inline_data", asked: 461, max: 460 })
        );
        // DCI: (512 - 96) / 16 = 26 SGEs.
        assert!(matches!(
            qp_geometry(QpKind::Dci, &caps(8, 27, 0), &cx5()),
            Err(Error::CapsExceeded { what: "max_send_sge", asked: 27, max: 26 })
        ));
        // No overflow on absurd requests.
        assert!(matches!(
            qp_geometry(QpKind::Rc, &caps(8, 1, u32::MAX), &cx5()),
            Err(Error::CapsExceeded { what: "max_inline_data", .. })
        ));
        assert!(matches!(
            qp_geometry(QpKind::Rc, &caps(u32::MAX, 1, 0), &cx5()),
            Err(Error::CapsExceeded { what: "max_send_wr", .. })
        ));
        // A ring over 32K WQEBBs (16-bit wqe_index): 320-byte WQEs, 32768 / 5 WRs.
        assert!(matches!(
            qp_geometry(QpKind::Rc, &caps(8192, 1, 220), &cx5()),
            Err(Error::CapsExceeded { what: "max_send_wr", asked: 8192, max: 6553 })
        ));
    }
}
