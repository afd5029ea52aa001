/*
 * The emulated uverbs kernel's C side, shared by its three files:
 * kern.c (command fds, contexts, the write() dispatch, GET_CONTEXT and the
 * queries, UAR mmaps), objects.c (the per-context object tables and the
 * commands that create, change and destroy objects) and events.c
 * (completion and asynchronous events to the program's descriptors). The
 * layouts are the installed kernel headers' own; the simulator is behind
 * the mlx5sk_* functions of device.rs.
 */
#ifndef MLX5SK_KERN_H
#define MLX5SK_KERN_H

#define _GNU_SOURCE /* process_vm_writev, memfd_create */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <endian.h>
#include <time.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/mlx5-abi.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <rdma/mlx5_user_ioctl_cmds.h>

/* What the Rust side says a device is. */
struct mlx5sk_dev {
	uint64_t node_guid;
	uint8_t gid[16];
	uint32_t lid;
	uint32_t roce;
	uint32_t active_mtu; /* bytes */
	uint32_t max_qp_wr;
	uint32_t max_sge;
	uint32_t max_cqe;
	uint32_t max_wqe_sz_sq;
	uint32_t bf_size;
	uint32_t max_rd_atomic;
	uint32_t dc;
	uint32_t part_id;
	uint64_t fw_ver;
};

extern int mlx5sk_dev_info(int dev, struct mlx5sk_dev *out);

/* The simulator's objects (device.rs): 0 or -errno. */
struct mlx5sk_qp_init {
	uint32_t qp_type, pdn, send_cqn, recv_cqn, srqn, sq_wqe_cnt, rq_wqe_cnt, rq_stride, user_index,
		scatter_to_cqe;
	uint64_t dc_key;
	uint32_t context, reg;
	uint64_t buf, db;
};
extern int mlx5sk_dct_number(int dev, uint32_t qpn, uint32_t *dctn);
extern int mlx5sk_open_context(int dev, uint32_t *id);
extern int mlx5sk_close_context(int dev, uint32_t id);
extern int mlx5sk_attach_uar(int dev, uint32_t ctx, void *page, uint32_t *reg);
extern int mlx5sk_resize_cq(int dev, uint32_t cqn, uint64_t buf, uint32_t cqe_cnt);
extern int mlx5sk_rereg_mr(int dev, uint32_t key, uint32_t what, uint32_t pdn, uint64_t addr, uint64_t len,
			   uint32_t access);
extern int mlx5sk_attach_clock(int dev, uint32_t ctx, void *page);
struct mlx5sk_qp_mod {
	uint32_t mask, state, port, access, dest_qpn, dlid, is_global, sl;
	uint8_t dgid[16];
	uint32_t path_mtu, min_rnr_timer, rnr_retry, retry_cnt, timeout, sq_psn, rq_psn, max_rd_atomic,
		max_dest_rd_atomic, qkey;
};
extern int mlx5sk_alloc_pd(int dev, uint32_t *pdn);
extern int mlx5sk_dealloc_pd(int dev, uint32_t pdn);
extern int mlx5sk_reg_mr(int dev, uint32_t pdn, uint64_t addr, uint64_t len, uint32_t access, uint32_t *key);
extern int mlx5sk_dereg_mr(int dev, uint32_t key);
extern int mlx5sk_alloc_mw(int dev, uint32_t pdn, uint32_t type, uint32_t *key);
extern int mlx5sk_dealloc_mw(int dev, uint32_t key);
extern int mlx5sk_alloc_indirect_mkey(int dev, uint32_t pdn, uint32_t max_entries, int remote_invalidate,
				      uint32_t *key);
extern int mlx5sk_create_cq(int dev, uint32_t cqe_cnt, uint32_t cqe_size, uint64_t buf, uint64_t db, uint32_t comp,
			    uint32_t channel, uint32_t *cqn);
