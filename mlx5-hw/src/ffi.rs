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
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq_init_attr_ex` (rdma-core v44).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

/// `struct mlx5dv_cq_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct mlx5dv_cq_init_attr {
    pub comp_mask: u64,
    pub cqe_comp_res_format: u8,
    pub flags: u32,
    pub cqe_size: u16,
}

// enum mlx5dv_cq_init_attr_mask
pub const MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE: u64 = 1 << 0;
pub const MLX5DV_CQ_INIT_ATTR_MASK_FLAGS: u64 = 1 << 1;
pub const MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE: u64 = 1 << 2;
// enum mlx5dv_qp_create_flags
pub const MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE: u32 = 1 << 4;

/// Prefix of `struct ibv_cq`: up to `cqe` (an async CQ error names the
/// CQ by pointer; its `cq_context` points at our CQN). Everything else
/// comes from `mlx5dv_init_obj`; never allocate or copy one.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
}

/// `struct ibv_async_event`: the element union, then the event type.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_async_event {
    pub element: ibv_async_event_element,
    /// `enum ibv_event_type`.
    pub event_type: u32,
}

/// The element union of `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut ibv_srq,
    pub wq: *mut c_void,
    pub port_num: c_int,
}

// enum ibv_event_type
pub const IBV_EVENT_CQ_ERR: u32 = 0;
pub const IBV_EVENT_QP_FATAL: u32 = 1;
pub const IBV_EVENT_QP_REQ_ERR: u32 = 2;
pub const IBV_EVENT_QP_ACCESS_ERR: u32 = 3;
pub const IBV_EVENT_COMM_EST: u32 = 4;
pub const IBV_EVENT_SQ_DRAINED: u32 = 5;
pub const IBV_EVENT_PATH_MIG: u32 = 6;
pub const IBV_EVENT_PATH_MIG_ERR: u32 = 7;
pub const IBV_EVENT_DEVICE_FATAL: u32 = 8;
pub const IBV_EVENT_PORT_ACTIVE: u32 = 9;
pub const IBV_EVENT_PORT_ERR: u32 = 10;
pub const IBV_EVENT_LID_CHANGE: u32 = 11;
pub const IBV_EVENT_PKEY_CHANGE: u32 = 12;
pub const IBV_EVENT_SM_CHANGE: u32 = 13;
pub const IBV_EVENT_SRQ_ERR: u32 = 14;
pub const IBV_EVENT_SRQ_LIMIT_REACHED: u32 = 15;
pub const IBV_EVENT_QP_LAST_WQE_REACHED: u32 = 16;
pub const IBV_EVENT_CLIENT_REREGISTER: u32 = 17;
pub const IBV_EVENT_GID_CHANGE: u32 = 18;
pub const IBV_EVENT_WQ_FATAL: u32 = 19;

/// Prefix of `struct ibv_srq`, up to `handle` (an async SRQ event names the
/// SRQ by pointer; its `srq_context` points at our SRQN). Never allocate or
/// copy one.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
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
pub struct ibv_rwq_ind_table {
    _opaque: [u8; 0],
}

/// Prefix of `struct ibv_context`, up to `num_comp_vectors`: `device` and
/// `async_fd` are read. The real struct continues with a mutex; never
/// allocate or copy one.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    /// `struct ibv_context_ops`: 32 function pointers, never called.
    pub ops: [*mut c_void; 32],
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    /// `__be64`.
    pub node_guid: u64,
    /// `__be64`.
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    /// `enum ibv_atomic_cap`.
    pub atomic_cap: u32,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
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
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `union ibv_gid` (16 bytes; 8-byte aligned because of its `__be64` view).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// `struct ibv_pd`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr` (declared for the layout test and as the
/// documented prefix of `ibv_qp_init_attr_ex`; QPs are created with
/// `mlx5dv_create_qp`, which takes the `_ex` form).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf` (part of `ibv_qp_init_attr_ex`; unused, zero).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    pub sq_sig_all: c_int,
    /// `enum ibv_qp_init_attr_mask`.
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut ibv_rwq_ind_table,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_attr {
    /// `enum ibv_qp_state`.
    pub qp_state: u32,
    pub cur_qp_state: u32,
    /// `enum ibv_mtu`.
    pub path_mtu: u32,
    /// `enum ibv_mig_state`.
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// Prefix of `struct ibv_qp`, up to `qp_type` (a mutex and a condition
/// variable follow). `qp_num` of a DCT is written by libmlx5 at INIT→RTR.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    /// `enum ibv_qp_state`, as last set through `ibv_modify_qp`.
    pub state: u32,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
}

// enum ibv_qp_type
pub const IBV_QPT_RC: u32 = 2;
pub const IBV_QPT_UD: u32 = 4;
pub const IBV_QPT_DRIVER: u32 = 0xff;

