//! Layout test: every struct, field and constant of `ffi.rs` against the
//! system's `infiniband/verbs.h` and `infiniband/mlx5dv.h`. A C program
//! printing `sizeof`, `_Alignof`, `offsetof` and the constant values is
//! generated from the same table as the Rust side, compiled with the
//! system C compiler (`$CC`, else `cc`), run, and compared.
//!
//! The build script sets `has_rdma_headers` when the headers are found;
//! without them the test is reported ignored with the reason, never passed.

use std::mem::{align_of, offset_of, size_of};

use crate::ffi::*;

/// One checked fact: a label, the C expression that computes it, and the
/// Rust value.
struct Fact {
    label: String,
    c_expr: String,
    rust: i128,
}

fn c_path(field: &str) -> String {
    field.replace(' ', "").replace("r#", "")
}

macro_rules! size {
    ($v:ident, $t:ty, $c:literal) => {
        $v.push(Fact {
            label: format!("sizeof {}", $c),
            c_expr: format!("sizeof({})", $c),
            rust: size_of::<$t>() as i128,
        });
        $v.push(Fact {
            label: format!("alignof {}", $c),
            c_expr: format!("_Alignof({})", $c),
            rust: align_of::<$t>() as i128,
        });
    };
}

macro_rules! fields {
    ($v:ident, $t:ty, $c:literal, $($($f:ident).+),+ $(,)?) => {
        $(
            let f = c_path(stringify!($($f).+));
            $v.push(Fact {
                label: format!("offsetof {}.{}", $c, f),
                c_expr: format!("offsetof({}, {})", $c, f),
                rust: offset_of!($t, $($f).+) as i128,
            });
            $v.push(Fact {
                label: format!("sizeof {}.{}", $c, f),
                c_expr: format!("sizeof((({} *)0)->{})", $c, f),
                rust: {
                    fn field_size<T, F>(_: impl FnOnce(&T) -> &F) -> usize { size_of::<F>() }
                    field_size(|x: &$t| &x.$($f).+) as i128
                },
            });
        )+
    };
}

macro_rules! consts {
    ($v:ident, $($name:ident),+ $(,)?) => {
        $(
            $v.push(Fact {
                label: stringify!($name).to_string(),
                c_expr: format!("(long long)({})", stringify!($name)),
                rust: $name as i128,
            });
        )+
    };
}

