//! The values of QP bring-up, the same for every transport: [`QpConfig`]
//! when a QP is created (sizes, port, start PSN, keys), [`ConnectParams`]
//! when it is activated (`activate(&ConnectParams)` on `RcQp`, `UdQp`,
//! `Dci` and `Dct`), and [`RemoteQpInfo`], what one side sends the other
//! out of band (with the `serde` feature it serializes).

use crate::ring::Gid;
use crate::types::AccessFlags;

/// perftest's default Q_Key (`DEF_QKEY`), this library's default for UD.
pub const DEFAULT_QKEY: u32 = 0x1111_1111;

/// Creation parameters of any QP (RC, UD, DCI, DCT).
///
/// ```
/// use mlx5_api::QpConfig;
/// let cfg = QpConfig { port: 1, psn: 0x1234, max_send_wr: 64, ..QpConfig::default() };
/// assert_eq!(cfg.max_recv_wr, 256);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpConfig {
    /// The port the QP sends and receives on (1-based). Default 1.
    pub port: u8,
    /// This QP's start packet sequence number (24 bits): its `sq_psn` at
    /// RTS, and what [`local_info`](crate::RcQp::local_info) reports to the
    /// peer, whose `rq_psn` it becomes. Given here once. Default 0.
    pub psn: u32,
    /// Send queue entries (at least; rounded up to a power of two).
    pub max_send_wr: u32,
    /// Receive queue entries (ignored on an SRQ, a DCI and a DCT).
    pub max_recv_wr: u32,
    /// Most SGEs per send WQE.
    pub max_send_sge: u32,
    /// Most SGEs per receive WQE (at least; the queue takes what its
    /// stride holds, as `caps().max_recv_sge` reports).
    pub max_recv_sge: u32,
    /// Most inline bytes per send WQE.
    pub max_inline_data: u32,
    /// A doorbell register of its own (rdma-core's thread domain), shared
    /// with no other QP: for a send queue driven from another thread
    /// through the ring core. Otherwise QPs of a context may share
    /// registers (rdma-core does from the 17th QP on).
    pub dedicated_uar: bool,
    /// Scatter-to-CQE (spec §5.7): receives of up to 32 bytes (64 with
    /// 128-byte CQEs; a DCT only with 128-byte CQEs) and, on RC, READ
    /// responses of that size and atomic results of signaled WQEs arrive
    /// in the CQE instead of memory. The poller copies them into the posted
    /// buffers, as rdma-core does, and hands them over in
    /// [`crate::Completion::scattered`]. Off by default.
    pub scatter_to_cqe: bool,
    /// DCT only: the DC access key initiators must present (per WQE, in
    /// their address vector). Default 0.
    pub dc_key: u64,
}

impl Default for QpConfig {
    fn default() -> Self {
        QpConfig {
            port: 1,
            psn: 0,
            max_send_wr: 256,
            max_recv_wr: 256,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 256,
            dedicated_uar: false,
            scatter_to_cqe: false,
            dc_key: 0,
        }
    }
}

/// The former name of [`QpConfig`], which configured every transport.
#[deprecated(since = "0.1.0", note = "renamed to QpConfig")]
pub type RcQpConfig = QpConfig;

/// Everything a peer needs to connect an RC QP to ours (exchanged out of
/// band; `Serialize`/`Deserialize` with the `serde` feature).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RemoteQpInfo {
    /// The peer's QP number.
    pub qpn: u32,
    /// Destination LID (InfiniBand).
    pub lid: u16,
    /// Destination GID; `Some` selects GRH/RoCE addressing.
    pub gid: Option<Gid>,
    /// Destination MAC (RoCE).
    pub mac: Option<[u8; 6]>,
    /// Start packet sequence number of the peer's send queue (its
    /// [`QpConfig::psn`]): our receive side expects it first.
    pub psn: u32,
}

impl RemoteQpInfo {
    /// An InfiniBand peer, addressed by LID.
    pub fn ib(qpn: u32, lid: u16) -> Self {
        RemoteQpInfo { qpn, lid, gid: None, mac: None, psn: 0 }
    }
    /// A RoCE v2 peer, addressed by GID and MAC.
    pub fn roce(qpn: u32, gid: Gid, mac: [u8; 6]) -> Self {
        RemoteQpInfo { qpn, lid: 0, gid: Some(gid), mac: Some(mac), psn: 0 }
    }
}

/// The attributes of RESET→INIT→RTR→RTS (spec §7 attribute table), given
/// to `activate` on every QP type. What a transport does not use is ignored.
///
/// ```
/// use mlx5_api::{ConnectParams, RemoteQpInfo};
/// // RC: the peer is part of the parameters.
/// let rc = ConnectParams::to(RemoteQpInfo::ib(0x12, 2));
/// // UD: a Q_Key; DCI and DCT: the defaults.
/// let ud = ConnectParams { qkey: 0x42, ..ConnectParams::default() };
/// assert!(rc.remote.is_some() && ud.remote.is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectParams {
    /// RC only, and required there: the peer (its
    /// [`local_info`](crate::RcQp::local_info)). UD, DCI and DCT refuse it.
    pub remote: Option<RemoteQpInfo>,
    /// Remote operations this QP accepts as responder (RC, DCT).
    pub access: AccessFlags,
    /// Path MTU in bytes (256..4096).
    pub path_mtu: u32,
    /// Responder RNR NAK timer code (RC, DCT).
    pub min_rnr_timer: u8,
    /// Local ACK timeout exponent (4.096 µs · 2^timeout).
    pub timeout: u8,
    /// Transport retries before `RetryExceeded`.
    pub retry_cnt: u8,
    /// RNR retries; 7 means retry forever.
    pub rnr_retry: u8,
    /// Outstanding READs / atomics as requester (clamped to the device's
    /// `max_rd_atomic`).
    pub max_rd_atomic: u8,
    /// Outstanding READs / atomics as responder (clamped likewise).
    pub max_dest_rd_atomic: u8,
    /// UD only: the Q_Key incoming datagrams must carry. Default
    /// [`DEFAULT_QKEY`].
    pub qkey: u32,
    /// RC: the path's service level (InfiniBand; RoCE: the priority,
    /// `sl & 7`), 0 to 15. Default 0.
    pub sl: u8,
}

impl ConnectParams {
    /// The defaults, connected to `remote` (RC).
    pub fn to(remote: RemoteQpInfo) -> Self {
        ConnectParams { remote: Some(remote), ..Self::default() }
    }
}

impl Default for ConnectParams {
    fn default() -> Self {
        ConnectParams {
            remote: None,
            access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
            path_mtu: 1024,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            qkey: DEFAULT_QKEY,
            sl: 0,
        }
    }
}

#[cfg(all(test, feature = "serde"))]
mod serde_tests {
    use super::*;

    #[test]
    fn remote_info_round_trips_through_json() {
        let info = RemoteQpInfo {
            psn: 0xabcdef,
            ..RemoteQpInfo::roce(0x1c4, Gid::from_ipv4([10, 0, 0, 2]), [2, 0, 0, 0, 0, 2])
        };
        let json = serde_json::to_string(&info).unwrap();
        // The GID travels as its IPv6 text, readable in any exchange format.
        assert!(json.contains("\"::ffff:10.0.0.2\""), "{json}");
        assert_eq!(serde_json::from_str::<RemoteQpInfo>(&json).unwrap(), info);
        let flags = serde_json::to_string(&AccessFlags::LOCAL_WRITE).unwrap();
        assert_eq!(serde_json::from_str::<AccessFlags>(&flags).unwrap(), AccessFlags::LOCAL_WRITE);
    }
}