// enum ibv_qp_state
pub const IBV_QPS_RESET: u32 = 0;
pub const IBV_QPS_INIT: u32 = 1;
pub const IBV_QPS_RTR: u32 = 2;
pub const IBV_QPS_RTS: u32 = 3;
pub const IBV_QPS_SQD: u32 = 4;
pub const IBV_QPS_SQE: u32 = 5;
pub const IBV_QPS_ERR: u32 = 6;

// enum ibv_qp_attr_mask
pub const IBV_QP_STATE: c_int = 1 << 0;
pub const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub const IBV_QP_PORT: c_int = 1 << 5;
pub const IBV_QP_QKEY: c_int = 1 << 6;
pub const IBV_QP_AV: c_int = 1 << 7;
pub const IBV_QP_PATH_MTU: c_int = 1 << 8;
pub const IBV_QP_TIMEOUT: c_int = 1 << 9;
pub const IBV_QP_RETRY_CNT: c_int = 1 << 10;
pub const IBV_QP_RNR_RETRY: c_int = 1 << 11;
pub const IBV_QP_RQ_PSN: c_int = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
pub const IBV_QP_MIN_RNR_TIMER: c_int = 1 << 15;
pub const IBV_QP_SQ_PSN: c_int = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
pub const IBV_QP_DEST_QPN: c_int = 1 << 20;

// enum ibv_mtu
pub const IBV_MTU_256: u32 = 1;
pub const IBV_MTU_512: u32 = 2;
pub const IBV_MTU_1024: u32 = 3;
pub const IBV_MTU_2048: u32 = 4;
pub const IBV_MTU_4096: u32 = 5;

// enum ibv_port_state
pub const IBV_PORT_NOP: u32 = 0;
pub const IBV_PORT_DOWN: u32 = 1;
pub const IBV_PORT_INIT: u32 = 2;
pub const IBV_PORT_ARMED: u32 = 3;
pub const IBV_PORT_ACTIVE: u32 = 4;
pub const IBV_PORT_ACTIVE_DEFER: u32 = 5;

// IBV_LINK_LAYER_* (an anonymous enum; `ibv_port_attr.link_layer` is u8)
pub const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

// enum ibv_access_flags
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1;
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 1 << 1;
pub const IBV_ACCESS_REMOTE_READ: c_int = 1 << 2;
pub const IBV_ACCESS_REMOTE_ATOMIC: c_int = 1 << 3;

// enum ibv_qp_init_attr_mask
pub const IBV_QP_INIT_ATTR_PD: u32 = 1 << 0;

// ---------------------------------------------------------------------------
// mlx5dv.h
// ---------------------------------------------------------------------------

/// `mlx5dv_qp.sq` / `mlx5dv_qp.rq`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_qp_wq {
    pub buf: *mut c_void,
    pub wqe_cnt: u32,
    pub stride: u32,
}

/// `mlx5dv_qp.bf`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_qp_bf {
    pub reg: *mut c_void,
    pub size: u32,
}

/// `struct mlx5dv_qp`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_qp {
    /// `__be32 *`: word 0 RQ counter, word 1 SQ counter.
    pub dbrec: *mut u32,
    pub sq: mlx5dv_qp_wq,
    pub rq: mlx5dv_qp_wq,
    pub bf: mlx5dv_qp_bf,
    pub comp_mask: u64,
    pub uar_mmap_offset: libc::off_t,
    pub tirn: u32,
    pub tisn: u32,
    pub rqn: u32,
    pub sqn: u32,
    pub tir_icm_addr: u64,
}

/// `struct mlx5dv_cq`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_cq {
    pub buf: *mut c_void,
    /// `__be32 *`: word 0 set_ci, word 1 arm.
    pub dbrec: *mut u32,
    pub cqe_cnt: u32,
    pub cqe_size: u32,
    pub cq_uar: *mut c_void,
    pub cqn: u32,
    pub comp_mask: u64,
}

/// `struct mlx5dv_srq`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_srq {
    pub buf: *mut c_void,
    /// `__be32 *`: word 0 WQE counter.
    pub dbrec: *mut u32,
    pub stride: u32,
    pub head: u32,
    pub tail: u32,
    pub comp_mask: u64,
    pub srqn: u32,
}

/// One `{ in, out }` pair of `struct mlx5dv_obj`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mlx5dv_obj_pair<I, O> {
    pub r#in: *mut I,
    pub out: *mut O,
}