fn facts() -> Vec<Fact> {
    let mut v = Vec::new();

    // verbs.h: prefixes (offsets only; their Rust size is not the C size).
    fields!(v, ibv_context, "struct ibv_context", device, ops, cmd_fd, async_fd, num_comp_vectors);
    for (i, name) in [(OPS_ALLOC_MW, "alloc_mw"), (OPS_DEALLOC_MW, "dealloc_mw")] {
        v.push(Fact {
            label: format!("offsetof struct ibv_context.ops.{name}"),
            c_expr: format!("offsetof(struct ibv_context, ops.{name})"),
            rust: (offset_of!(ibv_context, ops) + i * size_of::<*mut std::ffi::c_void>()) as i128,
        });
    }
    size!(v, ibv_mw, "struct ibv_mw");
    fields!(v, ibv_mw, "struct ibv_mw", context, pd, rkey, handle, r#type);
    fields!(v, ibv_cq, "struct ibv_cq", context, channel, cq_context, handle, cqe);
    fields!(v, ibv_srq, "struct ibv_srq", context, srq_context, pd, handle);
    size!(v, ibv_async_event, "struct ibv_async_event");
    fields!(v, ibv_async_event, "struct ibv_async_event", element, event_type);
    consts!(
        v,
        IBV_EVENT_CQ_ERR,
        IBV_EVENT_QP_FATAL,
        IBV_EVENT_QP_REQ_ERR,
        IBV_EVENT_QP_ACCESS_ERR,
        IBV_EVENT_COMM_EST,
        IBV_EVENT_SQ_DRAINED,
        IBV_EVENT_PATH_MIG,
        IBV_EVENT_PATH_MIG_ERR,
        IBV_EVENT_DEVICE_FATAL,
        IBV_EVENT_PORT_ACTIVE,
        IBV_EVENT_PORT_ERR,
        IBV_EVENT_LID_CHANGE,
        IBV_EVENT_PKEY_CHANGE,
        IBV_EVENT_SM_CHANGE,
        IBV_EVENT_SRQ_ERR,
        IBV_EVENT_SRQ_LIMIT_REACHED,
        IBV_EVENT_QP_LAST_WQE_REACHED,
        IBV_EVENT_CLIENT_REREGISTER,
        IBV_EVENT_GID_CHANGE,
        IBV_EVENT_WQ_FATAL
    );
    fields!(
        v,
        ibv_qp,
        "struct ibv_qp",
        context,
        qp_context,
        pd,
        send_cq,
        recv_cq,
        srq,
        handle,
        qp_num,
        state,
        qp_type
    );

    size!(v, ibv_device_attr, "struct ibv_device_attr");
    fields!(
        v,
        ibv_device_attr,
        "struct ibv_device_attr",
        fw_ver,
        node_guid,
        sys_image_guid,
        max_mr_size,
        page_size_cap,
        vendor_id,
        vendor_part_id,
        hw_ver,
        max_qp,
        max_qp_wr,
        device_cap_flags,
        max_sge,
        max_sge_rd,
        max_cq,
        max_cqe,
        max_mr,
        max_pd,
        max_qp_rd_atom,
        max_ee_rd_atom,
        max_res_rd_atom,
        max_qp_init_rd_atom,
        max_ee_init_rd_atom,
        atomic_cap,
        max_ee,
        max_rdd,
        max_mw,
        max_raw_ipv6_qp,
        max_raw_ethy_qp,
        max_mcast_grp,
        max_mcast_qp_attach,
        max_total_mcast_qp_attach,
        max_ah,
        max_fmr,
        max_map_per_fmr,
        max_srq,
        max_srq_wr,
        max_srq_sge,
        max_pkeys,
        local_ca_ack_delay,
        phys_port_cnt,
    );

    size!(v, ibv_port_attr, "struct ibv_port_attr");
    fields!(
        v,
        ibv_port_attr,
        "struct ibv_port_attr",
        state,
        max_mtu,
        active_mtu,
        gid_tbl_len,
        port_cap_flags,
        max_msg_sz,
        bad_pkey_cntr,
        qkey_viol_cntr,
        pkey_tbl_len,
        lid,
        sm_lid,
        lmc,
        max_vl_num,
        sm_sl,
        subnet_timeout,
        init_type_reply,
        active_width,
        active_speed,
        phys_state,
        link_layer,
        flags,
        port_cap_flags2,
    );

    size!(v, ibv_gid, "union ibv_gid");
    fields!(v, ibv_gid, "union ibv_gid", raw);

    size!(v, ibv_pd, "struct ibv_pd");
    fields!(v, ibv_pd, "struct ibv_pd", context, handle);

    size!(v, ibv_mr, "struct ibv_mr");
    fields!(v, ibv_mr, "struct ibv_mr", context, pd, addr, length, handle, lkey, rkey);

    size!(v, ibv_srq_attr, "struct ibv_srq_attr");
    fields!(v, ibv_srq_attr, "struct ibv_srq_attr", max_wr, max_sge, srq_limit);
    size!(v, ibv_srq_init_attr, "struct ibv_srq_init_attr");
    fields!(v, ibv_srq_init_attr, "struct ibv_srq_init_attr", srq_context, attr);

    size!(v, ibv_qp_cap, "struct ibv_qp_cap");
    fields!(
        v,
        ibv_qp_cap,
        "struct ibv_qp_cap",
        max_send_wr,
        max_recv_wr,
        max_send_sge,
        max_recv_sge,
        max_inline_data
    );

    size!(v, ibv_qp_init_attr, "struct ibv_qp_init_attr");
    fields!(
        v,
        ibv_qp_init_attr,
        "struct ibv_qp_init_attr",
        qp_context,
        send_cq,
        recv_cq,
        srq,
        cap,
        qp_type,
        sq_sig_all
    );

    size!(v, ibv_rx_hash_conf, "struct ibv_rx_hash_conf");
    fields!(
        v,
        ibv_rx_hash_conf,
        "struct ibv_rx_hash_conf",
        rx_hash_function,
        rx_hash_key_len,
        rx_hash_key,
        rx_hash_fields_mask
    );

    size!(v, ibv_qp_init_attr_ex, "struct ibv_qp_init_attr_ex");
    fields!(
        v,
        ibv_qp_init_attr_ex,
        "struct ibv_qp_init_attr_ex",
        qp_context,
        send_cq,
        recv_cq,
        srq,
        cap,
        qp_type,
        sq_sig_all,
        comp_mask,
        pd,
        xrcd,
        create_flags,
        max_tso_header,
        rwq_ind_tbl,
        rx_hash_conf,
        source_qpn,
        send_ops_flags,
    );

    size!(v, ibv_global_route, "struct ibv_global_route");
    fields!(
        v,
        ibv_global_route,
        "struct ibv_global_route",
        dgid,
        flow_label,
        sgid_index,
        hop_limit,
        traffic_class
    );

    size!(v, ibv_ah_attr, "struct ibv_ah_attr");
    fields!(
        v,
        ibv_ah_attr,
        "struct ibv_ah_attr",
        grh,
        grh.dgid,
        grh.sgid_index,
        dlid,
        sl,
        src_path_bits,
        static_rate,
        is_global,
        port_num
    );

    size!(v, ibv_qp_attr, "struct ibv_qp_attr");
    fields!(
        v,
        ibv_qp_attr,
        "struct ibv_qp_attr",
        qp_state,
        cur_qp_state,
        path_mtu,
        path_mig_state,
        qkey,
        rq_psn,
        sq_psn,
        dest_qp_num,
        qp_access_flags,
        cap,
        ah_attr,
        ah_attr.grh.dgid,
        ah_attr.dlid,
        ah_attr.is_global,
        ah_attr.port_num,
        alt_ah_attr,
        pkey_index,
        alt_pkey_index,
        en_sqd_async_notify,
        sq_draining,
        max_rd_atomic,
        max_dest_rd_atomic,
        min_rnr_timer,
        port_num,
        timeout,
        retry_cnt,
        rnr_retry,
        alt_port_num,
        alt_timeout,
        rate_limit,
    );

    // mlx5dv.h
    size!(v, mlx5dv_qp, "struct mlx5dv_qp");
    fields!(
        v,
        mlx5dv_qp,
        "struct mlx5dv_qp",
        dbrec,
        sq,
        sq.buf,
        sq.wqe_cnt,
        sq.stride,
        rq,
        rq.buf,
        rq.wqe_cnt,
        rq.stride,
        bf,
        bf.reg,
        bf.size,
        comp_mask,
        uar_mmap_offset,
        tirn,
        tisn,
        rqn,
        sqn,
        tir_icm_addr,
    );

    size!(v, mlx5dv_cq, "struct mlx5dv_cq");
    fields!(v, mlx5dv_cq, "struct mlx5dv_cq", buf, dbrec, cqe_cnt, cqe_size, cq_uar, cqn, comp_mask);

    size!(v, mlx5dv_srq, "struct mlx5dv_srq");
    fields!(v, mlx5dv_srq, "struct mlx5dv_srq", buf, dbrec, stride, head, tail, comp_mask, srqn);

    size!(v, mlx5dv_obj, "struct mlx5dv_obj");
    size!(v, mlx5dv_ah, "struct mlx5dv_ah");
    fields!(v, mlx5dv_ah, "struct mlx5dv_ah", av, comp_mask);
    size!(v, ibv_gid_entry, "struct ibv_gid_entry");
    fields!(v, ibv_gid_entry, "struct ibv_gid_entry", gid, gid_index, port_num, gid_type, ndev_ifindex);
    fields!(
        v,
        mlx5dv_obj,
        "struct mlx5dv_obj",
        qp,
        qp.r#in,
        qp.out,
        cq,
        cq.r#in,
        cq.out,
        srq,
        srq.r#in,
        srq.out,
        rwq,
        dm,
        ah,
        pd,
    );

    size!(v, ibv_comp_channel, "struct ibv_comp_channel");
    fields!(v, ibv_comp_channel, "struct ibv_comp_channel", context, fd, refcnt);
    size!(v, ibv_cq_init_attr_ex, "struct ibv_cq_init_attr_ex");
    fields!(
        v,
        ibv_cq_init_attr_ex,
        "struct ibv_cq_init_attr_ex",
        cqe,
        cq_context,
        channel,
        comp_vector,
        wc_flags,
        comp_mask,
        flags,
        parent_domain
    );
    size!(v, mlx5dv_cq_init_attr, "struct mlx5dv_cq_init_attr");
    fields!(
        v,
        mlx5dv_cq_init_attr,
        "struct mlx5dv_cq_init_attr",
        comp_mask,
        cqe_comp_res_format,
        flags,
        cqe_size
    );
    size!(v, mlx5dv_cqe_comp_caps, "struct mlx5dv_cqe_comp_caps");
    fields!(v, mlx5dv_cqe_comp_caps, "struct mlx5dv_cqe_comp_caps", max_num, supported_format);
    size!(v, mlx5dv_sw_parsing_caps, "struct mlx5dv_sw_parsing_caps");
    size!(v, mlx5dv_striding_rq_caps, "struct mlx5dv_striding_rq_caps");
    size!(v, mlx5dv_sig_caps, "struct mlx5dv_sig_caps");
    fields!(v, mlx5dv_sig_caps, "struct mlx5dv_sig_caps", block_size, block_prot, t10dif_bg, crc_type);
    size!(v, mlx5dv_dci_streams_caps, "struct mlx5dv_dci_streams_caps");
    fields!(
        v,
        mlx5dv_dci_streams_caps,
        "struct mlx5dv_dci_streams_caps",
        max_log_num_concurent,
        max_log_num_errored
    );
    size!(v, mlx5dv_crypto_caps, "struct mlx5dv_crypto_caps");
    fields!(
        v,
        mlx5dv_crypto_caps,
        "struct mlx5dv_crypto_caps",
        failed_selftests,
        crypto_engines,
        wrapped_import_method,
        log_max_num_deks,
        flags
    );

    size!(v, mlx5dv_context, "struct mlx5dv_context");
    fields!(
        v,
        mlx5dv_context,
        "struct mlx5dv_context",
        version,
        flags,
        comp_mask,
        cqe_comp_caps,
        sw_parsing_caps,
        striding_rq_caps,
        tunnel_offloads_caps,
        max_dynamic_bfregs,
        max_clock_info_update_nsec,
        flow_action_flags,
        dc_odp_caps,
        hca_core_clock,
        num_lag_ports,
        sig_caps,
        dci_streams_caps,
        max_wr_memcpy_length,
        crypto_caps,
    );
    // The post-v44 tail starts right after the v44 struct.
    v.push(Fact {
        label: "mlx5dv_context_ext tail offset".into(),
        c_expr: "sizeof(struct mlx5dv_context)".into(),
        rust: offset_of!(mlx5dv_context_ext, max_dc_rd_atom) as i128,
    });
    v.push(Fact {
        label: "mlx5dv_context_ext.base offset".into(),
        c_expr: "0".into(),
        rust: offset_of!(mlx5dv_context_ext, base) as i128,
    });

    size!(v, mlx5dv_dci_streams, "struct mlx5dv_dci_streams");
    size!(v, mlx5dv_dc_init_attr, "struct mlx5dv_dc_init_attr");
    fields!(v, mlx5dv_dc_init_attr, "struct mlx5dv_dc_init_attr", dc_type, dct_access_key);
    v.push(Fact {
        label: "offsetof mlx5dv_dc_init_attr.dci_streams (union with dct_access_key)".into(),
        c_expr: "offsetof(struct mlx5dv_dc_init_attr, dci_streams)".into(),
        rust: offset_of!(mlx5dv_dc_init_attr, dct_access_key) as i128,
    });

    size!(v, mlx5dv_qp_init_attr, "struct mlx5dv_qp_init_attr");
    fields!(
        v,
        mlx5dv_qp_init_attr,
        "struct mlx5dv_qp_init_attr",
        comp_mask,
        create_flags,
        dc_init_attr,
        send_ops_flags
    );

    consts!(
        v,
        IBV_QPT_RC,
        IBV_QPT_UD,
        IBV_QPT_DRIVER,
        IBV_QPS_RESET,
        IBV_QPS_INIT,
        IBV_QPS_RTR,
        IBV_QPS_RTS,
        IBV_QPS_SQD,
        IBV_QPS_SQE,
        IBV_QPS_ERR,
        IBV_QP_STATE,
        IBV_QP_ACCESS_FLAGS,
        IBV_QP_PKEY_INDEX,
        IBV_QP_PORT,
        IBV_QP_QKEY,
        IBV_QP_AV,
        IBV_QP_PATH_MTU,
        IBV_QP_TIMEOUT,
        IBV_QP_RETRY_CNT,
        IBV_QP_RNR_RETRY,
        IBV_QP_RQ_PSN,
        IBV_QP_MAX_QP_RD_ATOMIC,
        IBV_QP_MIN_RNR_TIMER,
        IBV_QP_SQ_PSN,
        IBV_QP_MAX_DEST_RD_ATOMIC,
        IBV_QP_DEST_QPN,
        IBV_MTU_256,
        IBV_MTU_512,
        IBV_MTU_1024,
        IBV_MTU_2048,
        IBV_MTU_4096,
        IBV_PORT_NOP,
        IBV_PORT_DOWN,
        IBV_PORT_INIT,
        IBV_PORT_ARMED,
        IBV_PORT_ACTIVE,
        IBV_PORT_ACTIVE_DEFER,
        IBV_LINK_LAYER_UNSPECIFIED,
        IBV_LINK_LAYER_INFINIBAND,
        IBV_LINK_LAYER_ETHERNET,
        IBV_ACCESS_LOCAL_WRITE,
        IBV_ACCESS_REMOTE_WRITE,
        IBV_ACCESS_REMOTE_READ,
        IBV_ACCESS_REMOTE_ATOMIC,
        IBV_QP_INIT_ATTR_PD,
        IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        IBV_QPF_GRH_REQUIRED,
        MLX5DV_OBJ_AH,
        IBV_QP_EX_WITH_RDMA_WRITE,
        IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
        IBV_QP_EX_WITH_SEND,
        IBV_QP_EX_WITH_SEND_WITH_IMM,
        IBV_QP_EX_WITH_RDMA_READ,
        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
        IBV_QP_EX_WITH_SEND_WITH_INV,
        MLX5DV_CONTEXT_MASK_CQE_COMPRESION,
        MLX5DV_CONTEXT_MASK_DC_ODP_CAPS,
        MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS,
        MLX5DV_CONTEXT_MASK_DCI_STREAMS,
        MLX5DV_CONTEXT_FLAGS_CQE_V1,
        MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED,
        MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW,
        MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP,
        MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD,
        MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE,
        MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS,
        MLX5DV_CQE_RES_FORMAT_HASH,
        MLX5DV_CQE_RES_FORMAT_CSUM,
        MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX,
        MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE,
        MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE,
        MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE,
        MLX5DV_CQ_INIT_ATTR_MASK_FLAGS,
        MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE,
        MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS,
        MLX5DV_QP_INIT_ATTR_MASK_DC,
        MLX5DV_DCTYPE_DCT,
        MLX5DV_DCTYPE_DCI,
        MLX5DV_OBJ_QP,
        MLX5DV_OBJ_CQ,
        MLX5DV_OBJ_SRQ,
        MLX5DV_SRQ_MASK_SRQN,
    );
    v.push(Fact {
        label: "IBV_QP_CUR_STATE".into(),
        c_expr: "(long long)(IBV_QP_CUR_STATE)".into(),
        rust: crate::masks::IBV_QP_CUR_STATE as i128,
    });
    v
}

fn c_program(facts: &[Fact]) -> String {
    let mut s = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\n\
         #include <infiniband/mlx5dv.h>\nint main(void) {\n",
    );
    for f in facts {
        s.push_str(&format!("    printf(\"%s\\t%lld\\n\", \"{}\", (long long)({}));\n", f.label, f.c_expr));
    }
    s.push_str("    return 0;\n}\n");
    s
}

