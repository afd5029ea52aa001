//! `#[repr(C)]` declarations of the rdma-core structs and constants the
//! backend uses, written from Debian's libibverbs-dev 44.0 headers
//! (`infiniband/verbs.h`, `infiniband/mlx5dv.h`) and checked field by field
//! against them by the layout test (`layout_tests.rs`).
//!
//! Only what is read or written is declared. Structs that end in members we
//! never touch (`ibv_context`, `ibv_qp`) are declared as *prefixes*: their
//! Rust size is meaningless and never used to allocate or copy one; only the
//! field offsets are checked. Objects we only pass around (`ibv_device`,
//! `ibv_cq`, `ibv_srq`) are opaque.
//!
//! C enums are declared as plain integers (`u32` / `c_int`) with constants:
//! a value the header did not know is decoded with `match` and an
//! `Unknown(n)` arm (see `decode.rs`), never transmuted into a Rust enum.

#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_uint, c_void};

// ---------------------------------------------------------------------------
// verbs.h
// ---------------------------------------------------------------------------

/// `struct ibv_device` (opaque: its name is read with `ibv_get_device_name`).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_device {
    _opaque: [u8; 0],
}

/// `struct ibv_comp_channel`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_comp_channel {
    /// `ibv_comp_channel.context`.
    pub context: *mut ibv_context,
    /// `ibv_comp_channel.fd`.
    pub fd: c_int,
    /// `ibv_comp_channel.refcnt`.
    pub refcnt: c_int,
}

/// `struct ibv_cq_init_attr_ex` (rdma-core v44).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_cq_init_attr_ex {
    /// `ibv_cq_init_attr_ex.cqe`.
    pub cqe: u32,
    /// `ibv_cq_init_attr_ex.cq_context`.
    pub cq_context: *mut c_void,
    /// `ibv_cq_init_attr_ex.channel`.
    pub channel: *mut ibv_comp_channel,
    /// `ibv_cq_init_attr_ex.comp_vector`.
    pub comp_vector: u32,
    /// `ibv_cq_init_attr_ex.wc_flags`.
    pub wc_flags: u64,
    /// `ibv_cq_init_attr_ex.comp_mask`.
    pub comp_mask: u32,
    /// `ibv_cq_init_attr_ex.flags`.
    pub flags: u32,
    /// `ibv_cq_init_attr_ex.parent_domain`.
    pub parent_domain: *mut ibv_pd,
}

/// `struct mlx5dv_cq_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct mlx5dv_cq_init_attr {
    /// `mlx5dv_cq_init_attr.comp_mask`.
    pub comp_mask: u64,
    /// `mlx5dv_cq_init_attr.cqe_comp_res_format`.
    pub cqe_comp_res_format: u8,
    /// `mlx5dv_cq_init_attr.flags`.
    pub flags: u32,
    /// `mlx5dv_cq_init_attr.cqe_size`.
    pub cqe_size: u16,
}

// enum mlx5dv_cq_init_attr_mask
/// `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE` (mlx5dv.h).
pub const MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE: u64 = 1 << 0;
/// `MLX5DV_CQ_INIT_ATTR_MASK_FLAGS` (mlx5dv.h).
pub const MLX5DV_CQ_INIT_ATTR_MASK_FLAGS: u64 = 1 << 1;
/// `MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE` (mlx5dv.h).
pub const MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE: u64 = 1 << 2;
// enum mlx5dv_qp_create_flags
/// `MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE` (mlx5dv.h).
pub const MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE: u32 = 1 << 4;

/// Prefix of `struct ibv_cq`: up to `cqe` (an async CQ error names the
/// CQ by pointer; its `cq_context` points at our CQN). Everything else
/// comes from `mlx5dv_init_obj`; never allocate or copy one.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_cq {
    /// `ibv_cq.context`.
    pub context: *mut ibv_context,
    /// `ibv_cq.channel`.
    pub channel: *mut ibv_comp_channel,
    /// `ibv_cq.cq_context`.
    pub cq_context: *mut c_void,
    /// `ibv_cq.handle`.
    pub handle: u32,
    /// `ibv_cq.cqe`.
    pub cqe: c_int,
}

/// `struct ibv_async_event`: the element union, then the event type.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_async_event {
    /// `ibv_async_event.element`.
    pub element: ibv_async_event_element,
    /// `enum ibv_event_type`.
    pub event_type: u32,
}

/// The element union of `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    /// `ibv_async_event_element.cq`.
    pub cq: *mut ibv_cq,
    /// `ibv_async_event_element.qp`.
    pub qp: *mut ibv_qp,
    /// `ibv_async_event_element.srq`.
    pub srq: *mut ibv_srq,
    /// `ibv_async_event_element.wq`.
    pub wq: *mut c_void,
    /// `ibv_async_event_element.port_num`.
    pub port_num: c_int,
}

// enum ibv_event_type
/// `IBV_EVENT_CQ_ERR` (verbs.h).
pub const IBV_EVENT_CQ_ERR: u32 = 0;
/// `IBV_EVENT_QP_FATAL` (verbs.h).
pub const IBV_EVENT_QP_FATAL: u32 = 1;
/// `IBV_EVENT_QP_REQ_ERR` (verbs.h).
pub const IBV_EVENT_QP_REQ_ERR: u32 = 2;
/// `IBV_EVENT_QP_ACCESS_ERR` (verbs.h).
pub const IBV_EVENT_QP_ACCESS_ERR: u32 = 3;
/// `IBV_EVENT_COMM_EST` (verbs.h).
pub const IBV_EVENT_COMM_EST: u32 = 4;
/// `IBV_EVENT_SQ_DRAINED` (verbs.h).
pub const IBV_EVENT_SQ_DRAINED: u32 = 5;
/// `IBV_EVENT_PATH_MIG` (verbs.h).
pub const IBV_EVENT_PATH_MIG: u32 = 6;
/// `IBV_EVENT_PATH_MIG_ERR` (verbs.h).
pub const IBV_EVENT_PATH_MIG_ERR: u32 = 7;
/// `IBV_EVENT_DEVICE_FATAL` (verbs.h).
pub const IBV_EVENT_DEVICE_FATAL: u32 = 8;
/// `IBV_EVENT_PORT_ACTIVE` (verbs.h).
pub const IBV_EVENT_PORT_ACTIVE: u32 = 9;
/// `IBV_EVENT_PORT_ERR` (verbs.h).
pub const IBV_EVENT_PORT_ERR: u32 = 10;
/// `IBV_EVENT_LID_CHANGE` (verbs.h).
pub const IBV_EVENT_LID_CHANGE: u32 = 11;
/// `IBV_EVENT_PKEY_CHANGE` (verbs.h).
pub const IBV_EVENT_PKEY_CHANGE: u32 = 12;
/// `IBV_EVENT_SM_CHANGE` (verbs.h).
pub const IBV_EVENT_SM_CHANGE: u32 = 13;
/// `IBV_EVENT_SRQ_ERR` (verbs.h).
pub const IBV_EVENT_SRQ_ERR: u32 = 14;
/// `IBV_EVENT_SRQ_LIMIT_REACHED` (verbs.h).
pub const IBV_EVENT_SRQ_LIMIT_REACHED: u32 = 15;
/// `IBV_EVENT_QP_LAST_WQE_REACHED` (verbs.h).
pub const IBV_EVENT_QP_LAST_WQE_REACHED: u32 = 16;
/// `IBV_EVENT_CLIENT_REREGISTER` (verbs.h).
pub const IBV_EVENT_CLIENT_REREGISTER: u32 = 17;
/// `IBV_EVENT_GID_CHANGE` (verbs.h).
pub const IBV_EVENT_GID_CHANGE: u32 = 18;
/// `IBV_EVENT_WQ_FATAL` (verbs.h).
pub const IBV_EVENT_WQ_FATAL: u32 = 19;