/// `struct mlx5dv_obj` (every member, so that its size matches; only the
/// QP, CQ and SRQ pairs are ever filled).
#[repr(C)]
#[derive(Debug)]
pub struct mlx5dv_obj {
    pub qp: mlx5dv_obj_pair<ibv_qp, mlx5dv_qp>,
    pub cq: mlx5dv_obj_pair<ibv_cq, mlx5dv_cq>,
    pub srq: mlx5dv_obj_pair<ibv_srq, mlx5dv_srq>,
    pub rwq: mlx5dv_obj_pair<c_void, c_void>,
    pub dm: mlx5dv_obj_pair<c_void, c_void>,
    pub ah: mlx5dv_obj_pair<c_void, c_void>,
    pub pd: mlx5dv_obj_pair<c_void, c_void>,
}

/// `struct mlx5dv_cqe_comp_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_cqe_comp_caps {
    pub max_num: u32,
    /// `enum mlx5dv_cqe_comp_res_format` bits.
    pub supported_format: u32,
}

/// `struct mlx5dv_sw_parsing_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_sw_parsing_caps {
    pub sw_parsing_offloads: u32,
    pub supported_qpts: u32,
}

/// `struct mlx5dv_striding_rq_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_striding_rq_caps {
    pub min_single_stride_log_num_of_bytes: u32,
    pub max_single_stride_log_num_of_bytes: u32,
    pub min_single_wqe_log_num_of_strides: u32,
    pub max_single_wqe_log_num_of_strides: u32,
    pub supported_qpts: u32,
}

/// `struct mlx5dv_sig_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_sig_caps {
    pub block_size: u64,
    pub block_prot: u32,
    pub t10dif_bg: u16,
    pub crc_type: u16,
}

/// `struct mlx5dv_dci_streams_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_dci_streams_caps {
    pub max_log_num_concurent: u8,
    pub max_log_num_errored: u8,
}

/// `struct mlx5dv_crypto_caps`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct mlx5dv_crypto_caps {
    pub failed_selftests: u16,
    pub crypto_engines: u8,
    pub wrapped_import_method: u8,
    pub log_max_num_deks: u8,
    pub flags: u32,
}

/// `struct mlx5dv_context` as in v44.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct mlx5dv_context {
    pub version: u8,
    pub flags: u64,
    pub comp_mask: u64,
    pub cqe_comp_caps: mlx5dv_cqe_comp_caps,
    pub sw_parsing_caps: mlx5dv_sw_parsing_caps,
    pub striding_rq_caps: mlx5dv_striding_rq_caps,
    pub tunnel_offloads_caps: u32,
    pub max_dynamic_bfregs: u32,
    pub max_clock_info_update_nsec: u64,
    pub flow_action_flags: u32,
    pub dc_odp_caps: u32,
    pub hca_core_clock: *mut c_void,
    pub num_lag_ports: u8,
    pub sig_caps: mlx5dv_sig_caps,
    pub dci_streams_caps: mlx5dv_dci_streams_caps,
    pub max_wr_memcpy_length: usize,
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
    pub base: mlx5dv_context,
    pub max_dc_rd_atom: u64,
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
    pub log_num_concurent: u8,
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
    pub dc_init_attr: mlx5dv_dc_init_attr,
    pub send_ops_flags: u64,
}

// enum mlx5dv_context_comp_mask
pub const MLX5DV_CONTEXT_MASK_CQE_COMPRESION: u64 = 1 << 0;
pub const MLX5DV_CONTEXT_MASK_DC_ODP_CAPS: u64 = 1 << 7;
pub const MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS: u64 = 1 << 9;
pub const MLX5DV_CONTEXT_MASK_DCI_STREAMS: u64 = 1 << 11;
/// Not in v44 (later releases): see [`mlx5dv_context_ext`].
pub const MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM: u64 = 1 << 14;

// enum mlx5dv_context_flags
pub const MLX5DV_CONTEXT_FLAGS_CQE_V1: u64 = 1 << 0;
pub const MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED: u64 = 1 << 2;
pub const MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW: u64 = 1 << 3;
pub const MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP: u64 = 1 << 4;
pub const MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD: u64 = 1 << 5;
pub const MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE: u64 = 1 << 6;
pub const MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS: u64 = 1 << 7;

// enum mlx5dv_cqe_comp_res_format
pub const MLX5DV_CQE_RES_FORMAT_HASH: u32 = 1 << 0;
pub const MLX5DV_CQE_RES_FORMAT_CSUM: u32 = 1 << 1;
pub const MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX: u32 = 1 << 2;

// enum mlx5dv_qp_create_flags
pub const MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE: u32 = 1 << 3;

// enum mlx5dv_qp_init_attr_mask
pub const MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS: u64 = 1 << 0;
pub const MLX5DV_QP_INIT_ATTR_MASK_DC: u64 = 1 << 1;

// enum mlx5dv_dc_type
pub const MLX5DV_DCTYPE_DCT: u32 = 1;
pub const MLX5DV_DCTYPE_DCI: u32 = 2;