#[test]
fn facts_are_unique_and_cover_every_declared_struct() {
    let f = facts();
    let mut labels: Vec<&str> = f.iter().map(|x| x.label.as_str()).collect();
    labels.sort();
    let n = labels.len();
    labels.dedup();
    assert_eq!(labels.len(), n, "duplicate facts");
    assert!(n > 300, "{n} facts");
}

#[test]
#[cfg_attr(
    not(has_rdma_headers),
    ignore = "infiniband/verbs.h or mlx5dv.h not found: install libibverbs-dev"
)]
fn ffi_layout_matches_system_headers() {
    let facts = facts();
    let dir = std::env::temp_dir().join(format!("mlx5-hw-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, c_program(&facts)).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = std::process::Command::new(&cc)
        .arg("-std=gnu11")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(out.status.success(), "{cc} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let run = std::process::Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let text = String::from_utf8(run.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), facts.len());
    let mut mismatches = Vec::new();
    for (f, line) in facts.iter().zip(&lines) {
        let (label, value) = line.split_once('\t').unwrap();
        assert_eq!(label, f.label);
        let c: i128 = value.parse().unwrap();
        if c != f.rust {
            mismatches.push(format!("{}: C {} Rust {}", f.label, c, f.rust));
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(mismatches.is_empty(), "layout mismatches:\n{}", mismatches.join("\n"));
    eprintln!("{} facts checked against the system headers", facts.len());
}
