//! `ibv_modify_qp` attributes and attribute masks per transport and
//! transition (spec §7 table; kernel `ib_modify_qp_is_ok`,
//! `modify_dci_qp_is_ok`, `mlx5_ib_modify_dct`). A pure function of its
//! inputs, unit-tested without hardware: the kernel rejects any mask with a
//! missing required bit or a bit that is not optional for that transition,
//! so the masks here are exact, not supersets.
//!
//! | QP  | RESET→INIT                       | INIT→RTR                                                        | RTR→RTS |
//! |-----|----------------------------------|-----------------------------------------------------------------|---------|
//! | RC  | PKEY_INDEX, PORT, ACCESS_FLAGS   | AV, PATH_MTU, DEST_QPN, RQ_PSN, MAX_DEST_RD_ATOMIC, MIN_RNR_TIMER | TIMEOUT, RETRY_CNT, RNR_RETRY, SQ_PSN, MAX_QP_RD_ATOMIC |
//! | UD  | PKEY_INDEX, PORT, QKEY           | —                                                               | SQ_PSN |
//! | DCI | PKEY_INDEX, PORT                 | PATH_MTU, AV (port, own LID / GID index: a default path)         | as RC |
//! | DCT | PKEY_INDEX, PORT, ACCESS_FLAGS   | AV (port, GID index, hop limit), PATH_MTU, MIN_RNR_TIMER        | — (final at RTR) |
//!
//! Every mask also has `IBV_QP_STATE`; to-ERR and to-RESET carry only it.
//! The AV of a DCI is optional for the kernel (`modify_dci_qp_is_ok`); it
//! is given, as in perftest and other DC users proven on hardware, so that
//! the DCI's primary path names the port and, on RoCE, the source GID
//! entry. Each WQE's own address vector then selects the destination.
//!
//! An `Rts` request on a QP that libibverbs already records as RTS (its
//! `ibv_qp.state`, which asynchronous errors do not change) is the
//! front-end's SQE→RTS recovery of a UD QP: the mask is `STATE | CUR_STATE`
//! with `cur_qp_state = SQE` (the kernel allows no SQ_PSN there). On RC and
//! DCI it is RTS→RTS, where none of the RTR→RTS attributes may be given:
//! `STATE` alone.

use std::os::raw::c_int;

use mlx5_api::backend::{QpKind, QpTransition};
use mlx5_api::{Error, InvalidArgument, LinkLayer, QpState, Result, TransitionProblem};

use crate::decode::{mtu_from_bytes, qp_state_to_raw};
use crate::ffi::*;

/// `IBV_QP_CUR_STATE` (only used for SQE→RTS).
pub const IBV_QP_CUR_STATE: c_int = 1 << 1;

/// Hop limit of the GRH this backend builds (RoCE v2 TTL; IB GRH).
pub const HOP_LIMIT: u8 = 64;

/// Where a QP sends from: what an address vector needs besides the remote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalPath {
    /// The port given at RESET→INIT.
    pub port: u8,
    /// The port's link layer.
    pub link: LinkLayer,
    /// The port's own LID (InfiniBand; the DCI's placeholder destination).
    pub lid: u16,
    /// Source GID index (RoCE: the RoCE v2 entry; IB: 0).
    pub sgid_index: u8,
    /// The GID at `sgid_index` (the DCI / DCT default path carries it as `dgid` on RoCE).
    pub sgid: [u8; 16],
    /// InfiniBand port that requires a GRH on every address (`IBV_QPF_GRH_REQUIRED`).
    pub grh_required: bool,
}