/// Prefix of `struct ibv_srq`, up to `handle` (an async SRQ event names the
/// SRQ by pointer; its `srq_context` points at our SRQN). Never allocate or
/// copy one.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_srq {
    /// `ibv_srq.context`.
    pub context: *mut ibv_context,
    /// `ibv_srq.srq_context`.
    pub srq_context: *mut c_void,
    /// `ibv_srq.pd`.
    pub pd: *mut ibv_pd,
    /// `ibv_srq.handle`.
    pub handle: u32,
}

/// `struct ibv_xrcd`, `struct ibv_rwq_ind_table`: only pointed to (NULL).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_xrcd {
    _opaque: [u8; 0],
}
#[repr(C)]
#[derive(Debug)]
/// `struct ibv_rwq_ind_table` (verbs.h).
pub struct ibv_rwq_ind_table {
    _opaque: [u8; 0],
}

/// Prefix of `struct ibv_context`, up to `num_comp_vectors`: `device` and
/// `async_fd` are read. The real struct continues with a mutex; never
/// allocate or copy one.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_context {
    /// `ibv_context.device`.
    pub device: *mut ibv_device,
    /// `struct ibv_context_ops`: 32 function pointers, never called.
    pub ops: [*mut c_void; 32],
    /// `ibv_context.cmd_fd`.
    pub cmd_fd: c_int,
    /// `ibv_context.async_fd`.
    pub async_fd: c_int,
    /// `ibv_context.num_comp_vectors`.
    pub num_comp_vectors: c_int,
}

/// Index of `alloc_mw` in `struct ibv_context_ops` ([`ibv_context::ops`]):
/// `ibv_alloc_mw` is an inline of verbs.h that calls it.
pub const OPS_ALLOC_MW: usize = 7;
/// Index of `dealloc_mw` there (`ibv_dealloc_mw`, an inline too).
pub const OPS_DEALLOC_MW: usize = 9;