// enum mlx5dv_obj_type
pub const MLX5DV_OBJ_QP: u64 = 1 << 0;
pub const MLX5DV_OBJ_CQ: u64 = 1 << 1;
pub const MLX5DV_OBJ_SRQ: u64 = 1 << 2;

// enum mlx5dv_srq_comp_mask
pub const MLX5DV_SRQ_MASK_SRQN: u64 = 1 << 0;

// ---------------------------------------------------------------------------
// Entry points (all exported symbols of libibverbs.so.1 / libmlx5.so.1 v44;
// none of them is a `static inline` wrapper).
// ---------------------------------------------------------------------------

pub type GetDeviceListFn = unsafe extern "C" fn(num_devices: *mut c_int) -> *mut *mut ibv_device;
pub type FreeDeviceListFn = unsafe extern "C" fn(list: *mut *mut ibv_device);
pub type GetDeviceNameFn = unsafe extern "C" fn(device: *mut ibv_device) -> *const c_char;
pub type OpenDeviceFn = unsafe extern "C" fn(device: *mut ibv_device) -> *mut ibv_context;
pub type CloseDeviceFn = unsafe extern "C" fn(context: *mut ibv_context) -> c_int;
pub type QueryDeviceFn = unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int;
/// The exported `ibv_query_port` takes `struct _compat_ibv_port_attr *`, the
/// prefix of `ibv_port_attr` up to `flags`; passing a zeroed full
/// `ibv_port_attr` is what the header's inline wrapper does too.
pub type QueryPortFn =
    unsafe extern "C" fn(context: *mut ibv_context, port_num: u8, attr: *mut ibv_port_attr) -> c_int;
pub type QueryGidFn =
    unsafe extern "C" fn(context: *mut ibv_context, port_num: u8, index: c_int, gid: *mut ibv_gid) -> c_int;
pub type AllocPdFn = unsafe extern "C" fn(context: *mut ibv_context) -> *mut ibv_pd;
pub type DeallocPdFn = unsafe extern "C" fn(pd: *mut ibv_pd) -> c_int;
/// The exported `ibv_reg_mr` (the header's macro calls it for access flags
/// without `IBV_ACCESS_OPTIONAL_RANGE` bits, which we never set).
pub type RegMrFn =
    unsafe extern "C" fn(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr;
pub type DeregMrFn = unsafe extern "C" fn(mr: *mut ibv_mr) -> c_int;
pub type CreateCqFn = unsafe extern "C" fn(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq;
pub type DestroyCqFn = unsafe extern "C" fn(cq: *mut ibv_cq) -> c_int;
pub type CreateCompChannelFn = unsafe extern "C" fn(context: *mut ibv_context) -> *mut ibv_comp_channel;
pub type DestroyCompChannelFn = unsafe extern "C" fn(channel: *mut ibv_comp_channel) -> c_int;
pub type GetCqEventFn = unsafe extern "C" fn(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int;
pub type AckCqEventsFn = unsafe extern "C" fn(cq: *mut ibv_cq, nevents: c_uint);
pub type GetAsyncEventFn =
    unsafe extern "C" fn(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int;
pub type AckAsyncEventFn = unsafe extern "C" fn(event: *mut ibv_async_event);
/// `mlx5dv_create_cq`: returns a `struct ibv_cq_ex *`, whose first part is
/// a `struct ibv_cq` (`ibv_cq_ex_to_cq` is a cast).
pub type Mlx5dvCreateCqFn = unsafe extern "C" fn(
    context: *mut ibv_context,
    cq_attr: *mut ibv_cq_init_attr_ex,
    mlx5_cq_attr: *mut mlx5dv_cq_init_attr,
) -> *mut ibv_cq;
pub type CreateSrqFn = unsafe extern "C" fn(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
pub type DestroySrqFn = unsafe extern "C" fn(srq: *mut ibv_srq) -> c_int;
pub type ModifyQpFn =
    unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int;
pub type DestroyQpFn = unsafe extern "C" fn(qp: *mut ibv_qp) -> c_int;

/// `bool mlx5dv_is_supported(struct ibv_device *)`: C `_Bool`, read as a
/// byte and compared with 0 (never assumed to be 0 or 1).
pub type Mlx5dvIsSupportedFn = unsafe extern "C" fn(device: *mut ibv_device) -> u8;
pub type Mlx5dvQueryDeviceFn =
    unsafe extern "C" fn(context: *mut ibv_context, attrs_out: *mut mlx5dv_context) -> c_int;
pub type Mlx5dvInitObjFn = unsafe extern "C" fn(obj: *mut mlx5dv_obj, obj_type: u64) -> c_int;
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