/// The `ibv_ah_attr` of an address handle from `path` to `remote` (for
/// `ibv_create_ah`): RoCE and GRH-required ports are global, to the peer's
/// GID from the port's source GID index; plain InfiniBand is by LID.
pub fn ah_attr(path: &LocalPath, remote: &mlx5_api::RemoteQpInfo) -> Result<ibv_ah_attr> {
    let mut a = ibv_ah_attr { dlid: remote.lid, port_num: path.port, ..ibv_ah_attr::default() };
    let global = path.link == LinkLayer::Ethernet || path.grh_required;
    match (global, remote.gid) {
        (true, Some(dgid)) => {
            a.is_global = 1;
            a.grh.dgid = ibv_gid { raw: dgid.0 };
            a.grh.sgid_index = path.sgid_index;
            a.grh.hop_limit = HOP_LIMIT;
        }
        (true, None) => {
            return Err(Error::InvalidArgument(InvalidArgument::GrhRequired {
                port: path.port,
                peer_qpn: remote.qpn,
            }))
        }
        (false, _) => {}
    }
    Ok(a)
}

/// The required mask bits (besides `IBV_QP_STATE`) of `kind` for `t`, as
/// in the table above, from the states the front-end issues them in.
pub fn mask_for(kind: QpKind, t: &QpTransition) -> c_int {
    let m = match (kind, t) {
        (QpKind::Rc | QpKind::Dct, QpTransition::Init { .. }) => {
            IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
        }
        (QpKind::Ud, QpTransition::Init { .. }) => IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
        (QpKind::Dci, QpTransition::Init { .. }) => IBV_QP_PKEY_INDEX | IBV_QP_PORT,
        (QpKind::Rc, QpTransition::Rtr { .. }) => {
            IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER
        }
        (QpKind::Ud, QpTransition::Rtr { .. }) => 0,
        (QpKind::Dci, QpTransition::Rtr { .. }) => IBV_QP_PATH_MTU | IBV_QP_AV,
        (QpKind::Dct, QpTransition::Rtr { .. }) => IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_MIN_RNR_TIMER,
        (QpKind::Rc | QpKind::Dci, QpTransition::Rts { .. }) => {
            IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC
        }
        (QpKind::Ud, QpTransition::Rts { .. }) => IBV_QP_SQ_PSN,
        _ => 0,
    };
    IBV_QP_STATE | m
}

fn invalid(kind: QpKind, why: TransitionProblem) -> Error {
    Error::InvalidArgument(InvalidArgument::Transition { kind, why })
}

fn path_mtu(kind: QpKind, bytes: u32) -> Result<u32> {
    mtu_from_bytes(bytes).ok_or(invalid(kind, TransitionProblem::PathMtu(bytes)))
}