/// `struct ibv_mw` (verbs.h): a memory window.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mw {
    /// `ibv_mw.context`.
    pub context: *mut ibv_context,
    /// `ibv_mw.pd`.
    pub pd: *mut ibv_pd,
    /// `ibv_mw.rkey`.
    pub rkey: u32,
    /// `ibv_mw.handle`.
    pub handle: u32,
    /// `ibv_mw.type` (`enum ibv_mw_type`: 1 or 2).
    pub r#type: c_int,
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device_attr {
    /// `ibv_device_attr.fw_ver`.
    pub fw_ver: [c_char; 64],
    /// `__be64`.
    pub node_guid: u64,
    /// `__be64`.
    pub sys_image_guid: u64,
    /// `ibv_device_attr.max_mr_size`.
    pub max_mr_size: u64,
    /// `ibv_device_attr.page_size_cap`.
    pub page_size_cap: u64,
    /// `ibv_device_attr.vendor_id`.
    pub vendor_id: u32,
    /// `ibv_device_attr.vendor_part_id`.
    pub vendor_part_id: u32,
    /// `ibv_device_attr.hw_ver`.
    pub hw_ver: u32,
    /// `ibv_device_attr.max_qp`.
    pub max_qp: c_int,
    /// `ibv_device_attr.max_qp_wr`.
    pub max_qp_wr: c_int,
    /// `ibv_device_attr.device_cap_flags`.
    pub device_cap_flags: c_uint,
    /// `ibv_device_attr.max_sge`.
    pub max_sge: c_int,
    /// `ibv_device_attr.max_sge_rd`.
    pub max_sge_rd: c_int,
    /// `ibv_device_attr.max_cq`.
    pub max_cq: c_int,
    /// `ibv_device_attr.max_cqe`.
    pub max_cqe: c_int,
    /// `ibv_device_attr.max_mr`.
    pub max_mr: c_int,
    /// `ibv_device_attr.max_pd`.
    pub max_pd: c_int,
    /// `ibv_device_attr.max_qp_rd_atom`.
    pub max_qp_rd_atom: c_int,
    /// `ibv_device_attr.max_ee_rd_atom`.
    pub max_ee_rd_atom: c_int,
    /// `ibv_device_attr.max_res_rd_atom`.
    pub max_res_rd_atom: c_int,
    /// `ibv_device_attr.max_qp_init_rd_atom`.
    pub max_qp_init_rd_atom: c_int,
    /// `ibv_device_attr.max_ee_init_rd_atom`.
    pub max_ee_init_rd_atom: c_int,
    /// `enum ibv_atomic_cap`.
    pub atomic_cap: u32,
    /// `ibv_device_attr.max_ee`.
    pub max_ee: c_int,
    /// `ibv_device_attr.max_rdd`.
    pub max_rdd: c_int,
    /// `ibv_device_attr.max_mw`.
    pub max_mw: c_int,
    /// `ibv_device_attr.max_raw_ipv6_qp`.
    pub max_raw_ipv6_qp: c_int,
    /// `ibv_device_attr.max_raw_ethy_qp`.
    pub max_raw_ethy_qp: c_int,
    /// `ibv_device_attr.max_mcast_grp`.
    pub max_mcast_grp: c_int,
    /// `ibv_device_attr.max_mcast_qp_attach`.
    pub max_mcast_qp_attach: c_int,
    /// `ibv_device_attr.max_total_mcast_qp_attach`.
    pub max_total_mcast_qp_attach: c_int,
    /// `ibv_device_attr.max_ah`.
    pub max_ah: c_int,
    /// `ibv_device_attr.max_fmr`.
    pub max_fmr: c_int,
    /// `ibv_device_attr.max_map_per_fmr`.
    pub max_map_per_fmr: c_int,
    /// `ibv_device_attr.max_srq`.
    pub max_srq: c_int,
    /// `ibv_device_attr.max_srq_wr`.
    pub max_srq_wr: c_int,
    /// `ibv_device_attr.max_srq_sge`.
    pub max_srq_sge: c_int,
    /// `ibv_device_attr.max_pkeys`.
    pub max_pkeys: u16,
    /// `ibv_device_attr.local_ca_ack_delay`.
    pub local_ca_ack_delay: u8,
    /// `ibv_device_attr.phys_port_cnt`.
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr` (v44, with `port_cap_flags2`). The exported
/// `ibv_query_port` symbol fills the `_compat_ibv_port_attr` prefix (up to
/// and including `flags`); the rest stays zero.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_port_attr {
    /// `enum ibv_port_state`.
    pub state: u32,
    /// `enum ibv_mtu`.
    pub max_mtu: u32,
    /// `enum ibv_mtu`.
    pub active_mtu: u32,
    /// `ibv_port_attr.gid_tbl_len`.
    pub gid_tbl_len: c_int,
    /// `ibv_port_attr.port_cap_flags`.
    pub port_cap_flags: u32,
    /// `ibv_port_attr.max_msg_sz`.
    pub max_msg_sz: u32,
    /// `ibv_port_attr.bad_pkey_cntr`.
    pub bad_pkey_cntr: u32,
    /// `ibv_port_attr.qkey_viol_cntr`.
    pub qkey_viol_cntr: u32,
    /// `ibv_port_attr.pkey_tbl_len`.
    pub pkey_tbl_len: u16,
    /// `ibv_port_attr.lid`.
    pub lid: u16,
    /// `ibv_port_attr.sm_lid`.
    pub sm_lid: u16,
    /// `ibv_port_attr.lmc`.
    pub lmc: u8,
    /// `ibv_port_attr.max_vl_num`.
    pub max_vl_num: u8,
    /// `ibv_port_attr.sm_sl`.
    pub sm_sl: u8,
    /// `ibv_port_attr.subnet_timeout`.
    pub subnet_timeout: u8,
    /// `ibv_port_attr.init_type_reply`.
    pub init_type_reply: u8,
    /// `ibv_port_attr.active_width`.
    pub active_width: u8,
    /// `ibv_port_attr.active_speed`.
    pub active_speed: u8,
    /// `ibv_port_attr.phys_state`.
    pub phys_state: u8,
    /// `ibv_port_attr.link_layer`.
    pub link_layer: u8,
    /// `ibv_port_attr.flags`.
    pub flags: u8,
    /// `ibv_port_attr.port_cap_flags2`.
    pub port_cap_flags2: u16,
}

/// `struct ibv_gid_entry` (what `ibv_query_gid_ex` fills).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_gid_entry {
    /// `ibv_gid_entry.gid`.
    pub gid: ibv_gid,
    /// `ibv_gid_entry.gid_index`.
    pub gid_index: u32,
    /// `ibv_gid_entry.port_num`.
    pub port_num: u32,
    /// `ibv_gid_entry.gid_type` (`enum ibv_gid_type`: 0 IB, 1 RoCE v1, 2 RoCE v2).
    pub gid_type: u32,
    /// `ibv_gid_entry.ndev_ifindex`.
    pub ndev_ifindex: u32,
}

/// `union ibv_gid` (16 bytes; 8-byte aligned because of its `__be64` view).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_gid {
    /// `ibv_gid.raw`.
    pub raw: [u8; 16],
}

/// `struct ibv_pd`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_pd {
    /// `ibv_pd.context`.
    pub context: *mut ibv_context,
    /// `ibv_pd.handle`.
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mr {
    /// `ibv_mr.context`.
    pub context: *mut ibv_context,
    /// `ibv_mr.pd`.
    pub pd: *mut ibv_pd,
    /// `ibv_mr.addr`.
    pub addr: *mut c_void,
    /// `ibv_mr.length`.
    pub length: usize,
    /// `ibv_mr.handle`.
    pub handle: u32,
    /// `ibv_mr.lkey`.
    pub lkey: u32,
    /// `ibv_mr.rkey`.
    pub rkey: u32,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_srq_attr {
    /// `ibv_srq_attr.max_wr`.
    pub max_wr: u32,
    /// `ibv_srq_attr.max_sge`.
    pub max_sge: u32,
    /// `ibv_srq_attr.srq_limit`.
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_srq_init_attr {
    /// `ibv_srq_init_attr.srq_context`.
    pub srq_context: *mut c_void,
    /// `ibv_srq_init_attr.attr`.
    pub attr: ibv_srq_attr,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ibv_qp_cap {
    /// `ibv_qp_cap.max_send_wr`.
    pub max_send_wr: u32,
    /// `ibv_qp_cap.max_recv_wr`.
    pub max_recv_wr: u32,
    /// `ibv_qp_cap.max_send_sge`.
    pub max_send_sge: u32,
    /// `ibv_qp_cap.max_recv_sge`.
    pub max_recv_sge: u32,
    /// `ibv_qp_cap.max_inline_data`.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr` (declared for the layout test and as the
/// documented prefix of `ibv_qp_init_attr_ex`; QPs are created with
/// `mlx5dv_create_qp`, which takes the `_ex` form).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_qp_init_attr {
    /// `ibv_qp_init_attr.qp_context`.
    pub qp_context: *mut c_void,
    /// `ibv_qp_init_attr.send_cq`.
    pub send_cq: *mut ibv_cq,
    /// `ibv_qp_init_attr.recv_cq`.
    pub recv_cq: *mut ibv_cq,
    /// `ibv_qp_init_attr.srq`.
    pub srq: *mut ibv_srq,
    /// `ibv_qp_init_attr.cap`.
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    /// `ibv_qp_init_attr.sq_sig_all`.
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf` (part of `ibv_qp_init_attr_ex`; unused, zero).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_rx_hash_conf {
    /// `ibv_rx_hash_conf.rx_hash_function`.
    pub rx_hash_function: u8,
    /// `ibv_rx_hash_conf.rx_hash_key_len`.
    pub rx_hash_key_len: u8,
    /// `ibv_rx_hash_conf.rx_hash_key`.
    pub rx_hash_key: *mut u8,
    /// `ibv_rx_hash_conf.rx_hash_fields_mask`.
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_qp_init_attr_ex {
    /// `ibv_qp_init_attr_ex.qp_context`.
    pub qp_context: *mut c_void,
    /// `ibv_qp_init_attr_ex.send_cq`.
    pub send_cq: *mut ibv_cq,
    /// `ibv_qp_init_attr_ex.recv_cq`.
    pub recv_cq: *mut ibv_cq,
    /// `ibv_qp_init_attr_ex.srq`.
    pub srq: *mut ibv_srq,
    /// `ibv_qp_init_attr_ex.cap`.
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    /// `ibv_qp_init_attr_ex.sq_sig_all`.
    pub sq_sig_all: c_int,
    /// `enum ibv_qp_init_attr_mask`.
    pub comp_mask: u32,
    /// `ibv_qp_init_attr_ex.pd`.
    pub pd: *mut ibv_pd,
    /// `ibv_qp_init_attr_ex.xrcd`.
    pub xrcd: *mut ibv_xrcd,
    /// `ibv_qp_init_attr_ex.create_flags`.
    pub create_flags: u32,
    /// `ibv_qp_init_attr_ex.max_tso_header`.
    pub max_tso_header: u16,
    /// `ibv_qp_init_attr_ex.rwq_ind_tbl`.
    pub rwq_ind_tbl: *mut ibv_rwq_ind_table,
    /// `ibv_qp_init_attr_ex.rx_hash_conf`.
    pub rx_hash_conf: ibv_rx_hash_conf,
    /// `ibv_qp_init_attr_ex.source_qpn`.
    pub source_qpn: u32,
    /// `ibv_qp_init_attr_ex.send_ops_flags`.
    pub send_ops_flags: u64,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_global_route {
    /// `ibv_global_route.dgid`.
    pub dgid: ibv_gid,
    /// `ibv_global_route.flow_label`.
    pub flow_label: u32,
    /// `ibv_global_route.sgid_index`.
    pub sgid_index: u8,
    /// `ibv_global_route.hop_limit`.
    pub hop_limit: u8,
    /// `ibv_global_route.traffic_class`.
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_ah_attr {
    /// `ibv_ah_attr.grh`.
    pub grh: ibv_global_route,
    /// `ibv_ah_attr.dlid`.
    pub dlid: u16,
    /// `ibv_ah_attr.sl`.
    pub sl: u8,
    /// `ibv_ah_attr.src_path_bits`.
    pub src_path_bits: u8,
    /// `ibv_ah_attr.static_rate`.
    pub static_rate: u8,
    /// `ibv_ah_attr.is_global`.
    pub is_global: u8,
    /// `ibv_ah_attr.port_num`.
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_attr {
    /// `enum ibv_qp_state`.
    pub qp_state: u32,
    /// `ibv_qp_attr.cur_qp_state`.
    pub cur_qp_state: u32,
    /// `enum ibv_mtu`.
    pub path_mtu: u32,
    /// `enum ibv_mig_state`.
    pub path_mig_state: u32,
    /// `ibv_qp_attr.qkey`.
    pub qkey: u32,
    /// `ibv_qp_attr.rq_psn`.
    pub rq_psn: u32,
    /// `ibv_qp_attr.sq_psn`.
    pub sq_psn: u32,
    /// `ibv_qp_attr.dest_qp_num`.
    pub dest_qp_num: u32,
    /// `ibv_qp_attr.qp_access_flags`.
    pub qp_access_flags: c_uint,
    /// `ibv_qp_attr.cap`.
    pub cap: ibv_qp_cap,
    /// `ibv_qp_attr.ah_attr`.
    pub ah_attr: ibv_ah_attr,
    /// `ibv_qp_attr.alt_ah_attr`.
    pub alt_ah_attr: ibv_ah_attr,
    /// `ibv_qp_attr.pkey_index`.
    pub pkey_index: u16,
    /// `ibv_qp_attr.alt_pkey_index`.
    pub alt_pkey_index: u16,
    /// `ibv_qp_attr.en_sqd_async_notify`.
    pub en_sqd_async_notify: u8,
    /// `ibv_qp_attr.sq_draining`.
    pub sq_draining: u8,
    /// `ibv_qp_attr.max_rd_atomic`.
    pub max_rd_atomic: u8,
    /// `ibv_qp_attr.max_dest_rd_atomic`.
    pub max_dest_rd_atomic: u8,
    /// `ibv_qp_attr.min_rnr_timer`.
    pub min_rnr_timer: u8,
    /// `ibv_qp_attr.port_num`.
    pub port_num: u8,
    /// `ibv_qp_attr.timeout`.
    pub timeout: u8,
    /// `ibv_qp_attr.retry_cnt`.
    pub retry_cnt: u8,
    /// `ibv_qp_attr.rnr_retry`.
    pub rnr_retry: u8,
    /// `ibv_qp_attr.alt_port_num`.
    pub alt_port_num: u8,
    /// `ibv_qp_attr.alt_timeout`.
    pub alt_timeout: u8,
    /// `ibv_qp_attr.rate_limit`.
    pub rate_limit: u32,
}

/// Prefix of `struct ibv_qp`, up to `qp_type` (a mutex and a condition
/// variable follow). `qp_num` of a DCT is written by libmlx5 at INIT→RTR.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_qp {
    /// `ibv_qp.context`.
    pub context: *mut ibv_context,
    /// `ibv_qp.qp_context`.
    pub qp_context: *mut c_void,
    /// `ibv_qp.pd`.
    pub pd: *mut ibv_pd,
    /// `ibv_qp.send_cq`.
    pub send_cq: *mut ibv_cq,
    /// `ibv_qp.recv_cq`.
    pub recv_cq: *mut ibv_cq,
    /// `ibv_qp.srq`.
    pub srq: *mut ibv_srq,
    /// `ibv_qp.handle`.
    pub handle: u32,
    /// `ibv_qp.qp_num`.
    pub qp_num: u32,
    /// `enum ibv_qp_state`, as last set through `ibv_modify_qp`.
    pub state: u32,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
}

// enum ibv_qp_type
/// `IBV_QPT_RC` (verbs.h).
pub const IBV_QPT_RC: u32 = 2;
/// `IBV_QPT_UD` (verbs.h).
pub const IBV_QPT_UD: u32 = 4;
/// `IBV_QPT_DRIVER` (verbs.h).
pub const IBV_QPT_DRIVER: u32 = 0xff;

// enum ibv_qp_state
/// `IBV_QPS_RESET` (verbs.h).
pub const IBV_QPS_RESET: u32 = 0;
/// `IBV_QPS_INIT` (verbs.h).
pub const IBV_QPS_INIT: u32 = 1;
/// `IBV_QPS_RTR` (verbs.h).
pub const IBV_QPS_RTR: u32 = 2;
/// `IBV_QPS_RTS` (verbs.h).
pub const IBV_QPS_RTS: u32 = 3;
/// `IBV_QPS_SQD` (verbs.h).
pub const IBV_QPS_SQD: u32 = 4;
/// `IBV_QPS_SQE` (verbs.h).
pub const IBV_QPS_SQE: u32 = 5;
/// `IBV_QPS_ERR` (verbs.h).
pub const IBV_QPS_ERR: u32 = 6;

// enum ibv_qp_attr_mask
/// `IBV_QP_STATE` (verbs.h).
pub const IBV_QP_STATE: c_int = 1 << 0;
/// `IBV_QP_ACCESS_FLAGS` (verbs.h).
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
/// `IBV_QP_PKEY_INDEX` (verbs.h).
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
/// `IBV_QP_PORT` (verbs.h).
pub const IBV_QP_PORT: c_int = 1 << 5;
/// `IBV_QP_QKEY` (verbs.h).
pub const IBV_QP_QKEY: c_int = 1 << 6;
/// `IBV_QP_AV` (verbs.h).
pub const IBV_QP_AV: c_int = 1 << 7;
/// `IBV_QP_PATH_MTU` (verbs.h).
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
/// `IBV_QP_TIMEOUT` (verbs.h).
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;
/// `IBV_QP_RETRY_CNT` (verbs.h).
pub const IBV_QP_RETRY_CNT: c_int = 1 << 10;
/// `IBV_QP_RNR_RETRY` (verbs.h).
pub const IBV_QP_RNR_RETRY: c_int = 1 << 11;
/// `IBV_QP_RQ_PSN` (verbs.h).
pub const IBV_QP_RQ_PSN: c_int = 1 << 12;
/// `IBV_QP_MAX_QP_RD_ATOMIC` (verbs.h).
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
/// `IBV_QP_MIN_RNR_TIMER` (verbs.h).
pub const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
/// `IBV_QP_SQ_PSN` (verbs.h).
pub const IBV_QP_SQ_PSN: c_int = 1 << 16;
/// `IBV_QP_MAX_DEST_RD_ATOMIC` (verbs.h).
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
/// `IBV_QP_DEST_QPN` (verbs.h).
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;

// enum ibv_mtu
/// `IBV_MTU_256` (verbs.h).
pub const IBV_MTU_256: u32 = 1;
/// `IBV_MTU_512` (verbs.h).
pub const IBV_MTU_512: u32 = 2;
/// `IBV_MTU_1024` (verbs.h).
pub const IBV_MTU_1024: u32 = 3;
/// `IBV_MTU_2048` (verbs.h).
pub const IBV_MTU_2048: u32 = 4;
/// `IBV_MTU_4096` (verbs.h).
pub const IBV_MTU_4096: u32 = 5;

// enum ibv_port_state
/// `IBV_PORT_NOP` (verbs.h).
pub const IBV_PORT_NOP: u32 = 0;
/// `IBV_PORT_DOWN` (verbs.h).
pub const IBV_PORT_DOWN: u32 = 1;
/// `IBV_PORT_INIT` (verbs.h).
pub const IBV_PORT_INIT: u32 = 2;
/// `IBV_PORT_ARMED` (verbs.h).
pub const IBV_PORT_ARMED: u32 = 3;
/// `IBV_PORT_ACTIVE` (verbs.h).
pub const IBV_PORT_ACTIVE: u32 = 4;
/// `IBV_PORT_ACTIVE_DEFER` (verbs.h).
pub const IBV_PORT_ACTIVE_DEFER: u32 = 5;

// IBV_LINK_LAYER_* (an anonymous enum; `ibv_port_attr.link_layer` is u8)
/// `IBV_LINK_LAYER_UNSPECIFIED` (verbs.h).
pub const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
/// `IBV_LINK_LAYER_INFINIBAND` (verbs.h).
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET` (verbs.h).
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

// enum ibv_access_flags
/// `IBV_ACCESS_LOCAL_WRITE` (verbs.h).
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
/// `IBV_ACCESS_REMOTE_WRITE` (verbs.h).
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 1 << 1;
/// `IBV_ACCESS_REMOTE_READ` (verbs.h).
pub const IBV_ACCESS_REMOTE_READ: c_int = 1 << 2;
/// `IBV_ACCESS_REMOTE_ATOMIC` (verbs.h).
pub const IBV_ACCESS_REMOTE_ATOMIC: c_int = 1 << 3;

// enum ibv_qp_init_attr_mask
/// `IBV_QP_INIT_ATTR_PD` (verbs.h).
pub const IBV_QP_INIT_ATTR_PD: u32 = 1 << 0;
/// `IBV_QPF_GRH_REQUIRED` (verbs_api.h): `ibv_port_attr.flags` bit of ports
/// whose every address must carry a GRH.
pub const IBV_QPF_GRH_REQUIRED: u8 = 1 << 0;
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` (verbs.h).
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
/// `IBV_QP_EX_WITH_RDMA_WRITE` (verbs.h, `enum ibv_qp_create_send_ops_flags`).
pub const IBV_QP_EX_WITH_RDMA_WRITE: u64 = 1 << 0;
/// `IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM` (verbs.h).
pub const IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
/// `IBV_QP_EX_WITH_SEND` (verbs.h).
pub const IBV_QP_EX_WITH_SEND: u64 = 1 << 2;
/// `IBV_QP_EX_WITH_SEND_WITH_IMM` (verbs.h).
pub const IBV_QP_EX_WITH_SEND_WITH_IMM: u64 = 1 << 3;
/// `IBV_QP_EX_WITH_RDMA_READ` (verbs.h).
pub const IBV_QP_EX_WITH_RDMA_READ: u64 = 1 << 4;
/// `IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP` (verbs.h).
pub const IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
/// `IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD` (verbs.h).
pub const IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
/// `IBV_QP_EX_WITH_SEND_WITH_INV` (verbs.h).
pub const IBV_QP_EX_WITH_SEND_WITH_INV: u64 = 1 << 9;

// ---------------------------------------------------------------------------
// mlx5dv.h
// ---------------------------------------------------------------------------

/// `mlx5dv_qp.sq` / `mlx5dv_qp.rq`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_qp_wq {
    /// `mlx5dv_qp_wq.buf`.
    pub buf: *mut c_void,
    /// `mlx5dv_qp_wq.wqe_cnt`.
    pub wqe_cnt: u32,
    /// `mlx5dv_qp_wq.stride`.
    pub stride: u32,
}

/// `mlx5dv_qp.bf`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_qp_bf {
    /// `mlx5dv_qp_bf.reg`.
    pub reg: *mut c_void,
    /// `mlx5dv_qp_bf.size`.
    pub size: u32,
}

/// `struct mlx5dv_qp`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_qp {
    /// `__be32 *`: word 0 RQ counter, word 1 SQ counter.
    pub dbrec: *mut u32,
    /// `mlx5dv_qp.sq`.
    pub sq: mlx5dv_qp_wq,
    /// `mlx5dv_qp.rq`.
    pub rq: mlx5dv_qp_wq,
    /// `mlx5dv_qp.bf`.
    pub bf: mlx5dv_qp_bf,
    /// `mlx5dv_qp.comp_mask`.
    pub comp_mask: u64,
    /// `mlx5dv_qp.uar_mmap_offset`.
    pub uar_mmap_offset: libc::off_t,
    /// `mlx5dv_qp.tirn`.
    pub tirn: u32,
    /// `mlx5dv_qp.tisn`.
    pub tisn: u32,
    /// `mlx5dv_qp.rqn`.
    pub rqn: u32,
    /// `mlx5dv_qp.sqn`.
    pub sqn: u32,
    /// `mlx5dv_qp.tir_icm_addr`.
    pub tir_icm_addr: u64,
}

/// `struct mlx5dv_cq`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_cq {
    /// `mlx5dv_cq.buf`.
    pub buf: *mut c_void,
    /// `__be32 *`: word 0 set_ci, word 1 arm.
    pub dbrec: *mut u32,
    /// `mlx5dv_cq.cqe_cnt`.
    pub cqe_cnt: u32,
    /// `mlx5dv_cq.cqe_size`.
    pub cqe_size: u32,
    /// `mlx5dv_cq.cq_uar`.
    pub cq_uar: *mut c_void,
    /// `mlx5dv_cq.cqn`.
    pub cqn: u32,
    /// `mlx5dv_cq.comp_mask`.
    pub comp_mask: u64,
}

/// `struct mlx5dv_srq`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_srq {
    /// `mlx5dv_srq.buf`.
    pub buf: *mut c_void,
    /// `__be32 *`: word 0 WQE counter.
    pub dbrec: *mut u32,
    /// `mlx5dv_srq.stride`.
    pub stride: u32,
    /// `mlx5dv_srq.head`.
    pub head: u32,
    /// `mlx5dv_srq.tail`.
    pub tail: u32,
    /// `mlx5dv_srq.comp_mask`.
    pub comp_mask: u64,
    /// `mlx5dv_srq.srqn`.
    pub srqn: u32,
}

/// One `{ in, out }` pair of `struct mlx5dv_obj`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mlx5dv_obj_pair<I, O> {
    /// `in` of the `mlx5dv_obj` member.
    pub r#in: *mut I,
    /// `mlx5dv_obj_pair.out`.
    pub out: *mut O,
}

/// `struct ibv_ah` (opaque here: only passed back to rdma-core).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_ah {
    _private: [u8; 0],
}

/// `struct mlx5dv_ah`: the address handle's 48-byte `struct mlx5_wqe_av`.
#[repr(C)]
#[derive(Debug)]
pub struct mlx5dv_ah {
    /// `mlx5dv_ah.av` (a `struct mlx5_wqe_av *`: the datagram segment's bytes).
    pub av: *mut u8,
    /// `mlx5dv_ah.comp_mask`.
    pub comp_mask: u64,
}

/// `struct mlx5dv_obj` (every member, so that its size matches; only the
/// QP, CQ, SRQ and AH pairs are ever filled).
#[repr(C)]
#[derive(Debug)]
pub struct mlx5dv_obj {
    /// `mlx5dv_obj.qp`.
    pub qp: mlx5dv_obj_pair<ibv_qp, mlx5dv_qp>,
    /// `mlx5dv_obj.cq`.
    pub cq: mlx5dv_obj_pair<ibv_cq, mlx5dv_cq>,
    /// `mlx5dv_obj.srq`.
    pub srq: mlx5dv_obj_pair<ibv_srq, mlx5dv_srq>,
    /// `mlx5dv_obj.rwq`.
    pub rwq: mlx5dv_obj_pair<c_void, c_void>,
    /// `mlx5dv_obj.dm`.
    pub dm: mlx5dv_obj_pair<c_void, c_void>,
    /// `mlx5dv_obj.ah`.
    pub ah: mlx5dv_obj_pair<ibv_ah, mlx5dv_ah>,
    /// `mlx5dv_obj.pd`.
    pub pd: mlx5dv_obj_pair<c_void, c_void>,
}

/// `struct mlx5dv_cqe_comp_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_cqe_comp_caps {
    /// `mlx5dv_cqe_comp_caps.max_num`.
    pub max_num: u32,
    /// `enum mlx5dv_cqe_comp_res_format` bits.
    pub supported_format: u32,
}

/// `struct mlx5dv_sw_parsing_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_sw_parsing_caps {
    /// `mlx5dv_sw_parsing_caps.sw_parsing_offloads`.
    pub sw_parsing_offloads: u32,
    /// `mlx5dv_sw_parsing_caps.supported_qpts`.
    pub supported_qpts: u32,
}

/// `struct mlx5dv_striding_rq_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_striding_rq_caps {
    /// `mlx5dv_striding_rq_caps.min_single_stride_log_num_of_bytes`.
    pub min_single_stride_log_num_of_bytes: u32,
    /// `mlx5dv_striding_rq_caps.max_single_stride_log_num_of_bytes`.
    pub max_single_stride_log_num_of_bytes: u32,
    /// `mlx5dv_striding_rq_caps.min_single_wqe_log_num_of_strides`.
    pub min_single_wqe_log_num_of_strides: u32,
    /// `mlx5dv_striding_rq_caps.max_single_wqe_log_num_of_strides`.
    pub max_single_wqe_log_num_of_strides: u32,
    /// `mlx5dv_striding_rq_caps.supported_qpts`.
    pub supported_qpts: u32,
}