extern int mlx5sk_create_channel(int dev, uint32_t *id);
extern int mlx5sk_destroy_channel(int dev, uint32_t id);
extern void mlx5sk_start_events(void);
extern int mlx5sk_destroy_cq(int dev, uint32_t cqn);
extern int mlx5sk_create_qp(int dev, const struct mlx5sk_qp_init *q, uint32_t *qpn);
extern int mlx5sk_modify_qp(int dev, uint32_t qpn, const struct mlx5sk_qp_mod *m);
extern int mlx5sk_query_qp(int dev, uint32_t qpn, uint32_t *state, uint32_t *sq_psn, uint32_t *rq_psn);
extern int mlx5sk_destroy_qp(int dev, uint32_t qpn);
extern int mlx5sk_create_srq(int dev, uint32_t pdn, uint32_t wqe_cnt, uint32_t stride, uint32_t user_index,
			     uint64_t buf, uint64_t db, uint32_t *srqn);
extern int mlx5sk_destroy_srq(int dev, uint32_t srqn);
extern int mlx5sk_resolve_mac(const uint8_t *gid, uint8_t *mac);
extern int mlx5sk_arm_srq_limit(int dev, uint32_t srqn, uint32_t limit);
extern int mlx5sk_srq_limit(int dev, uint32_t srqn, uint32_t *limit);

/*
 * A context's objects, by handle (the kernel's idr): the handle is the
 * index. The kernel refuses a handle of another context or of another type,
 * and one already destroyed: each context has its own table.
 */
enum { OBJ_FREE, OBJ_PD, OBJ_MR, OBJ_CQ, OBJ_QP, OBJ_CHANNEL, OBJ_SRQ, OBJ_AH, OBJ_MW, OBJ_DEVX_MKEY };
struct uobj {
	uint8_t type;
	uint32_t num;        /* pdn, key, cqn, qpn; the channel's fd */
	uint32_t users;      /* objects that name this one (a PD's MRs and QPs, a CQ's QPs) */
	uint32_t pd, scq, rcq, srq; /* handles this object names (srq: UINT32_MAX for none) */
	uint32_t max_wr, max_sge; /* SRQ: what QUERY_SRQ reports; CQ: max_wr its entries, max_sge its CQE size */
	int peer;            /* channel: our end */
	uint32_t sim_chan;   /* channel: the simulator's */
	uint64_t user_handle; /* CQ, QP, SRQ: the library's pointer, named by events */
	uint32_t comp_events, async_events; /* events delivered (DESTROY_* reports them) */
	uint32_t qp_kind;    /* QP: IB_QPT_RC, IB_QPT_UD, or 0x100 DCI / 0x101 DCT */
	struct ib_uverbs_query_qp_resp *qattr; /* QP: what QUERY_QP reports */
};

/* UAR pages of a context: total_num_bfregs / 2 (mlx5_ib's limit, 512 bfregs). */
#define MAX_UAR_PAGES 256
/* Dynamic UAR pages of a context (mlx5_ib's MLX5_MAX_DYN_BFREGS, 1024
 * bfregs, 2 per page): libmlx5 maps them one by one with
 * MLX5_IB_MMAP_ALLOC_WC for thread domains and mlx5dv_devx_alloc_uar. */
#define DYN_UAR_PAGES 512

/* Per command fd: the device and the context GET_CONTEXT made. */
struct ctx {
	int fd;        /* the command fd, -1 when the slot is free */
	int dev;
	int has_ucontext;
	int devx; /* opened with MLX5_IB_ALLOC_UCTX_DEVX (only when MLX5_SIM_DEVX is set) */
	int async_peer; /* our end of the async event socketpair */
	int async_fd;   /* the program's end */
	struct uobj *objs;
	uint32_t nobjs;
	/* The simulator's context, and the UAR pages: a memfd of npages pages
	 * that the program maps through the command fd (mlx5sk_mmap_target)
	 * and that the simulator watches through this process's own mapping
	 * (`uars`), so the program's doorbells and BlueFlame writes reach it. */
	uint32_t sim_ctx;
	int memfd; /* npages UAR pages, the core clock page, the clock info page, DYN_UAR_PAGES */
	uint8_t *uars;
	uint32_t npages, first_reg[MAX_UAR_PAGES];
	/* Dynamic UAR pages, after the clock pages in the memfd: mapped once
	 * each (dyn_mapped), their first register the simulator's dyn_reg. */
	uint32_t dyn_reg[DYN_UAR_PAGES];
	uint8_t dyn_mapped[DYN_UAR_PAGES];
	uint32_t medium_lo, medium_hi, next_bfreg; /* compact bfreg indices handed to QPs, in turn */
};