/// The attributes and mask for `t` on a QP of `kind` whose libibverbs
/// state (`ibv_qp.state`) is `from`, sending from `path`.
pub fn modify_attr(
    kind: QpKind,
    from: u32,
    t: &QpTransition,
    path: &LocalPath,
) -> Result<(ibv_qp_attr, c_int)> {
    let mut a = ibv_qp_attr::default();
    let mut mask = mask_for(kind, t);
    match t {
        QpTransition::Init { port, access, qkey } => {
            a.qp_state = IBV_QPS_INIT;
            a.pkey_index = 0;
            a.port_num = *port;
            match kind {
                QpKind::Rc | QpKind::Dct => a.qp_access_flags = access.bits() & 0xf,
                QpKind::Ud => a.qkey = qkey.ok_or_else(|| invalid(kind, TransitionProblem::NoQkey))?,
                _ => {}
            }
        }
        QpTransition::Rtr { remote, path_mtu: mtu, min_rnr_timer, max_dest_rd_atomic, sl } => {
            a.qp_state = IBV_QPS_RTR;
            match kind {
                QpKind::Rc => {
                    let r = remote.as_ref().ok_or_else(|| invalid(kind, TransitionProblem::NoRemote))?;
                    a.path_mtu = path_mtu(kind, *mtu)?;
                    a.dest_qp_num = r.qpn & 0xff_ffff;
                    a.rq_psn = r.psn & 0xff_ffff;
                    a.max_dest_rd_atomic = *max_dest_rd_atomic;
                    a.min_rnr_timer = *min_rnr_timer;
                    a.ah_attr.port_num = path.port;
                    a.ah_attr.dlid = r.lid;
                    a.ah_attr.sl = *sl & 0xf;
                    match (path.link, r.gid) {
                        (_, Some(dgid)) => {
                            a.ah_attr.is_global = 1;
                            a.ah_attr.grh.dgid = ibv_gid { raw: dgid.0 };
                            a.ah_attr.grh.sgid_index = path.sgid_index;
                            a.ah_attr.grh.hop_limit = HOP_LIMIT;
                        }
                        (LinkLayer::Ethernet, None) => {
                            return Err(Error::InvalidArgument(InvalidArgument::PeerAddress {
                                link: LinkLayer::Ethernet,
                                gid: false,
                                mac: r.mac.is_some(),
                            }))
                        }
                        (LinkLayer::InfiniBand, None) if path.grh_required => {
                            return Err(Error::InvalidArgument(InvalidArgument::GrhRequired {
                                port: path.port,
                                peer_qpn: r.qpn,
                            }))
                        }
                        (LinkLayer::InfiniBand, None) => {}
                    }
                }
                QpKind::Ud => {}
                QpKind::Dci | QpKind::Dct => {
                    a.path_mtu = path_mtu(kind, *mtu)?;
                    if kind == QpKind::Dct {
                        a.min_rnr_timer = *min_rnr_timer;
                    } else {
                        a.ah_attr.dlid = path.lid;
                    }
                    a.ah_attr.port_num = path.port;
                    a.ah_attr.grh.sgid_index = path.sgid_index;
                    a.ah_attr.grh.hop_limit = HOP_LIMIT;
                    if path.link == LinkLayer::Ethernet || path.grh_required {
                        // RoCE addresses are GRH-only, and so are those of a port
                        // that requires a GRH: the GRH flag makes the kernel take
                        // the source GID entry.
                        a.ah_attr.is_global = 1;
                        a.ah_attr.grh.dgid = ibv_gid { raw: path.sgid };
                    }
                }
                _ => return Err(invalid(kind, TransitionProblem::NotInTable)),
            }
        }
        QpTransition::Rts { timeout, retry_cnt, rnr_retry, sq_psn, max_rd_atomic } => {
            a.qp_state = IBV_QPS_RTS;
            if kind == QpKind::Dct {
                return Err(invalid(kind, TransitionProblem::DctRts));
            }
            if from == IBV_QPS_RTS || from == IBV_QPS_SQE {
                // RTS→RTS: none of the RTR→RTS attributes may change (the front-end
                // does not issue it; SQE→RTS is `QpTransition::Recover`).
                mask = IBV_QP_STATE;
            } else {
                a.timeout = *timeout;
                a.retry_cnt = *retry_cnt;
                a.rnr_retry = *rnr_retry;
                a.sq_psn = sq_psn & 0xff_ffff;
                if kind != QpKind::Ud {
                    a.max_rd_atomic = *max_rd_atomic;
                }
            }
        }
        QpTransition::Recover => {
            if kind != QpKind::Ud {
                return Err(invalid(kind, TransitionProblem::SqeToRts));
            }
            // libibverbs never sees SQE (the hardware moved the QP there): name it.
            a.qp_state = IBV_QPS_RTS;
            a.cur_qp_state = IBV_QPS_SQE;
            mask = IBV_QP_STATE | IBV_QP_CUR_STATE;
        }
        QpTransition::To(s @ (QpState::Reset | QpState::Err)) => {
            a.qp_state = qp_state_to_raw(*s);
            mask = IBV_QP_STATE;
        }
        QpTransition::To(s) => return Err(invalid(kind, TransitionProblem::DirectMove(*s))),
        _ => return Err(invalid(kind, TransitionProblem::NotInTable)),
    }
    Ok((a, mask))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx5_api::{AccessFlags, RemoteQpInfo};

    const IB: LocalPath = LocalPath {
        port: 1,
        link: LinkLayer::InfiniBand,
        lid: 9,
        sgid_index: 0,
        sgid: [0; 16],
        grh_required: false,
    };
    const ROCE_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1];
    const ROCE: LocalPath = LocalPath {
        port: 1,
        link: LinkLayer::Ethernet,
        lid: 0,
        sgid_index: 3,
        sgid: ROCE_GID,
        grh_required: false,
    };

    fn init(qkey: Option<u32>) -> QpTransition {
        QpTransition::Init {
            port: 1,
            access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
            qkey,
        }
    }
    fn rtr(remote: Option<RemoteQpInfo>) -> QpTransition {
        QpTransition::Rtr { remote, path_mtu: 1024, min_rnr_timer: 12, max_dest_rd_atomic: 16, sl: 0 }
    }
    fn rts() -> QpTransition {
        QpTransition::Rts { timeout: 14, retry_cnt: 7, rnr_retry: 7, sq_psn: 0x12_3456, max_rd_atomic: 8 }
    }
    fn ok(kind: QpKind, from: u32, t: &QpTransition, p: &LocalPath) -> (ibv_qp_attr, c_int) {
        modify_attr(kind, from, t, p).unwrap_or_else(|e| panic!("{kind:?} {t:?}: {e}"))
    }

    #[test]
    fn spec_table_masks() {
        let s = IBV_QP_STATE;
        let rc_rts =
            IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
        let cases: &[(QpKind, QpTransition, c_int)] = &[
            (QpKind::Rc, init(None), s | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            (
                QpKind::Rc,
                rtr(None),
                s | IBV_QP_AV
                    | IBV_QP_PATH_MTU
                    | IBV_QP_DEST_QPN
                    | IBV_QP_RQ_PSN
                    | IBV_QP_MAX_DEST_RD_ATOMIC
                    | IBV_QP_MIN_RNR_TIMER,
            ),
            (QpKind::Rc, rts(), s | rc_rts),
            (QpKind::Ud, init(Some(0x1111)), s | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
            (QpKind::Ud, rtr(None), s),
            (QpKind::Ud, rts(), s | IBV_QP_SQ_PSN),
            (QpKind::Dci, init(None), s | IBV_QP_PKEY_INDEX | IBV_QP_PORT),
            (QpKind::Dci, rtr(None), s | IBV_QP_PATH_MTU | IBV_QP_AV),
            (QpKind::Dci, rts(), s | rc_rts),
            (QpKind::Dct, init(None), s | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
            (QpKind::Dct, rtr(None), s | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_MIN_RNR_TIMER),
        ];
        for (kind, t, want) in cases {
            assert_eq!(mask_for(*kind, t), *want, "{kind:?} {t:?}");
        }
        // Exact numeric values for the RC row (the bits of verbs.h).
        assert_eq!(mask_for(QpKind::Rc, &init(None)), 0x39);
        assert_eq!(mask_for(QpKind::Rc, &rtr(None)), 0x12_9181);
        assert_eq!(mask_for(QpKind::Rc, &rts()), 0x1_2e01);
        for kind in [QpKind::Rc, QpKind::Ud, QpKind::Dci, QpKind::Dct] {
            for st in [QpState::Reset, QpState::Err] {
                let (a, m) = ok(kind, IBV_QPS_RTS, &QpTransition::To(st), &IB);
                assert_eq!(m, IBV_QP_STATE, "{kind:?} to {st:?}");
                assert_eq!(a.qp_state, qp_state_to_raw(st));
            }
        }
    }

    #[test]
    fn modify_attr_uses_the_mask_of_the_table() {
        let remote = RemoteQpInfo { psn: 0x42, ..RemoteQpInfo::ib(0x1234, 7) };
        for (kind, t) in [
            (QpKind::Rc, init(None)),
            (QpKind::Rc, rtr(Some(remote.clone()))),
            (QpKind::Ud, init(Some(1))),
            (QpKind::Ud, rtr(None)),
            (QpKind::Dci, init(None)),
            (QpKind::Dci, rtr(None)),
            (QpKind::Dct, init(None)),
            (QpKind::Dct, rtr(None)),
        ] {
            let (_, m) = ok(kind, IBV_QPS_RESET, &t, &IB);
            assert_eq!(m, mask_for(kind, &t), "{kind:?} {t:?}");
        }
        for kind in [QpKind::Rc, QpKind::Ud, QpKind::Dci] {
            let (_, m) = ok(kind, IBV_QPS_RTR, &rts(), &IB);
            assert_eq!(m, mask_for(kind, &rts()), "{kind:?}");
        }
    }

    #[test]
    fn rc_init_attributes() {
        let (a, _) = ok(QpKind::Rc, IBV_QPS_RESET, &init(None), &IB);
        assert_eq!(a.qp_state, IBV_QPS_INIT);
        assert_eq!(a.port_num, 1);
        assert_eq!(a.pkey_index, 0);
        assert_eq!(
            a.qp_access_flags as c_int,
            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
        );
    }

    #[test]
    fn rc_rtr_over_infiniband_uses_the_lid() {
        let remote = RemoteQpInfo { psn: 0x0100_0042, ..RemoteQpInfo::ib(0x0123_4567, 7) };
        let (a, _) = ok(QpKind::Rc, IBV_QPS_INIT, &rtr(Some(remote)), &IB);
        assert_eq!(a.qp_state, IBV_QPS_RTR);
        assert_eq!(a.path_mtu, IBV_MTU_1024);
        assert_eq!(a.dest_qp_num, 0x23_4567, "24-bit QPN");
        assert_eq!(a.rq_psn, 0x42, "24-bit PSN");
        assert_eq!((a.max_dest_rd_atomic, a.min_rnr_timer), (16, 12));
        assert_eq!(a.ah_attr.dlid, 7);
        assert_eq!(a.ah_attr.is_global, 0);
        assert_eq!(a.ah_attr.port_num, 1);
    }

    #[test]
    fn rc_rtr_over_roce_uses_the_gid_and_the_roce_v2_index() {
        let dgid = [0xaa; 16];
        let remote = RemoteQpInfo::roce(0x99, mlx5_api::Gid(dgid), [2, 0, 0, 0, 0, 1]);
        let (a, _) = ok(QpKind::Rc, IBV_QPS_INIT, &rtr(Some(remote)), &ROCE);
        assert_eq!(a.ah_attr.is_global, 1);
        assert_eq!(a.ah_attr.grh.dgid.raw, dgid);
        assert_eq!(a.ah_attr.grh.sgid_index, 3);
        assert_eq!(a.ah_attr.grh.hop_limit, HOP_LIMIT);
        assert_eq!(a.ah_attr.port_num, 1);
        // RoCE without a GID cannot be addressed.
        let e = modify_attr(QpKind::Rc, IBV_QPS_INIT, &rtr(Some(RemoteQpInfo::ib(1, 2))), &ROCE);
        assert!(matches!(e, Err(Error::InvalidArgument(_))), "{e:?}");
        // A GID on InfiniBand selects a GRH.
        let remote = RemoteQpInfo { gid: Some(mlx5_api::Gid(dgid)), ..RemoteQpInfo::ib(1, 2) };
        let (a, _) = ok(QpKind::Rc, IBV_QPS_INIT, &rtr(Some(remote)), &IB);
        assert_eq!((a.ah_attr.is_global, a.ah_attr.dlid), (1, 2));
    }

    /// `ConnectParams::sl` reaches the RC path's address (`ah_attr.sl`).
    #[test]
    fn rtr_carries_the_service_level() {
        let t = QpTransition::Rtr {
            remote: Some(RemoteQpInfo::ib(0x10, 7)),
            path_mtu: 1024,
            min_rnr_timer: 12,
            max_dest_rd_atomic: 16,
            sl: 5,
        };
        let (a, _mask) = modify_attr(QpKind::Rc, IBV_QPS_INIT, &t, &IB).unwrap();
        assert_eq!((a.ah_attr.sl, a.ah_attr.dlid, a.dest_qp_num), (5, 7, 0x10));
    }

    #[test]
    fn rtr_rejects_bad_mtus_and_missing_remotes() {
        for mtu in [0, 1500, 9000] {
            let t = QpTransition::Rtr {
                remote: Some(RemoteQpInfo::ib(1, 1)),
                path_mtu: mtu,
                min_rnr_timer: 0,
                max_dest_rd_atomic: 0,
                sl: 0,
            };
            for kind in [QpKind::Rc, QpKind::Dci, QpKind::Dct] {
                assert!(matches!(modify_attr(kind, IBV_QPS_INIT, &t, &IB), Err(Error::InvalidArgument(_))));
            }
            // UD takes no path MTU (its datagrams are limited by the port's).
            assert!(modify_attr(QpKind::Ud, IBV_QPS_INIT, &t, &IB).is_ok());
        }
        assert!(matches!(
            modify_attr(QpKind::Rc, IBV_QPS_INIT, &rtr(None), &IB),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn rts_attributes() {
        let (a, _) = ok(QpKind::Rc, IBV_QPS_RTR, &rts(), &IB);
        assert_eq!(a.qp_state, IBV_QPS_RTS);
        assert_eq!((a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic), (14, 7, 7, 8));
        assert_eq!(a.sq_psn, 0x12_3456);
        let (a, _) = ok(QpKind::Ud, IBV_QPS_RTR, &rts(), &IB);
        assert_eq!(a.sq_psn, 0x12_3456);
    }

    #[test]
    fn ud_init_needs_a_qkey() {
        let (a, _) = ok(QpKind::Ud, IBV_QPS_RESET, &init(Some(0x1111_2222)), &IB);
        assert_eq!(a.qkey, 0x1111_2222);
        assert_eq!(a.qp_access_flags, 0, "UD has no access flags");
        assert!(matches!(
            modify_attr(QpKind::Ud, IBV_QPS_RESET, &init(None), &IB),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn dct_rtr_av_carries_port_and_gid_index() {
        let (a, m) = ok(QpKind::Dct, IBV_QPS_INIT, &rtr(None), &IB);
        assert_eq!(m, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_MIN_RNR_TIMER);
        assert_eq!((a.ah_attr.port_num, a.ah_attr.is_global, a.min_rnr_timer), (1, 0, 12));
        assert_eq!(a.path_mtu, IBV_MTU_1024);
        let (a, _) = ok(QpKind::Dct, IBV_QPS_INIT, &rtr(None), &ROCE);
        assert_eq!((a.ah_attr.is_global, a.ah_attr.grh.sgid_index), (1, 3));
        assert_eq!(a.ah_attr.grh.dgid.raw, ROCE_GID);
        assert!(matches!(modify_attr(QpKind::Dct, IBV_QPS_RTR, &rts(), &IB), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn dci_init_has_no_access_and_rtr_a_default_path() {
        let (a, _) = ok(QpKind::Dci, IBV_QPS_RESET, &init(None), &ROCE);
        assert_eq!(a.qp_access_flags, 0);
        let (a, m) = ok(QpKind::Dci, IBV_QPS_INIT, &rtr(None), &ROCE);
        assert_eq!(m, IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_AV);
        assert_eq!((a.ah_attr.is_global, a.ah_attr.grh.sgid_index, a.ah_attr.port_num), (1, 3, 1));
        assert_eq!(a.path_mtu, IBV_MTU_1024);
        assert_eq!(a.min_rnr_timer, 0, "MIN_RNR_TIMER is not allowed at DCI RTR");
        let (a, _) = ok(QpKind::Dci, IBV_QPS_INIT, &rtr(None), &IB);
        assert_eq!((a.ah_attr.is_global, a.ah_attr.dlid, a.ah_attr.port_num), (0, 9, 1));
    }

    #[test]
    fn grh_required_ports_make_dc_paths_global_and_refuse_lid_only_rc_peers() {
        let vf = LocalPath { grh_required: true, sgid: [7; 16], ..IB };
        for kind in [QpKind::Dci, QpKind::Dct] {
            let (a, _) = ok(kind, IBV_QPS_INIT, &rtr(None), &vf);
            assert_eq!((a.ah_attr.is_global, a.ah_attr.grh.dgid.raw), (1, [7; 16]), "{kind:?}");
        }
        let lid_only = QpTransition::Rtr {
            remote: Some(RemoteQpInfo::ib(0x10, 7)),
            path_mtu: 1024,
            min_rnr_timer: 12,
            max_dest_rd_atomic: 16,
            sl: 0,
        };
        assert!(modify_attr(QpKind::Rc, IBV_QPS_INIT, &lid_only, &vf).is_err());
        assert!(modify_attr(QpKind::Rc, IBV_QPS_INIT, &lid_only, &IB).is_ok());
    }

    #[test]
    fn address_handles_are_global_where_the_port_needs_it() {
        let gid = mlx5_api::Gid(ROCE_GID);
        let roce_peer = RemoteQpInfo::roce(0x10, gid, [2, 0, 0, 0, 0, 9]);
        let a = ah_attr(&ROCE, &roce_peer).unwrap();
        assert_eq!((a.is_global, a.grh.sgid_index, a.grh.hop_limit, a.port_num), (1, 3, HOP_LIMIT, 1));
        assert_eq!(a.grh.dgid.raw, ROCE_GID, "the kernel resolves the MAC from the GID");
        let a = ah_attr(&IB, &RemoteQpInfo::ib(0x10, 7)).unwrap();
        assert_eq!((a.is_global, a.dlid), (0, 7));
        let vf = LocalPath { grh_required: true, ..IB };
        assert!(ah_attr(&vf, &RemoteQpInfo::ib(0x10, 7)).is_err());
        let a = ah_attr(&vf, &RemoteQpInfo { gid: Some(gid), ..RemoteQpInfo::ib(0x10, 7) }).unwrap();
        assert_eq!((a.is_global, a.dlid), (1, 7));
        assert!(ah_attr(&ROCE, &RemoteQpInfo::ib(0x10, 7)).is_err());
    }

    #[test]
    fn rts_on_a_qp_already_in_rts() {
        // RTS→RTS with nothing to change, UD included (an SQE→RTS on a QP that is
        // in RTS would be refused by the kernel: that is `Recover`, issued only from SQE).
        for kind in [QpKind::Rc, QpKind::Dci, QpKind::Ud] {
            let (a, m) = ok(kind, IBV_QPS_RTS, &rts(), &IB);
            assert_eq!((m, a.cur_qp_state), (IBV_QP_STATE, 0), "{kind:?}");
        }
    }

    #[test]
    fn recover_is_sqe_to_rts_for_ud_only() {
        // libibverbs still says RTS: the hardware moved the QP to SQE.
        let (a, m) = ok(QpKind::Ud, IBV_QPS_RTS, &QpTransition::Recover, &IB);
        assert_eq!(m, IBV_QP_STATE | IBV_QP_CUR_STATE);
        assert_eq!((a.qp_state, a.cur_qp_state), (IBV_QPS_RTS, IBV_QPS_SQE));
        assert!(modify_attr(QpKind::Rc, IBV_QPS_RTS, &QpTransition::Recover, &IB).is_err());
    }

    #[test]
    fn to_other_states_is_rejected() {
        for s in [QpState::Init, QpState::Rtr, QpState::Rts, QpState::Sqd, QpState::Sqe] {
            assert!(matches!(
                modify_attr(QpKind::Rc, IBV_QPS_RTS, &QpTransition::To(s), &IB),
                Err(Error::InvalidArgument(_))
            ));
        }
    }
}