/// `struct mlx5dv_sig_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_sig_caps {
    /// `mlx5dv_sig_caps.block_size`.
    pub block_size: u64,
    /// `mlx5dv_sig_caps.block_prot`.
    pub block_prot: u32,
    /// `mlx5dv_sig_caps.t10dif_bg`.
    pub t10dif_bg: u16,
    /// `mlx5dv_sig_caps.crc_type`.
    pub crc_type: u16,
}

/// `struct mlx5dv_dci_streams_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_dci_streams_caps {
    /// `mlx5dv_dci_streams_caps.max_log_num_concurent`.
    pub max_log_num_concurent: u8,
    /// `mlx5dv_dci_streams_caps.max_log_num_errored`.
    pub max_log_num_errored: u8,
}

/// `struct mlx5dv_crypto_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_crypto_caps {
    /// `mlx5dv_crypto_caps.failed_selftests`.
    pub failed_selftests: u16,
    /// `mlx5dv_crypto_caps.crypto_engines`.
    pub crypto_engines: u8,
    /// `mlx5dv_crypto_caps.wrapped_import_method`.
    pub wrapped_import_method: u8,
    /// `mlx5dv_crypto_caps.log_max_num_deks`.
    pub log_max_num_deks: u8,
    /// `mlx5dv_crypto_caps.flags`.
    pub flags: u32,
}