/* Objects a context may hold (the kernel's limit is memory). */
#define MAX_OBJS (1u << 16)

#define MAX_CTX 256
/* The contexts, by command fd, and the lock every command holds. */
extern struct ctx ctxs[MAX_CTX];
extern pthread_mutex_t lock;
extern int ctxs_ready;

/* IBV_EVENT_* that name a CQ, a QP, an SRQ. */
#define CQ_EVENTS (1u << 0)
#define QP_EVENTS ((1u << 1) | (1u << 2) | (1u << 3) | (1u << 4) | (1u << 5) | (1u << 6) | (1u << 7) | (1u << 16))
#define SRQ_EVENTS ((1u << 14) | (1u << 15))

/* The parts of CREATE_QP and EX_CREATE_QP that are the same. */
struct qp_req {
	uint64_t user_handle;
	uint32_t pd_handle, send_cq_handle, recv_cq_handle, srq_handle;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;
	uint8_t sq_sig_all, qp_type, is_srq;
};

/* kern.c */
int sk_put(uint64_t dst, const void *src, size_t len, size_t room);
int sk_mapped(uint64_t addr, uint64_t len);

/* objects.c: 0 / a handle, or -errno. */
int sk_put2(uint64_t dst, const void *core, size_t core_len, const void *drv, size_t drv_len, size_t room);
struct uobj *sk_obj_get(struct ctx *c, uint32_t handle, uint8_t type);
void sk_obj_destroy(struct ctx *c, uint32_t h);
int sk_alloc_pd(struct ctx *c, const uint8_t *in, size_t in_len, size_t room);
int sk_dealloc_pd(struct ctx *c, const uint8_t *in, size_t in_len);
int sk_reg_mr(struct ctx *c, const uint8_t *in, size_t in_len, size_t room);
int sk_dereg_mr(struct ctx *c, const uint8_t *in, size_t in_len);
int sk_alloc_mw(struct ctx *c, const uint8_t *in, size_t in_len, size_t room);
int sk_dealloc_mw(struct ctx *c, const uint8_t *in, size_t in_len);
int sk_devx_obj(struct ctx *c, struct ib_uverbs_ioctl_hdr *h);
int sk_create_comp_channel(struct ctx *c, const uint8_t *in, size_t in_len, size_t room);
int sk_create_cq(struct ctx *c, uint64_t user_handle, uint32_t entries, uint32_t comp_vector, int32_t channel,
		 const uint8_t *udata, size_t udata_len, uint32_t *cqe, uint32_t *cqn);
int sk_resize_cq(struct ctx *c, const uint8_t *in, size_t in_len, size_t room);
int sk_rereg_mr(struct ctx *c, const uint8_t *in, size_t in_len, size_t room);
int sk_destroy_cq(struct ctx *c, const uint8_t *in, size_t in_len, size_t room);
int sk_create_qp(struct ctx *c, const struct qp_req *q, const uint8_t *udata, size_t udata_len,
		 struct ib_uverbs_create_qp_resp *resp, struct mlx5_ib_create_qp_resp *drv);
int sk_modify_qp(struct ctx *c, const struct ib_uverbs_modify_qp *cmd);
int sk_query_qp(struct ctx *c, const uint8_t *in, size_t in_len, size_t room);
int sk_destroy_qp(struct ctx *c, const uint8_t *in, size_t in_len, size_t room);
int sk_create_srq(struct ctx *c, const uint8_t *in, size_t in_len, size_t room);
int sk_modify_srq(struct ctx *c, const uint8_t *in, size_t in_len);
int sk_query_srq(struct ctx *c, const uint8_t *in, size_t in_len, size_t room);
int sk_destroy_srq(struct ctx *c, const uint8_t *in, size_t in_len, size_t room);
int sk_create_ah(struct ctx *c, const struct mlx5sk_dev *d, const uint8_t *in, size_t in_len, size_t room);
int sk_destroy_ah(struct ctx *c, const uint8_t *in, size_t in_len);

/* events.c */
void sk_drop_unread_events(int user_fd, int peer, size_t size, uint64_t handle, uint32_t types,
			   uint32_t *reported);

#endif