/// `struct mlx5dv_context` as in v44.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_context {
    /// `mlx5dv_context.version`.
    pub version: u8,
    /// `mlx5dv_context.flags`.
    pub flags: u64,
    /// `mlx5dv_context.comp_mask`.
    pub comp_mask: u64,
    /// `mlx5dv_context.cqe_comp_caps`.
    pub cqe_comp_caps: mlx5dv_cqe_comp_caps,
    /// `mlx5dv_context.sw_parsing_caps`.
    pub sw_parsing_caps: mlx5dv_sw_parsing_caps,
    /// `mlx5dv_context.striding_rq_caps`.
    pub striding_rq_caps: mlx5dv_striding_rq_caps,
    /// `mlx5dv_context.tunnel_offloads_caps`.
    pub tunnel_offloads_caps: u32,
    /// `mlx5dv_context.max_dynamic_bfregs`.
    pub max_dynamic_bfregs: u32,
    /// `mlx5dv_context.max_clock_info_update_nsec`.
    pub max_clock_info_update_nsec: u64,
    /// `mlx5dv_context.flow_action_flags`.
    pub flow_action_flags: u32,
    /// `mlx5dv_context.dc_odp_caps`.
    pub dc_odp_caps: u32,
    /// `mlx5dv_context.hca_core_clock`.
    pub hca_core_clock: *mut c_void,
    /// `mlx5dv_context.num_lag_ports`.
    pub num_lag_ports: u8,
    /// `mlx5dv_context.sig_caps`.
    pub sig_caps: mlx5dv_sig_caps,
    /// `mlx5dv_context.dci_streams_caps`.
    pub dci_streams_caps: mlx5dv_dci_streams_caps,
    /// `mlx5dv_context.max_wr_memcpy_length`.
    pub max_wr_memcpy_length: usize,
    /// `mlx5dv_context.crypto_caps`.
    pub crypto_caps: mlx5dv_crypto_caps,
}

/// `struct mlx5dv_context` with the members later rdma-core releases append
/// after `crypto_caps` (`max_dc_rd_atom`, `max_dc_init_rd_atom`, `reg_c0`,
/// `ooo_recv_wrs_caps`; NOT in the v44 headers). `mlx5dv_query_device` only
/// writes members whose `comp_mask` bit it knows, and reports the bits it
/// filled: a v44 library ignores `MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM` and
/// never touches the tail, a newer one fills it. The tail starts at
/// `size_of::<mlx5dv_context>()` (the v44 size is already a multiple of 8),
/// which the layout test checks.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_context_ext {
    /// `mlx5dv_context_ext.base`.
    pub base: mlx5dv_context,
    /// `mlx5dv_context_ext.max_dc_rd_atom`.
    pub max_dc_rd_atom: u64,
    /// `mlx5dv_context_ext.max_dc_init_rd_atom`.
    pub max_dc_init_rd_atom: u64,
    /// `struct mlx5dv_reg { value, mask }`.
    pub reg_c0: [u32; 2],
    /// `struct mlx5dv_ooo_recv_wrs_caps { max_rc, max_xrc, max_dct, max_ud, max_uc }`.
    pub ooo_recv_wrs_caps: [u32; 5],
}

/// `struct mlx5dv_dci_streams`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_dci_streams {
    /// `mlx5dv_dci_streams.log_num_concurent`.
    pub log_num_concurent: u8,
    /// `mlx5dv_dci_streams.log_num_errored`.
    pub log_num_errored: u8,
}

/// `struct mlx5dv_dc_init_attr`. The anonymous union of v44
/// (`dct_access_key` / `dci_streams`) is declared as its 8-byte member
/// `dct_access_key`; `dci_streams` (2 bytes) would overlay its first bytes
/// and is never used here.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_dc_init_attr {
    /// `enum mlx5dv_dc_type`.
    pub dc_type: u32,
    /// `mlx5dv_dc_init_attr.dct_access_key`.
    pub dct_access_key: u64,
}

/// `struct mlx5dv_qp_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_qp_init_attr {
    /// `enum mlx5dv_qp_init_attr_mask`.
    pub comp_mask: u64,
    /// `enum mlx5dv_qp_create_flags`.
    pub create_flags: u32,
    /// `mlx5dv_qp_init_attr.dc_init_attr`.
    pub dc_init_attr: mlx5dv_dc_init_attr,
    /// `mlx5dv_qp_init_attr.send_ops_flags`.
    pub send_ops_flags: u64,
}

// enum mlx5dv_context_comp_mask
/// `MLX5DV_CONTEXT_MASK_CQE_COMPRESION` (mlx5dv.h).
pub const MLX5DV_CONTEXT_MASK_CQE_COMPRESION: u64 = 1 << 0;
/// `MLX5DV_CONTEXT_MASK_DC_ODP_CAPS` (mlx5dv.h).
pub const MLX5DV_CONTEXT_MASK_DC_ODP_CAPS: u64 = 1 << 7;
/// `MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS` (mlx5dv.h).
pub const MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS: u64 = 1 << 9;
/// `MLX5DV_CONTEXT_MASK_DCI_STREAMS` (mlx5dv.h).
pub const MLX5DV_CONTEXT_MASK_DCI_STREAMS: u64 = 1 << 11;
/// Not in v44 (later releases): see [`mlx5dv_context_ext`].
pub const MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM: u64 = 1 << 14;

// enum mlx5dv_context_flags
/// `MLX5DV_CONTEXT_FLAGS_CQE_V1` (mlx5dv.h).
pub const MLX5DV_CONTEXT_FLAGS_CQE_V1: u64 = 1 << 0;
/// `MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED` (mlx5dv.h).
pub const MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED: u64 = 1 << 2;
/// `MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW` (mlx5dv.h).
pub const MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW: u64 = 1 << 3;
/// `MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP` (mlx5dv.h).
pub const MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP: u64 = 1 << 4;
/// `MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD` (mlx5dv.h).
pub const MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD: u64 = 1 << 5;
/// `MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE` (mlx5dv.h).
pub const MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE: u64 = 1 << 6;
/// `MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS` (mlx5dv.h).
pub const MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS: u64 = 1 << 7;

// enum mlx5dv_cqe_comp_res_format
/// `MLX5DV_CQE_RES_FORMAT_HASH` (mlx5dv.h).
pub const MLX5DV_CQE_RES_FORMAT_HASH: u32 = 1 << 0;
/// `MLX5DV_CQE_RES_FORMAT_CSUM` (mlx5dv.h).
pub const MLX5DV_CQE_RES_FORMAT_CSUM: u32 = 1 << 1;
/// `MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX` (mlx5dv.h).
pub const MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX: u32 = 1 << 2;

// enum mlx5dv_qp_create_flags
/// `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE` (mlx5dv.h).
pub const MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE: u32 = 1 << 3;

// enum mlx5dv_qp_init_attr_mask
/// `MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS` (mlx5dv.h).
pub const MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS: u64 = 1 << 0;
/// `MLX5DV_QP_INIT_ATTR_MASK_DC` (mlx5dv.h).
pub const MLX5DV_QP_INIT_ATTR_MASK_DC: u64 = 1 << 1;

// enum mlx5dv_dc_type
/// `MLX5DV_DCTYPE_DCT` (mlx5dv.h).
pub const MLX5DV_DCTYPE_DCT: u32 = 1;
/// `MLX5DV_DCTYPE_DCI` (mlx5dv.h).
pub const MLX5DV_DCTYPE_DCI: u32 = 2;

// enum mlx5dv_obj_type
/// `MLX5DV_OBJ_QP` (mlx5dv.h).
pub const MLX5DV_OBJ_QP: u64 = 1 << 0;
/// `MLX5DV_OBJ_CQ` (mlx5dv.h).
pub const MLX5DV_OBJ_CQ: u64 = 1 << 1;
/// `MLX5DV_OBJ_SRQ` (mlx5dv.h).
pub const MLX5DV_OBJ_SRQ: u64 = 1 << 2;
/// `MLX5DV_OBJ_AH` (mlx5dv.h).
pub const MLX5DV_OBJ_AH: u64 = 1 << 5;

// enum mlx5dv_srq_comp_mask
/// `MLX5DV_SRQ_MASK_SRQN` (mlx5dv.h).
pub const MLX5DV_SRQ_MASK_SRQN: u64 = 1 << 0;

// ---------------------------------------------------------------------------
// Entry points (all exported symbols of libibverbs.so.1 / libmlx5.so.1 v44;
// none of them is a `static inline` wrapper).
// ---------------------------------------------------------------------------

/// The C signature of rdma-core's `ibv_get_device_list`.
pub type GetDeviceListFn = unsafe extern "C" fn(num_devices: *mut c_int) -> *mut *mut ibv_device;
/// The C signature of rdma-core's `ibv_free_device_list`.
pub type FreeDeviceListFn = unsafe extern "C" fn(list: *mut *mut ibv_device);
/// The C signature of rdma-core's `ibv_get_device_name`.
pub type GetDeviceNameFn = unsafe extern "C" fn(device: *mut ibv_device) -> *const c_char;
/// The C signature of rdma-core's `ibv_open_device`.
pub type OpenDeviceFn = unsafe extern "C" fn(device: *mut ibv_device) -> *mut ibv_context;
/// The C signature of rdma-core's `ibv_close_device`.
pub type CloseDeviceFn = unsafe extern "C" fn(context: *mut ibv_context) -> c_int;
/// The C signature of rdma-core's `ibv_query_device`.
pub type QueryDeviceFn = unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int;
/// The exported `ibv_query_port` takes `struct _compat_ibv_port_attr *`, the
/// prefix of `ibv_port_attr` up to `flags`; passing a zeroed full
/// `ibv_port_attr` is what the header's inline wrapper does too.
pub type QueryPortFn =
    unsafe extern "C" fn(context: *mut ibv_context, port_num: u8, attr: *mut ibv_port_attr) -> c_int;
/// `QueryGidFn`.
pub type QueryGidFn =
    unsafe extern "C" fn(context: *mut ibv_context, port_num: u8, index: c_int, gid: *mut ibv_gid) -> c_int;
/// The C signature of rdma-core's `_ibv_query_gid_ex` (behind the header's
/// inline `ibv_query_gid_ex`; exported since rdma-core v32): returns the errno.
pub type QueryGidExFn = unsafe extern "C" fn(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int;
/// The C signature of rdma-core's `ibv_create_ah`.
pub type CreateAhFn = unsafe extern "C" fn(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah;
/// The C signature of rdma-core's `ibv_destroy_ah`.
pub type DestroyAhFn = unsafe extern "C" fn(ah: *mut ibv_ah) -> c_int;
/// The C signature of rdma-core's `ibv_alloc_pd`.
pub type AllocPdFn = unsafe extern "C" fn(context: *mut ibv_context) -> *mut ibv_pd;
/// The C signature of rdma-core's `ibv_dealloc_pd`.
pub type DeallocPdFn = unsafe extern "C" fn(pd: *mut ibv_pd) -> c_int;
/// The exported `ibv_reg_mr` (the header's macro calls it for access flags
/// without `IBV_ACCESS_OPTIONAL_RANGE` bits, which we never set).
pub type RegMrFn =
    unsafe extern "C" fn(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr;
/// The C signature of rdma-core's `ibv_dereg_mr`.
pub type DeregMrFn = unsafe extern "C" fn(mr: *mut ibv_mr) -> c_int;
/// The C signature of rdma-core's `ibv_create_cq`.
pub type CreateCqFn = unsafe extern "C" fn(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq;
/// The C signature of rdma-core's `ibv_destroy_cq`.
pub type DestroyCqFn = unsafe extern "C" fn(cq: *mut ibv_cq) -> c_int;
/// The C signature of rdma-core's `ibv_create_comp_channel`.
pub type CreateCompChannelFn = unsafe extern "C" fn(context: *mut ibv_context) -> *mut ibv_comp_channel;
/// The C signature of rdma-core's `ibv_destroy_comp_channel`.
pub type DestroyCompChannelFn = unsafe extern "C" fn(channel: *mut ibv_comp_channel) -> c_int;
/// The C signature of rdma-core's `ibv_get_cq_event`.
pub type GetCqEventFn = unsafe extern "C" fn(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int;
/// The C signature of rdma-core's `ibv_ack_cq_events`.
pub type AckCqEventsFn = unsafe extern "C" fn(cq: *mut ibv_cq, nevents: c_uint);
/// `GetAsyncEventFn`.
pub type GetAsyncEventFn =
    unsafe extern "C" fn(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int;
/// The C signature of rdma-core's `ibv_ack_async_event`.
pub type AckAsyncEventFn = unsafe extern "C" fn(event: *mut ibv_async_event);
/// `mlx5dv_create_cq`: returns a `struct ibv_cq_ex *`, whose first part is
/// a `struct ibv_cq` (`ibv_cq_ex_to_cq` is a cast).
pub type Mlx5dvCreateCqFn = unsafe extern "C" fn(
    context: *mut ibv_context,
    cq_attr: *mut ibv_cq_init_attr_ex,
    mlx5_cq_attr: *mut mlx5dv_cq_init_attr,
) -> *mut ibv_cq;
/// The C signature of rdma-core's `ibv_create_srq`.
pub type CreateSrqFn = unsafe extern "C" fn(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
/// The C signature of rdma-core's `ibv_destroy_srq`.
pub type DestroySrqFn = unsafe extern "C" fn(srq: *mut ibv_srq) -> c_int;
/// `ModifyQpFn`.
pub type ModifyQpFn =
    unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int;
/// The C signature of rdma-core's `ibv_destroy_qp`.
pub type DestroyQpFn = unsafe extern "C" fn(qp: *mut ibv_qp) -> c_int;

/// `bool mlx5dv_is_supported(struct ibv_device *)`: C `_Bool`, read as a
/// byte and compared with 0 (never assumed to be 0 or 1).
pub type Mlx5dvIsSupportedFn = unsafe extern "C" fn(device: *mut ibv_device) -> u8;
/// `Mlx5dvQueryDeviceFn`.
pub type Mlx5dvQueryDeviceFn =
    unsafe extern "C" fn(context: *mut ibv_context, attrs_out: *mut mlx5dv_context) -> c_int;
/// The C signature of rdma-core's `mlx5dv_init_obj`.
pub type Mlx5dvInitObjFn = unsafe extern "C" fn(obj: *mut mlx5dv_obj, obj_type: u64) -> c_int;
/// The C signature of rdma-core's `mlx5dv_create_qp`.
pub type Mlx5dvCreateQpFn = unsafe extern "C" fn(
    context: *mut ibv_context,
    qp_attr: *mut ibv_qp_init_attr_ex,
    mlx5_qp_attr: *mut mlx5dv_qp_init_attr,
) -> *mut ibv_qp;

impl core::fmt::Debug for ibv_async_event_element {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ibv_async_event_element").finish_non_exhaustive()
    }
}
