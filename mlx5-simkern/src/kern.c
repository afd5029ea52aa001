/*
 * The emulated uverbs kernel's command side: the write() ABI of
 * kernel-headers/rdma/ib_user_verbs.h with mlx5_ib's udata
 * (rdma/mlx5-abi.h), answered as drivers/infiniband/core/uverbs_cmd.c and
 * drivers/infiniband/hw/mlx5 answer it. Written in C against the installed
 * kernel headers so that every layout is the kernel's own; the Rust side
 * (lib.rs) owns the hooks and the simulator and tells this file what each
 * device is (mlx5sk_dev_info).
 *
 * Encoding (rdma-core libibverbs/cmd_fallback.c): a legacy command is
 *   struct ib_uverbs_cmd_hdr { command; in_words; out_words }   (4-byte words,
 *   in_words counting the header), then the core request, whose first u64 is
 *   the response pointer, then the driver's request (udata in); the
 *   response is the core response then the driver's (udata out), out_words
 *   in all. An extended command has bit 31 set, then
 *   struct ib_uverbs_ex_cmd_hdr { response; provider_in_words;
 *   provider_out_words } and 8-byte words: in_words/out_words the core
 *   sizes, provider_* the udata. A successful write returns its length;
 *   a failed one -1 with the kernel's errno.
 */
#define _GNU_SOURCE /* process_vm_writev, memfd_create */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/mlx5-abi.h>

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
enum { OBJ_FREE, OBJ_PD, OBJ_MR, OBJ_CQ, OBJ_QP, OBJ_CHANNEL, OBJ_SRQ, OBJ_AH };
struct uobj {
	uint8_t type;
	uint32_t num;        /* pdn, key, cqn, qpn; the channel's fd */
	uint32_t users;      /* objects that name this one (a PD's MRs and QPs, a CQ's QPs) */
	uint32_t pd, scq, rcq, srq; /* handles this object names (srq: UINT32_MAX for none) */
	uint32_t max_wr, max_sge; /* SRQ: what QUERY_SRQ reports */
	int peer;            /* channel: our end */
	uint32_t sim_chan;   /* channel: the simulator's */
	uint64_t user_handle; /* CQ, QP, SRQ: the library's pointer, named by events */
	uint32_t comp_events, async_events; /* events delivered (DESTROY_* reports them) */
	uint32_t qp_kind;    /* QP: IB_QPT_RC, IB_QPT_UD, or 0x100 DCI / 0x101 DCT */
	struct ib_uverbs_query_qp_resp *qattr; /* QP: what QUERY_QP reports */
};

/* UAR pages of a context: total_num_bfregs / 2 (mlx5_ib's limit, 512 bfregs). */
#define MAX_UAR_PAGES 256

/* Per command fd: the device and the context GET_CONTEXT made. */
struct ctx {
	int fd;        /* the command fd, -1 when the slot is free */
	int dev;
	int has_ucontext;
	int async_peer; /* our end of the async event socketpair */
	int async_fd;   /* the program's end */
	struct uobj *objs;
	uint32_t nobjs;
	/* The simulator's context, and the UAR pages: a memfd of npages pages
	 * that the program maps through the command fd (mlx5sk_mmap_target)
	 * and that the simulator watches through this process's own mapping
	 * (`uars`), so the program's doorbells and BlueFlame writes reach it. */
	uint32_t sim_ctx;
	int memfd;
	uint8_t *uars;
	uint32_t npages, first_reg[MAX_UAR_PAGES];
	uint32_t medium_lo, medium_hi, next_bfreg; /* compact bfreg indices handed to QPs, in turn */
};

/* Objects a context may hold (the kernel's limit is memory). */
#define MAX_OBJS (1u << 16)

static void uars_close(struct ctx *c);

#define MAX_CTX 256
static struct ctx ctxs[MAX_CTX];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int ctxs_ready;

static struct ctx *find(int fd, int dev, int create)
{
	if (!ctxs_ready) {
		for (int i = 0; i < MAX_CTX; i++)
			ctxs[i].fd = -1;
		ctxs_ready = 1;
	}
	for (int i = 0; i < MAX_CTX; i++)
		if (ctxs[i].fd == fd)
			return &ctxs[i];
	if (!create)
		return NULL;
	for (int i = 0; i < MAX_CTX; i++)
		if (ctxs[i].fd == -1) {
			memset(&ctxs[i], 0, sizeof(ctxs[i]));
			ctxs[i].fd = fd;
			ctxs[i].dev = dev;
			ctxs[i].async_peer = -1;
			ctxs[i].async_fd = -1;
			ctxs[i].memfd = -1;
			return &ctxs[i];
		}
	return NULL;
}

/* MLX5_SIMKERN_TRACE=1: every command and its answer on stderr. */
static int trace(void)
{
	static int t = -1;
	if (t < 0) {
		const char *e = getenv("MLX5_SIMKERN_TRACE");
		t = e && *e && strcmp(e, "0");
	}
	return t;
}

/* ibv_mtu of a byte count. */
static uint8_t mtu_enum(uint32_t bytes)
{
	switch (bytes) {
	case 256: return 1;
	case 512: return 2;
	case 1024: return 3;
	case 2048: return 4;
	default: return 5;
	}
}

/* Copy `len` bytes of `src` to the user's response, at most `room`, as
 * copy_to_user does: a pointer that is not writable memory is EFAULT, never
 * a fault of this process (process_vm_writev checks the range). */
static int put(uint64_t dst, const void *src, size_t len, size_t room)
{
	size_t n = len < room ? len : room;
	if (!n)
		return 0;
	struct iovec local = { (void *)src, n }, remote = { (void *)(uintptr_t)dst, n };
	if (process_vm_writev(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)n)
		return -EFAULT;
	return 0;
}

static void fill_query_device(const struct mlx5sk_dev *d, struct ib_uverbs_query_device_resp *r)
{
	memset(r, 0, sizeof(*r));
	r->fw_ver = d->fw_ver;
	r->node_guid = __builtin_bswap64(d->node_guid);
	r->sys_image_guid = __builtin_bswap64(d->node_guid);
	r->max_mr_size = ~0ULL;
	r->page_size_cap = 0xfffffffffffff000ULL;
	r->vendor_id = 0x02c9;
	r->vendor_part_id = d->part_id;
	r->hw_ver = 0;
	r->max_qp = 1 << 18;
	r->max_qp_wr = d->max_qp_wr;
	/* RESIZE_MAX_WR | BAD_PKEY_CNTR | BAD_QKEY_CNTR | CHANGE_PHY_PORT | PORT_ACTIVE_EVENT | SYS_IMAGE_GUID | RC_RNR_NAK_GEN | SRQ_RESIZE */
	r->device_cap_flags = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 4) | (1 << 10) | (1 << 11) | (1 << 12) | (1 << 13);
	r->max_sge = d->max_sge;
	r->max_sge_rd = d->max_sge;
	r->max_cq = 1 << 24;
	r->max_cqe = d->max_cqe;
	r->max_mr = 1 << 24;
	r->max_pd = 1 << 24;
	r->max_qp_rd_atom = d->max_rd_atomic;
	r->max_res_rd_atom = d->max_rd_atomic << 18;
	r->max_qp_init_rd_atom = d->max_rd_atomic;
	r->atomic_cap = 1; /* IBV_ATOMIC_HCA */
	r->max_srq = 1 << 23;
	r->max_srq_wr = d->max_qp_wr - 1;
	r->max_srq_sge = d->max_sge + 1;
	r->max_pkeys = 128;
	r->local_ca_ack_delay = 16;
	r->phys_port_cnt = 1;
	r->max_ah = 0x7fffffff;
}

/* The context's UAR pages: a memfd of `n` pages, mapped here for the
 * simulator, each page attached to the simulator's context. */
static int uars_open(struct ctx *c, uint32_t n)
{
	if (!n || n > MAX_UAR_PAGES)
		return -ENOMEM;
	uint32_t id;
	int r = mlx5sk_open_context(c->dev, &id);
	if (r)
		return r;
	int fd = memfd_create("mlx5_simkern-uar", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)n * 4096)) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		mlx5sk_close_context(c->dev, id);
		return r;
	}
	void *p = mmap(NULL, (size_t)n * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		r = -errno;
		close(fd);
		mlx5sk_close_context(c->dev, id);
		return r;
	}
	c->sim_ctx = id;
	c->memfd = fd;
	c->uars = p;
	c->npages = n;
	for (uint32_t i = 0; i < n; i++) {
		r = mlx5sk_attach_uar(c->dev, id, c->uars + (size_t)i * 4096, &c->first_reg[i]);
		if (r) {
			uars_close(c);
			return r;
		}
	}
	return 0;
}

/* After every QP of the context is destroyed. */
static void uars_close(struct ctx *c)
{
	if (c->memfd < 0)
		return;
	mlx5sk_close_context(c->dev, c->sim_ctx);
	munmap(c->uars, (size_t)c->npages * 4096);
	close(c->memfd);
	c->memfd = -1;
	c->uars = NULL;
	c->npages = 0;
}

static int get_context(struct ctx *c, const struct mlx5sk_dev *d, const uint8_t *in, size_t in_len,
		       size_t out_room)
{
	const struct ib_uverbs_get_context *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	if (c->has_ucontext)
		return -EINVAL;
	const uint8_t *udata = in + sizeof(*cmd);
	size_t udata_len = in_len - sizeof(*cmd);
	struct mlx5_ib_alloc_ucontext_req_v2 req = {0};
	memcpy(&req, udata, udata_len < sizeof(req) ? udata_len : sizeof(req));
	/* mlx5_ib refuses a request it does not understand, and DEVX on a
	 * device without it (mlx5_ib_devx_create: no log_max_uctx). */
	if (udata_len < offsetof(struct mlx5_ib_alloc_ucontext_req_v2, comp_mask))
		return -EINVAL;
	if (req.flags & MLX5_IB_ALLOC_UCTX_DEVX)
		return -EINVAL;
	if (req.total_num_bfregs > 512)
		return -ENOMEM;
	uint32_t tot = req.total_num_bfregs ? (req.total_num_bfregs + 1) & ~1u : 16;
	if (req.num_low_latency_bfregs > tot - 1)
		return -EINVAL; /* mlx5_ib: at least one medium bfreg besides bfreg 0 */
	int err = uars_open(c, tot / 2);
	if (err)
		return err;
	c->medium_lo = 1;
	c->medium_hi = tot - req.num_low_latency_bfregs; /* [1, hi): the shared, locked bfregs */
	c->next_bfreg = 0;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		err = -errno;
		uars_close(c);
		return err;
	}
	struct {
		struct ib_uverbs_get_context_resp core;
		struct mlx5_ib_alloc_ucontext_resp drv;
	} r;
	memset(&r, 0, sizeof(r));
	r.core.async_fd = sv[0];
	r.core.num_comp_vectors = 1;
	r.drv.qp_tab_size = 1 << 18;
	r.drv.bf_reg_size = 2 * d->bf_size;
	/* As many as asked for, rounded up to whole UARs (2 each). */
	r.drv.tot_bfregs = tot;
	r.drv.cache_line_size = 64;
	r.drv.max_sq_desc_sz = d->max_wqe_sz_sq > 1008 ? 1008 : d->max_wqe_sz_sq;
	r.drv.max_rq_desc_sz = 512;
	r.drv.max_send_wqebb = d->max_qp_wr;
	r.drv.max_recv_wr = d->max_qp_wr;
	r.drv.max_srq_recv_wr = d->max_qp_wr - 1;
	r.drv.num_ports = 1;
	r.drv.response_length = sizeof(r.drv);
	r.drv.cqe_version = req.max_cqe_version >= 1 ? 1 : 0;
	r.drv.cmds_supp_uhw = MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE | MLX5_USER_CMDS_SUPP_UHW_CREATE_AH;
	r.drv.eth_min_inline = d->roce ? MLX5_USER_INLINE_MODE_NONE + 1 : 0;
	r.drv.log_uar_size = 12;
	r.drv.num_uars_per_page = 1;
	if (put(cmd->response, &r, sizeof(r), out_room)) {
		close(sv[0]);
		close(sv[1]);
		uars_close(c);
		return -EFAULT;
	}
	c->has_ucontext = 1;
	c->async_peer = sv[1];
	c->async_fd = sv[0];
	mlx5sk_start_events();
	return 0;
}

static int query_port(const struct mlx5sk_dev *d, const uint8_t *in, size_t in_len, size_t out_room)
{
	const struct ib_uverbs_query_port *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	if (cmd->port_num != 1)
		return -EINVAL;
	struct ib_uverbs_query_port_resp r;
	memset(&r, 0, sizeof(r));
	/* IB: IS_SM?no. CM_SUP | DEVICE_MGMT_SUP | VENDOR_CLASS_SUP | ... as a ConnectX-5 port reports */
	r.port_cap_flags = d->roce ? 0x04010000 : 0x2651e848;
	r.max_msg_sz = 1u << 30;
	r.gid_tbl_len = 16;  /* mlx5_simrun's GID_TABLE */
	r.pkey_tbl_len = 16; /* and PKEY_TABLE: the sysfs tree has that many */
	r.lid = d->roce ? 0 : (uint16_t)d->lid;
	r.sm_lid = d->roce ? 0 : 1;
	r.state = 4;       /* IBV_PORT_ACTIVE */
	r.max_mtu = 5;     /* 4096 */
	r.active_mtu = mtu_enum(d->active_mtu);
	r.max_vl_num = 4;
	r.subnet_timeout = d->roce ? 0 : 18;
	r.active_width = 2;  /* 4X */
	r.active_speed = 32; /* EDR */
	r.phys_state = 5;    /* LinkUp */
	r.link_layer = d->roce ? 2 : 1; /* IBV_LINK_LAYER_ETHERNET : _INFINIBAND */
	return put(cmd->response, &r, sizeof(r), out_room);
}

/* A new object of `type`: its handle, or -ENOMEM. */
static int obj_new(struct ctx *c, uint8_t type)
{
	for (uint32_t i = 0; i < c->nobjs; i++)
		if (c->objs[i].type == OBJ_FREE) {
			memset(&c->objs[i], 0, sizeof(c->objs[i]));
			c->objs[i].type = type;
			c->objs[i].peer = -1;
			return (int)i;
		}
	if (c->nobjs >= MAX_OBJS)
		return -ENOMEM;
	uint32_t n = c->nobjs ? c->nobjs * 2 : 16;
	struct uobj *o = realloc(c->objs, n * sizeof(*o));
	if (!o)
		return -ENOMEM;
	memset(o + c->nobjs, 0, (n - c->nobjs) * sizeof(*o));
	c->objs = o;
	uint32_t h = c->nobjs;
	c->nobjs = n;
	c->objs[h].type = type;
	c->objs[h].peer = -1;
	return (int)h;
}

/* The live object of `type` that `handle` names in this context, or NULL. */
static struct uobj *obj_get(struct ctx *c, uint32_t handle, uint8_t type)
{
	if (handle >= c->nobjs || c->objs[handle].type != type)
		return NULL;
	return &c->objs[handle];
}

/* What the kernel's destroy returns for a handle that is not one: ENOENT
 * when nothing lives there, EINVAL when an object of another type does
 * (rdma_lookup_get_uobject). */
static int obj_lookup_err(struct ctx *c, uint32_t handle)
{
	return handle < c->nobjs && c->objs[handle].type != OBJ_FREE ? -EINVAL : -ENOENT;
}

/* Whether [addr, addr + len) is mapped in this process (the kernel pins an
 * MR's pages and a ring's, and fails with EFAULT where there are none). */
static int mapped(uint64_t addr, uint64_t len)
{
	if (!len || addr + len < addr)
		return 0;
	uint64_t page = 4096, start = addr & ~(page - 1), end = (addr + len + page - 1) & ~(page - 1);
	unsigned char vec[256];
	for (uint64_t at = start; at < end;) {
		uint64_t n = (end - at) / page;
		if (n > sizeof(vec))
			n = sizeof(vec);
		if (mincore((void *)(uintptr_t)at, n * page, vec))
			return 0;
		at += n * page;
	}
	return 1;
}

/*
 * An object is destroyed: the events of it that the program has not read
 * yet leave the queue, and are no longer counted as reported, as the
 * kernel's ib_uverbs_release_ucq / ib_uverbs_release_uevent drop them.
 * libibverbs waits at destroy until it has acknowledged as many events as
 * the response reports. `user_fd` is the program's end of the event
 * socketpair (messages of `size` bytes whose first 8 are the object's
 * handle; with `types`, a bit mask of the async event types that name
 * such an object), `peer` ours.
 */
static void drop_unread_events(int user_fd, int peer, size_t size, uint64_t handle, uint32_t types,
			       uint32_t *reported)
{
	enum { KEEP = 1024 };
	uint8_t msg[16];
	uint8_t(*kept)[16] = malloc(KEEP * 16);
	size_t n = 0;
	if (!kept || user_fd < 0 || peer < 0) {
		free(kept);
		return;
	}
	while (recv(user_fd, msg, size, MSG_DONTWAIT) == (ssize_t)size) {
		uint64_t h;
		uint32_t type = 0;
		memcpy(&h, msg, 8);
		if (size >= 12)
			memcpy(&type, msg + 8, 4);
		if (h == handle && (!types || (type < 32 && (types >> type) & 1))) {
			if (*reported)
				(*reported)--;
		} else if (n < KEEP) {
			memcpy(kept[n++], msg, size);
		}
	}
	for (size_t i = 0; i < n; i++)
		send(peer, kept[i], size, MSG_NOSIGNAL | MSG_DONTWAIT);
	free(kept);
}

/* IBV_EVENT_* that name a CQ, a QP, an SRQ. */
#define CQ_EVENTS (1u << 0)
#define QP_EVENTS ((1u << 1) | (1u << 2) | (1u << 3) | (1u << 4) | (1u << 5) | (1u << 6) | (1u << 7) | (1u << 16))
#define SRQ_EVENTS ((1u << 14) | (1u << 15))

/* Tears one object down in the simulator and frees its slot. */
static void obj_destroy(struct ctx *c, uint32_t h)
{
	struct uobj *o = &c->objs[h];
	switch (o->type) {
	case OBJ_PD:
		mlx5sk_dealloc_pd(c->dev, o->num);
		break;
	case OBJ_MR:
		mlx5sk_dereg_mr(c->dev, o->num);
		c->objs[o->pd].users--;
		break;
	case OBJ_CQ:
		mlx5sk_destroy_cq(c->dev, o->num);
		break;
	case OBJ_QP:
		mlx5sk_destroy_qp(c->dev, o->num);
		c->objs[o->pd].users--;
		c->objs[o->scq].users--;
		c->objs[o->rcq].users--;
		if (o->srq != UINT32_MAX)
			c->objs[o->srq].users--;
		free(o->qattr);
		break;
	case OBJ_SRQ:
		mlx5sk_destroy_srq(c->dev, o->num);
		c->objs[o->pd].users--;
		break;
	case OBJ_AH:
		c->objs[o->pd].users--;
		break;
	case OBJ_CHANNEL:
		mlx5sk_destroy_channel(c->dev, o->sim_chan);
		if (o->peer >= 0)
			close(o->peer);
		break;
	}
	memset(o, 0, sizeof(*o));
}

/* The kernel's legacy response: the core response then the driver's, in
 * out_room bytes; what does not fit is left out. */
static int put2(uint64_t dst, const void *core, size_t core_len, const void *drv, size_t drv_len, size_t room)
{
	int r = put(dst, core, core_len, room);
	if (r || room <= core_len)
		return r;
	return put(dst + core_len, drv, drv_len, room - core_len);
}

static int alloc_pd(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_alloc_pd *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	int h = obj_new(c, OBJ_PD);
	if (h < 0)
		return h;
	uint32_t pdn;
	int r = mlx5sk_alloc_pd(c->dev, &pdn);
	if (r) {
		c->objs[h].type = OBJ_FREE;
		return r;
	}
	c->objs[h].num = pdn;
	struct ib_uverbs_alloc_pd_resp core = { .pd_handle = (uint32_t)h };
	struct mlx5_ib_alloc_pd_resp drv = { .pdn = pdn };
	r = put2(cmd->response, &core, sizeof(core), &drv, sizeof(drv), room);
	if (r)
		obj_destroy(c, (uint32_t)h);
	return r;
}

static int dealloc_pd(struct ctx *c, const uint8_t *in, size_t in_len)
{
	const struct ib_uverbs_dealloc_pd *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *o = obj_get(c, cmd->pd_handle, OBJ_PD);
	if (!o)
		return obj_lookup_err(c, cmd->pd_handle);
	if (o->users)
		return -EBUSY;
	obj_destroy(c, cmd->pd_handle);
	return 0;
}

static int reg_mr(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_reg_mr *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	/* ib_check_mr_access, then what this emulation does not model: memory
	 * windows, zero-based and on-demand MRs, an IOVA other than the address. */
	uint32_t access = cmd->access_flags & ~IB_UVERBS_ACCESS_OPTIONAL_RANGE;
	if (access & ~0xffu)
		return -EINVAL;
	if ((access & (IB_UVERBS_ACCESS_REMOTE_WRITE | IB_UVERBS_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IB_UVERBS_ACCESS_LOCAL_WRITE))
		return -EINVAL;
	if (access & ~0xfu)
		return -EOPNOTSUPP;
	if ((cmd->start & 0xfff) != (cmd->hca_va & 0xfff))
		return -EINVAL;
	if (cmd->hca_va != cmd->start)
		return -EOPNOTSUPP;
	struct uobj *pd = obj_get(c, cmd->pd_handle, OBJ_PD);
	if (!pd)
		return -EINVAL;
	if (!mapped(cmd->start, cmd->length))
		return -EFAULT;
	int h = obj_new(c, OBJ_MR);
	if (h < 0)
		return h;
	pd = &c->objs[cmd->pd_handle]; /* the table may have moved */
	uint32_t key;
	int r = mlx5sk_reg_mr(c->dev, pd->num, cmd->start, cmd->length, access, &key);
	if (r) {
		c->objs[h].type = OBJ_FREE;
		return r;
	}
	c->objs[h].num = key;
	c->objs[h].pd = cmd->pd_handle;
	pd->users++;
	struct ib_uverbs_reg_mr_resp resp = { .mr_handle = (uint32_t)h, .lkey = key, .rkey = key };
	r = put(cmd->response, &resp, sizeof(resp), room);
	if (r)
		obj_destroy(c, (uint32_t)h);
	return r;
}

static int dereg_mr(struct ctx *c, const uint8_t *in, size_t in_len)
{
	const struct ib_uverbs_dereg_mr *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	if (!obj_get(c, cmd->mr_handle, OBJ_MR))
		return obj_lookup_err(c, cmd->mr_handle);
	obj_destroy(c, cmd->mr_handle);
	return 0;
}

static int create_comp_channel(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_create_comp_channel *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	int h = obj_new(c, OBJ_CHANNEL);
	if (h < 0)
		return h;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		c->objs[h].type = OBJ_FREE;
		return -errno;
	}
	uint32_t sim_chan;
	int e = mlx5sk_create_channel(c->dev, &sim_chan);
	if (e) {
		close(sv[0]);
		close(sv[1]);
		c->objs[h].type = OBJ_FREE;
		return e;
	}
	c->objs[h].num = (uint32_t)sv[0];
	c->objs[h].peer = sv[1];
	c->objs[h].sim_chan = sim_chan;
	struct ib_uverbs_create_comp_channel_resp resp = { .fd = (uint32_t)sv[0] };
	int r = put(cmd->response, &resp, sizeof(resp), room);
	if (r) {
		close(sv[0]);
		obj_destroy(c, (uint32_t)h);
	}
	return r;
}

/* CREATE_CQ and EX_CREATE_CQ after their core requests are read: `udata`
 * is mlx5_ib_create_cq. The handle, or -errno; `*cqe` the entries - 1. */
static int create_cq(struct ctx *c, uint64_t user_handle, uint32_t entries, uint32_t comp_vector, int32_t channel,
		     const uint8_t *udata, size_t udata_len, uint32_t *cqe, uint32_t *cqn)
{
	/* ib_uverbs_create_cq: a completion vector the device has (one here). */
	if (comp_vector >= 1)
		return -EINVAL;
	struct mlx5sk_dev d;
	if (mlx5sk_dev_info(c->dev, &d))
		return -ENODEV;
	struct mlx5_ib_create_cq u = {0};
	if (udata_len < offsetof(struct mlx5_ib_create_cq, flags))
		return -EFAULT; /* ib_copy_from_udata of too little */
	memcpy(&u, udata, udata_len < sizeof(u) ? udata_len : sizeof(u));
	if (u.cqe_size != 64 && u.cqe_size != 128)
		return -EINVAL;
	if (u.flags || u.reserved0 || u.reserved1)
		return -EINVAL;
	uint32_t comp = 0;
	if (u.cqe_comp_en) {
		if (u.cqe_comp_en != 1)
			return -EINVAL;
		if (u.cqe_size == 128)
			return -EOPNOTSUPP;
		if (u.cqe_comp_res_format == MLX5_IB_CQE_RES_FORMAT_HASH)
			comp = 1;
		else if (u.cqe_comp_res_format == MLX5_IB_CQE_RES_FORMAT_CSUM)
			comp = 2;
		else
			return -EOPNOTSUPP;
	}
	/* mlx5_ib_create_cq: at least one entry, at most the device's max_cqe. */
	if (entries < 1 || entries > d.max_cqe || entries > (1u << 22) - 1)
		return -EINVAL;
	/* mlx5_ib_create_cq: roundup_pow_of_two(entries + 1). */
	uint32_t n = 1;
	while (n < entries + 1)
		n <<= 1;
	/* comp_channel is the channel's file descriptor (ib_uverbs_lookup_comp_file). */
	uint32_t chan = UINT32_MAX;
	if (channel >= 0) {
		for (uint32_t i = 0; i < c->nobjs; i++)
			if (c->objs[i].type == OBJ_CHANNEL && c->objs[i].num == (uint32_t)channel)
				chan = i;
		if (chan == UINT32_MAX)
			return -EINVAL;
	}
	if ((u.buf_addr & 63) || (u.db_addr & 7) || !mapped(u.buf_addr, (uint64_t)n * u.cqe_size) ||
	    !mapped(u.db_addr, 8))
		return -EFAULT;
	int h = obj_new(c, OBJ_CQ);
	if (h < 0)
		return h;
	int r = mlx5sk_create_cq(c->dev, n, u.cqe_size, u.buf_addr, u.db_addr, comp,
				 chan == UINT32_MAX ? UINT32_MAX : c->objs[chan].sim_chan, cqn);
	if (r) {
		c->objs[h].type = OBJ_FREE;
		return r;
	}
	c->objs[h].num = *cqn;
	c->objs[h].pd = chan;
	c->objs[h].user_handle = user_handle;
	*cqe = n - 1;
	return h;
}

static int destroy_cq(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_destroy_cq *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *o = obj_get(c, cmd->cq_handle, OBJ_CQ);
	if (!o)
		return obj_lookup_err(c, cmd->cq_handle);
	if (o->users)
		return -EBUSY;
	if (o->pd != UINT32_MAX)
		drop_unread_events((int)c->objs[o->pd].num, c->objs[o->pd].peer, sizeof(struct ib_uverbs_comp_event_desc),
				   o->user_handle, 0, &o->comp_events);
	drop_unread_events(c->async_fd, c->async_peer, sizeof(struct ib_uverbs_async_event_desc), o->user_handle,
			   CQ_EVENTS, &o->async_events);
	struct ib_uverbs_destroy_cq_resp resp = { .comp_events_reported = o->comp_events,
						  .async_events_reported = o->async_events };
	int r = put(cmd->response, &resp, sizeof(resp), room);
	if (r)
		return r;
	obj_destroy(c, cmd->cq_handle);
	return 0;
}

/* The parts of CREATE_QP and EX_CREATE_QP that are the same. */
struct qp_req {
	uint64_t user_handle;
	uint32_t pd_handle, send_cq_handle, recv_cq_handle, srq_handle;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;
	uint8_t sq_sig_all, qp_type, is_srq;
};

static int create_qp(struct ctx *c, const struct qp_req *q, const uint8_t *udata, size_t udata_len,
		     struct ib_uverbs_create_qp_resp *resp, struct mlx5_ib_create_qp_resp *drv)
{
	struct mlx5_ib_create_qp u = {0};
	if (udata_len < offsetof(struct mlx5_ib_create_qp, sq_buf_addr))
		return -EFAULT;
	memcpy(&u, udata, udata_len < sizeof(u) ? udata_len : sizeof(u));
	/* MLX5_QP_FLAG_BFREG_INDEX names a dynamically allocated UAR (thread
	 * domains), which only the ioctl ABI allocates: not here. */
	uint32_t known = MLX5_QP_FLAG_SCATTER_CQE | MLX5_QP_FLAG_ALLOW_SCATTER_CQE | MLX5_QP_FLAG_TYPE_DCI |
			 MLX5_QP_FLAG_TYPE_DCT;
	if (u.flags & ~known)
		return -EOPNOTSUPP;
	uint32_t kind = q->qp_type;
	if (q->qp_type == 0xff) { /* IB_QPT_DRIVER: mlx5_ib's type comes from the flags */
		uint32_t dc = u.flags & (MLX5_QP_FLAG_TYPE_DCI | MLX5_QP_FLAG_TYPE_DCT);
		if (dc == MLX5_QP_FLAG_TYPE_DCI)
			kind = 0x100;
		else if (dc == MLX5_QP_FLAG_TYPE_DCT)
			kind = 0x101;
		else
			return -EINVAL;
	} else if (u.flags & (MLX5_QP_FLAG_TYPE_DCI | MLX5_QP_FLAG_TYPE_DCT)) {
		return -EINVAL;
	}
	if (kind != IB_UVERBS_QPT_RC && kind != IB_UVERBS_QPT_UD && kind != 0x100 && kind != 0x101)
		return -EOPNOTSUPP; /* not modelled: XRC, raw packet, UC */
	int dct = kind == 0x101;
	struct uobj *srq = NULL;
	if (q->is_srq) {
		srq = obj_get(c, q->srq_handle, OBJ_SRQ);
		if (!srq || u.rq_wqe_count)
			return -EINVAL;
	}
	struct uobj *pd = obj_get(c, q->pd_handle, OBJ_PD);
	struct uobj *scq = obj_get(c, q->send_cq_handle, OBJ_CQ);
	struct uobj *rcq = obj_get(c, q->recv_cq_handle, OBJ_CQ);
	if (!pd || !scq || !rcq)
		return -EINVAL;
	uint32_t sq = u.sq_wqe_count, rq = u.rq_wqe_count;
	if (dct) {
		if (!srq)
			return -EINVAL; /* a DCT receives into an SRQ */
		sq = rq = 0;
	} else {
		if ((sq & (sq - 1)) || !sq || sq > 32768 || (rq & (rq - 1)) || rq > 32768 ||
		    (rq && (u.rq_wqe_shift < 4 || u.rq_wqe_shift > 10)))
			return -EINVAL;
		uint64_t rq_bytes = rq ? (uint64_t)rq << u.rq_wqe_shift : 0;
		if (rq_bytes && rq_bytes < 64)
			rq_bytes = 64;
		uint64_t len = rq_bytes + (uint64_t)sq * 64;
		if ((u.buf_addr & 63) || (u.db_addr & 7) || !mapped(u.buf_addr, len) || !mapped(u.db_addr, 8))
			return -EFAULT;
	}
	int h = obj_new(c, OBJ_QP);
	if (h < 0)
		return h;
	struct ib_uverbs_query_qp_resp *qa = calloc(1, sizeof(*qa));
	if (!qa) {
		c->objs[h].type = OBJ_FREE;
		return -ENOMEM;
	}
	pd = &c->objs[q->pd_handle];
	scq = &c->objs[q->send_cq_handle];
	rcq = &c->objs[q->recv_cq_handle];
	/* The register: a medium-latency bfreg in turn (mlx5_ib's alloc_bfreg
	 * hands those out, shared and locked, when no low-latency one is asked
	 * for), its index in the library's numbering (4 per UAR page, of which
	 * the first 2 are not fast-path: adjust_bfregn). */
	uint32_t span = c->medium_hi - c->medium_lo;
	uint32_t compact = span ? c->medium_lo + c->next_bfreg++ % span : 0;
	uint32_t bfreg = compact / 2 * 4 + compact % 2;
	uint32_t reg = c->first_reg[compact / 2] + compact % 2;
	struct mlx5sk_qp_init init = {
		.context = c->sim_ctx,
		.reg = dct ? UINT32_MAX : reg,
		.dc_key = dct ? u.access_key : 0,
		.qp_type = kind,
		.pdn = pd->num,
		.send_cqn = scq->num,
		.recv_cqn = rcq->num,
		/* A DCI only sends: an SRQ named with it is held, never used. */
		.srqn = srq && kind != 0x100 ? c->objs[q->srq_handle].num : UINT32_MAX,
		.sq_wqe_cnt = sq,
		.rq_wqe_cnt = rq,
		.rq_stride = rq ? 1u << u.rq_wqe_shift : 0,
		.user_index = u.uidx & 0xffffff,
		.scatter_to_cqe = !!(u.flags & MLX5_QP_FLAG_SCATTER_CQE),
		.buf = u.buf_addr,
		.db = u.db_addr,
	};
	uint32_t qpn;
	int r = mlx5sk_create_qp(c->dev, &init, &qpn);
	if (r) {
		free(qa);
		c->objs[h].type = OBJ_FREE;
		return r;
	}
	struct uobj *o = &c->objs[h];
	o->num = qpn;
	o->pd = q->pd_handle;
	o->scq = q->send_cq_handle;
	o->rcq = q->recv_cq_handle;
	o->srq = q->is_srq ? q->srq_handle : UINT32_MAX;
	o->user_handle = q->user_handle;
	o->qp_kind = kind;
	o->qattr = qa;
	if (q->is_srq)
		c->objs[q->srq_handle].users++;
	pd->users++;
	scq->users++;
	rcq->users++;
	/* mlx5_ib reports the receive queue it made (set_rq_size: the count
	 * and scatter entries of the ring the library sized), not the request. */
	uint32_t rq_sge = rq ? (1u << u.rq_wqe_shift) / 16 : 0;
	qa->max_send_wr = q->max_send_wr;
	qa->max_recv_wr = rq;
	qa->max_send_sge = q->max_send_sge;
	qa->max_recv_sge = rq_sge;
	qa->max_inline_data = q->max_inline_data;
	qa->sq_sig_all = q->sq_sig_all;
	qa->port_num = 1;
	memset(resp, 0, sizeof(*resp));
	resp->qp_handle = (uint32_t)h;
	resp->qpn = qpn;
	resp->max_send_wr = q->max_send_wr;
	resp->max_recv_wr = rq;
	resp->max_send_sge = q->max_send_sge;
	resp->max_recv_sge = rq_sge;
	resp->max_inline_data = q->max_inline_data;
	memset(drv, 0, sizeof(*drv));
	drv->bfreg_index = dct ? 0 : bfreg;
	return h;
}

static int modify_qp(struct ctx *c, const struct ib_uverbs_modify_qp *cmd)
{
	struct uobj *o = obj_get(c, cmd->qp_handle, OBJ_QP);
	if (!o)
		return -EINVAL;
	uint32_t mask = cmd->attr_mask;
	/* IB_QP_ATTR_STANDARD_BITS: nothing above IB_QP_RATE_LIMIT (bit 25). */
	if (mask & ~((1u << 26) - 1))
		return -EOPNOTSUPP;
	if ((mask & (1u << 5)) && cmd->port_num != 1)
		return -EINVAL;
	if ((mask & (1u << 7)) && cmd->dest.port_num > 1)
		return -EINVAL;
	struct mlx5sk_qp_mod m = {
		.mask = mask,
		.state = cmd->qp_state,
		.port = cmd->port_num,
		.access = cmd->qp_access_flags,
		.dest_qpn = (mask & (1u << 20)) ? cmd->dest_qp_num : o->qattr->dest_qp_num,
		.dlid = cmd->dest.dlid,
		.is_global = cmd->dest.is_global,
		.sl = cmd->dest.sl,
		.path_mtu = cmd->path_mtu,
		.min_rnr_timer = cmd->min_rnr_timer,
		.rnr_retry = cmd->rnr_retry,
		.retry_cnt = cmd->retry_cnt,
		.timeout = cmd->timeout,
		.sq_psn = cmd->sq_psn,
		.rq_psn = cmd->rq_psn,
		.max_rd_atomic = cmd->max_rd_atomic,
		.max_dest_rd_atomic = cmd->max_dest_rd_atomic,
		.qkey = cmd->qkey,
	};
	if (!(mask & (1u << 7))) {
		/* A DEST_QPN alone keeps the address the QP has. */
		struct ib_uverbs_qp_dest *d = &o->qattr->dest;
		m.dlid = d->dlid;
		m.is_global = d->is_global;
		m.sl = d->sl;
		memcpy(m.dgid, d->dgid, 16);
	} else {
		memcpy(m.dgid, cmd->dest.dgid, 16);
	}
	if (o->qp_kind >= 0x100)
		m.mask &= ~((1u << 7) | (1u << 20)); /* DC: the address is in each WQE's AV */
	int r = mlx5sk_modify_qp(c->dev, o->num, &m);
	if (r)
		return r;
	struct ib_uverbs_query_qp_resp *qa = o->qattr;
	if (mask & (1u << 0))
		qa->qp_state = cmd->qp_state;
	if (mask & (1u << 3))
		qa->qp_access_flags = cmd->qp_access_flags;
	if (mask & (1u << 4))
		qa->pkey_index = cmd->pkey_index;
	if (mask & (1u << 5))
		qa->port_num = cmd->port_num;
	if (mask & (1u << 6))
		qa->qkey = cmd->qkey;
	if (mask & (1u << 7))
		qa->dest = cmd->dest;
	if (mask & (1u << 8))
		qa->path_mtu = cmd->path_mtu;
	if (mask & (1u << 9))
		qa->timeout = cmd->timeout;
	if (mask & (1u << 10))
		qa->retry_cnt = cmd->retry_cnt;
	if (mask & (1u << 11))
		qa->rnr_retry = cmd->rnr_retry;
	if (mask & (1u << 13))
		qa->max_rd_atomic = cmd->max_rd_atomic;
	if (mask & (1u << 15))
		qa->min_rnr_timer = cmd->min_rnr_timer;
	if (mask & (1u << 17))
		qa->max_dest_rd_atomic = cmd->max_dest_rd_atomic;
	if (mask & (1u << 20))
		qa->dest_qp_num = cmd->dest_qp_num;
	return 0;
}

static int query_qp(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_query_qp *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *o = obj_get(c, cmd->qp_handle, OBJ_QP);
	if (!o)
		return -EINVAL;
	struct ib_uverbs_query_qp_resp r = *o->qattr;
	uint32_t state, sq_psn, rq_psn;
	int e = mlx5sk_query_qp(c->dev, o->num, &state, &sq_psn, &rq_psn);
	if (e)
		return e;
	r.qp_state = (uint8_t)state;
	r.cur_qp_state = (uint8_t)state;
	r.sq_psn = sq_psn;
	r.rq_psn = rq_psn;
	return put(cmd->response, &r, sizeof(r), room);
}

static int destroy_qp(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_destroy_qp *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *o = obj_get(c, cmd->qp_handle, OBJ_QP);
	if (!o)
		return obj_lookup_err(c, cmd->qp_handle);
	drop_unread_events(c->async_fd, c->async_peer, sizeof(struct ib_uverbs_async_event_desc), o->user_handle,
			   QP_EVENTS, &o->async_events);
	struct ib_uverbs_destroy_qp_resp resp = { .events_reported = o->async_events };
	int r = put(cmd->response, &resp, sizeof(resp), room);
	if (r)
		return r;
	obj_destroy(c, cmd->qp_handle);
	return 0;
}


static int create_srq(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_create_srq *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct mlx5_ib_create_srq u = {0};
	size_t ulen = in_len - sizeof(*cmd);
	if (ulen < offsetof(struct mlx5_ib_create_srq, uidx))
		return -EFAULT;
	memcpy(&u, in + sizeof(*cmd), ulen < sizeof(u) ? ulen : sizeof(u));
	if (u.flags || u.reserved0 || u.reserved1)
		return -EINVAL; /* MLX5_SRQ_FLAG_SIGNATURE: not modelled */
	struct uobj *pd = obj_get(c, cmd->pd_handle, OBJ_PD);
	if (!pd)
		return -EINVAL;
	/* mlx5_ib create_srq_user: max = roundup_pow_of_two(max_wr + 1), a
	 * descriptor of the next segment and max_sge data segments, rounded up
	 * to a power of two, at least 32 bytes. */
	/* The limit given at creation is not armed (mlx5_ib arms it through
	 * MODIFY_SRQ only): accepted and ignored. */
	if (cmd->max_wr > 32767 || cmd->max_sge > 63)
		return -EINVAL;
	uint32_t max = 1, desc = 32;
	while (max < cmd->max_wr + 1)
		max <<= 1;
	while (desc < 16 + cmd->max_sge * 16)
		desc <<= 1;
	if ((u.buf_addr & 63) || (u.db_addr & 3) || !mapped(u.buf_addr, (uint64_t)max * desc) || !mapped(u.db_addr, 4))
		return -EFAULT;
	int h = obj_new(c, OBJ_SRQ);
	if (h < 0)
		return h;
	pd = &c->objs[cmd->pd_handle];
	uint32_t srqn;
	int r = mlx5sk_create_srq(c->dev, pd->num, max, desc, u.uidx & 0xffffff, u.buf_addr, u.db_addr, &srqn);
	if (r) {
		c->objs[h].type = OBJ_FREE;
		return r;
	}
	struct uobj *o = &c->objs[h];
	o->num = srqn;
	o->pd = cmd->pd_handle;
	o->user_handle = cmd->user_handle;
	o->max_wr = max - 1;
	o->max_sge = (desc - 16) / 16;
	pd->users++;
	struct ib_uverbs_create_srq_resp core = { .srq_handle = (uint32_t)h, .max_wr = max - 1,
						  .max_sge = o->max_sge, .srqn = srqn };
	struct mlx5_ib_create_srq_resp drv = { .srqn = srqn };
	r = put2(cmd->response, &core, sizeof(core), &drv, sizeof(drv), room);
	if (r)
		obj_destroy(c, (uint32_t)h);
	return r;
}

static int modify_srq(struct ctx *c, const uint8_t *in, size_t in_len)
{
	const struct ib_uverbs_modify_srq *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *o = obj_get(c, cmd->srq_handle, OBJ_SRQ);
	if (!o)
		return -EINVAL;
	if (cmd->attr_mask & ~3u)
		return -EINVAL;
	if (cmd->attr_mask & 1u) /* IB_SRQ_MAX_WR: mlx5 SRQs do not resize */
		return -EINVAL;
	if (cmd->attr_mask & 2u) /* IB_SRQ_LIMIT: armed; below the SRQ's size */
		return mlx5sk_arm_srq_limit(c->dev, o->num, cmd->srq_limit);
	return 0;
}

static int query_srq(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_query_srq *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *o = obj_get(c, cmd->srq_handle, OBJ_SRQ);
	if (!o)
		return -EINVAL;
	struct ib_uverbs_query_srq_resp r = { .max_wr = o->max_wr, .max_sge = o->max_sge };
	int e = mlx5sk_srq_limit(c->dev, o->num, &r.srq_limit);
	if (e)
		return e;
	return put(cmd->response, &r, sizeof(r), room);
}

static int destroy_srq(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_destroy_srq *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *o = obj_get(c, cmd->srq_handle, OBJ_SRQ);
	if (!o)
		return obj_lookup_err(c, cmd->srq_handle);
	if (o->users)
		return -EBUSY;
	drop_unread_events(c->async_fd, c->async_peer, sizeof(struct ib_uverbs_async_event_desc), o->user_handle,
			   SRQ_EVENTS, &o->async_events);
	struct ib_uverbs_destroy_srq_resp resp = { .events_reported = o->async_events };
	int r = put(cmd->response, &resp, sizeof(resp), room);
	if (r)
		return r;
	obj_destroy(c, cmd->srq_handle);
	return 0;
}


/* CREATE_AH: an address handle of the PD. On RoCE the kernel resolves the
 * destination MAC of the GID (mlx5_ib_create_ah_resp.dmac, which libmlx5
 * puts in its address vector): here, the simulated port with that GID;
 * none is EHOSTUNREACH. A RoCE address needs its GRH (EINVAL). The address
 * vector itself is the library's: the device keeps nothing of it. */
static int create_ah(struct ctx *c, const struct mlx5sk_dev *d, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_create_ah *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *pd = obj_get(c, cmd->pd_handle, OBJ_PD);
	if (!pd)
		return -EINVAL;
	if (cmd->attr.port_num != 1)
		return -EINVAL;
	struct mlx5_ib_create_ah_resp drv;
	memset(&drv, 0, sizeof(drv));
	drv.response_length = sizeof(drv);
	if (d->roce) {
		if (!cmd->attr.is_global)
			return -EINVAL;
		int r = mlx5sk_resolve_mac(cmd->attr.grh.dgid, drv.dmac);
		if (r)
			return r;
	}
	int h = obj_new(c, OBJ_AH);
	if (h < 0)
		return h;
	c->objs[h].pd = cmd->pd_handle;
	c->objs[h].user_handle = cmd->user_handle;
	c->objs[cmd->pd_handle].users++;
	struct ib_uverbs_create_ah_resp core = { .ah_handle = (uint32_t)h };
	int r = put2(cmd->response, &core, sizeof(core), &drv, sizeof(drv), room);
	if (r)
		obj_destroy(c, (uint32_t)h);
	return r;
}

static int destroy_ah(struct ctx *c, const uint8_t *in, size_t in_len)
{
	const struct ib_uverbs_destroy_ah *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	if (!obj_get(c, cmd->ah_handle, OBJ_AH))
		return obj_lookup_err(c, cmd->ah_handle);
	obj_destroy(c, cmd->ah_handle);
	return 0;
}

/*
 * mmap of a command fd at `off` for `len` bytes: the memfd to map instead,
 * with the offset in `*moff`, or -errno as mlx5_ib_mmap answers. Offsets
 * are (command << 8 | index) pages (MLX5_IB_MMAP_CMD_SHIFT); the regular
 * and non-cached UAR commands map UAR page `index`.
 */
int mlx5sk_mmap_target(int fd, uint64_t off, size_t len, uint64_t *moff)
{
	pthread_mutex_lock(&lock);
	struct ctx *c = find(fd, 0, 0);
	int ret;
	uint64_t pg = off / 4096, cmd = pg >> 8, idx = pg & 0xff;
	if (!c || !c->has_ucontext || c->memfd < 0)
		ret = -EINVAL;
	else if (off % 4096 || len != 4096)
		ret = -EINVAL;
	else if (cmd != MLX5_IB_MMAP_REGULAR_PAGE && cmd != MLX5_IB_MMAP_NC_PAGE)
		ret = -EINVAL; /* WC allocation, core clock, clock info: not emulated */
	else if (idx >= c->npages)
		ret = -EINVAL;
	else {
		*moff = idx * 4096;
		ret = c->memfd;
	}
	pthread_mutex_unlock(&lock);
	return ret;
}

/*
 * One write() on a command fd of device `dev`: its length, or -errno.
 */
int mlx5sk_write(int fd, int dev, const void *buf, size_t len)
{
	struct ib_uverbs_cmd_hdr hdr;
	struct mlx5sk_dev d;
	if (len < sizeof(hdr))
		return -EINVAL;
	memcpy(&hdr, buf, sizeof(hdr));
	if (mlx5sk_dev_info(dev, &d))
		return -ENODEV;
	pthread_mutex_lock(&lock);
	struct ctx *c = find(fd, dev, 1);
	int ret;
	if (!c) {
		ret = -ENOMEM;
		goto out;
	}
	if (hdr.command & IB_USER_VERBS_CMD_FLAG_EXTENDED) {
		struct ib_uverbs_ex_cmd_hdr ex;
		if (len < sizeof(hdr) + sizeof(ex)) {
			ret = -EINVAL;
			goto out;
		}
		memcpy(&ex, (const uint8_t *)buf + sizeof(hdr), sizeof(ex));
		size_t in_core = (size_t)hdr.in_words * 8, in_drv = (size_t)ex.provider_in_words * 8;
		size_t out_core = (size_t)hdr.out_words * 8, out_drv = (size_t)ex.provider_out_words * 8;
		if (len != sizeof(hdr) + sizeof(ex) + in_core + in_drv) {
			ret = -EINVAL;
			goto out;
		}
		const uint8_t *in = (const uint8_t *)buf + sizeof(hdr) + sizeof(ex);
		uint32_t cmd = hdr.command & IB_USER_VERBS_CMD_COMMAND_MASK;
		if (!c->has_ucontext) {
			ret = -EINVAL;
			goto out;
		}
		const uint8_t *udata = in + in_core;
		switch (cmd) {
		case IB_USER_VERBS_EX_CMD_CREATE_CQ: {
			struct ib_uverbs_ex_create_cq q = {0};
			if (in_core < sizeof(q)) {
				ret = -EINVAL;
				break;
			}
			memcpy(&q, in, sizeof(q));
			/* Completion timestamps are what every CQE of the simulator
			 * carries anyway; ignoring overrun is not modelled. */
			if (q.comp_mask || q.reserved || (q.flags & ~IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION)) {
				ret = q.flags & ~IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION ? -EOPNOTSUPP : -EINVAL;
				break;
			}
			struct ib_uverbs_ex_create_cq_resp r;
			struct mlx5_ib_create_cq_resp m = {0};
			memset(&r, 0, sizeof(r));
			int h = create_cq(c, q.user_handle, q.cqe, q.comp_vector, q.comp_channel, udata, in_drv, &r.base.cqe,
					  &m.cqn);
			if (h < 0) {
				ret = h;
				break;
			}
			r.base.cq_handle = (uint32_t)h;
			r.response_length = out_core < sizeof(r) ? (uint32_t)out_core : sizeof(r);
			ret = put(ex.response, &r, sizeof(r), out_core);
			if (!ret)
				ret = put(ex.response + out_core, &m, sizeof(m), out_drv);
			if (ret)
				obj_destroy(c, (uint32_t)h);
			break;
		}
		case IB_USER_VERBS_EX_CMD_CREATE_QP: {
			struct ib_uverbs_ex_create_qp q = {0};
			if (in_core < offsetof(struct ib_uverbs_ex_create_qp, comp_mask) + 4) {
				ret = -EINVAL;
				break;
			}
			memcpy(&q, in, in_core < sizeof(q) ? in_core : sizeof(q));
			/* Blocking multicast loopback: there is no multicast here to
			 * block. Other creation flags (scatter FCS, CVLAN stripping,
			 * source QPN, ...) belong to raw packet QPs: not modelled. */
			if (q.comp_mask || q.reserved || (q.create_flags & ~IB_UVERBS_QP_CREATE_BLOCK_MULTICAST_LOOPBACK)) {
				ret = -EOPNOTSUPP;
				break;
			}
			struct qp_req req = { q.user_handle, q.pd_handle, q.send_cq_handle, q.recv_cq_handle, q.srq_handle,
					      q.max_send_wr, q.max_recv_wr, q.max_send_sge, q.max_recv_sge,
					      q.max_inline_data, q.sq_sig_all, q.qp_type, q.is_srq };
			struct ib_uverbs_ex_create_qp_resp r;
			struct mlx5_ib_create_qp_resp m;
			memset(&r, 0, sizeof(r));
			int h = create_qp(c, &req, udata, in_drv, &r.base, &m);
			if (h < 0) {
				ret = h;
				break;
			}
			r.response_length = out_core < sizeof(r) ? (uint32_t)out_core : sizeof(r);
			ret = put(ex.response, &r, sizeof(r), out_core);
			if (!ret)
				ret = put(ex.response + out_core, &m, sizeof(m), out_drv);
			if (ret)
				obj_destroy(c, (uint32_t)h);
			break;
		}
		case IB_USER_VERBS_EX_CMD_MODIFY_QP: {
			struct ib_uverbs_ex_modify_qp q = {0};
			if (in_core < sizeof(q.base)) {
				ret = -EINVAL;
				break;
			}
			memcpy(&q, in, in_core < sizeof(q) ? in_core : sizeof(q));
			if (q.base.attr_mask & (1u << 25)) {
				ret = -EOPNOTSUPP; /* rate limit: raw packet QPs only */
				break;
			}
			struct mlx5_ib_modify_qp u = {0};
			memcpy(&u, udata, in_drv < sizeof(u) ? in_drv : sizeof(u));
			if (u.comp_mask) {
				ret = -EOPNOTSUPP; /* out-of-order data placement: not modelled */
				break;
			}
			ret = modify_qp(c, &q.base);
			if (!ret) {
				struct ib_uverbs_ex_modify_qp_resp r = { 0, 0 };
				r.response_length = out_core < sizeof(r) ? (uint32_t)out_core : sizeof(r);
				ret = put(ex.response, &r, sizeof(r), out_core);
			}
			if (!ret && out_drv) {
				/* mlx5_ib_modify_qp_resp: a DCT's number once it is in RTR. */
				struct mlx5_ib_modify_qp_resp m = {0};
				m.response_length = out_drv < sizeof(m) ? (uint32_t)out_drv : sizeof(m);
				struct uobj *o = obj_get(c, q.base.qp_handle, OBJ_QP);
				if (o && o->qp_kind == 0x101 && (q.base.attr_mask & 1) && q.base.qp_state == 2)
					ret = mlx5sk_dct_number(c->dev, o->num, &m.dctn);
				if (!ret)
					ret = put(ex.response + out_core, &m, sizeof(m), out_drv);
			}
			break;
		}
		case IB_USER_VERBS_EX_CMD_QUERY_DEVICE: {
			struct ib_uverbs_ex_query_device q = {0};
			memcpy(&q, in, in_core < sizeof(q) ? in_core : sizeof(q));
			if (q.comp_mask || q.reserved) {
				ret = -EINVAL;
				goto out;
			}
			struct ib_uverbs_ex_query_device_resp r;
			memset(&r, 0, sizeof(r));
			fill_query_device(&d, &r.base);
			r.response_length = out_core < sizeof(r) ? (uint32_t)out_core : sizeof(r);
			r.timestamp_mask = (1ULL << 63) - 1;
			r.hca_core_clock = 156250; /* kHz */
			r.max_wq_type_rq = 0;
			if (put(ex.response, &r, sizeof(r), out_core)) {
				ret = -EFAULT;
				break;
			}
			struct mlx5_ib_query_device_resp m;
			memset(&m, 0, sizeof(m));
			m.response_length = out_drv < sizeof(m) ? (uint32_t)out_drv : sizeof(m);
			m.cqe_comp_caps.max_num = 64;
			m.cqe_comp_caps.supported_format = MLX5_IB_CQE_RES_FORMAT_HASH | MLX5_IB_CQE_RES_FORMAT_CSUM;
			ret = put(ex.response + out_core, &m, sizeof(m), out_drv);
			break;
		}
		default:
			/* A command this device does not implement (XRC, AH, MW,
			 * RESIZE_CQ, flows, WQs, ...): uapi_get_method's EOPNOTSUPP. */
			ret = -EOPNOTSUPP;
		}
	} else {
		size_t total = (size_t)hdr.in_words * 4, out_room = (size_t)hdr.out_words * 4;
		if (total != len) {
			ret = -EINVAL;
			goto out;
		}
		const uint8_t *in = (const uint8_t *)buf + sizeof(hdr);
		size_t in_len = len - sizeof(hdr);
		if (hdr.command != IB_USER_VERBS_CMD_GET_CONTEXT && !c->has_ucontext) {
			ret = -EINVAL;
			goto out;
		}
		switch (hdr.command) {
		case IB_USER_VERBS_CMD_GET_CONTEXT:
			ret = get_context(c, &d, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_QUERY_DEVICE: {
			const struct ib_uverbs_query_device *q = (const void *)in;
			if (in_len < sizeof(*q)) {
				ret = -EINVAL;
				break;
			}
			struct ib_uverbs_query_device_resp r;
			fill_query_device(&d, &r);
			ret = put(q->response, &r, sizeof(r), out_room);
			break;
		}
		case IB_USER_VERBS_CMD_QUERY_PORT:
			ret = query_port(&d, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_ALLOC_PD:
			ret = alloc_pd(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_DEALLOC_PD:
			ret = dealloc_pd(c, in, in_len);
			break;
		case IB_USER_VERBS_CMD_REG_MR:
			ret = reg_mr(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_DEREG_MR:
			ret = dereg_mr(c, in, in_len);
			break;
		case IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL:
			ret = create_comp_channel(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_CREATE_CQ: {
			const struct ib_uverbs_create_cq *q = (const void *)in;
			if (in_len < sizeof(*q)) {
				ret = -EINVAL;
				break;
			}
			struct ib_uverbs_create_cq_resp r = {0};
			struct mlx5_ib_create_cq_resp m = {0};
			int h = create_cq(c, q->user_handle, q->cqe, q->comp_vector, q->comp_channel, in + sizeof(*q),
					  in_len - sizeof(*q), &r.cqe, &m.cqn);
			if (h < 0) {
				ret = h;
				break;
			}
			r.cq_handle = (uint32_t)h;
			ret = put2(q->response, &r, sizeof(r), &m, sizeof(m), out_room);
			if (ret)
				obj_destroy(c, (uint32_t)h);
			break;
		}
		case IB_USER_VERBS_CMD_DESTROY_CQ:
			ret = destroy_cq(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_CREATE_QP: {
			const struct ib_uverbs_create_qp *q = (const void *)in;
			if (in_len < sizeof(*q)) {
				ret = -EINVAL;
				break;
			}
			struct qp_req req = { q->user_handle, q->pd_handle, q->send_cq_handle, q->recv_cq_handle, q->srq_handle,
					      q->max_send_wr, q->max_recv_wr, q->max_send_sge, q->max_recv_sge,
					      q->max_inline_data, q->sq_sig_all, q->qp_type, q->is_srq };
			struct ib_uverbs_create_qp_resp r;
			struct mlx5_ib_create_qp_resp m;
			int h = create_qp(c, &req, in + sizeof(*q), in_len - sizeof(*q), &r, &m);
			if (h < 0) {
				ret = h;
				break;
			}
			ret = put2(q->response, &r, sizeof(r), &m, sizeof(m), out_room);
			if (ret)
				obj_destroy(c, (uint32_t)h);
			break;
		}
		case IB_USER_VERBS_CMD_MODIFY_QP: {
			struct ib_uverbs_modify_qp q;
			if (in_len < sizeof(q)) {
				ret = -EINVAL;
				break;
			}
			memcpy(&q, in, sizeof(q));
			ret = modify_qp(c, &q);
			break;
		}
		case IB_USER_VERBS_CMD_QUERY_QP:
			ret = query_qp(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_DESTROY_QP:
			ret = destroy_qp(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_CREATE_SRQ:
			ret = create_srq(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_CREATE_AH:
			ret = create_ah(c, &d, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_DESTROY_AH:
			ret = destroy_ah(c, in, in_len);
			break;
		case IB_USER_VERBS_CMD_MODIFY_SRQ:
			ret = modify_srq(c, in, in_len);
			break;
		case IB_USER_VERBS_CMD_QUERY_SRQ:
			ret = query_srq(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_DESTROY_SRQ:
			ret = destroy_srq(c, in, in_len, out_room);
			break;
		default:
			/* A command this device does not implement (XRC, AH, MW,
			 * RESIZE_CQ, flows, WQs, ...): uapi_get_method's EOPNOTSUPP. */
			ret = -EOPNOTSUPP;
		}
	}
out:
	pthread_mutex_unlock(&lock);
	if (trace())
		fprintf(stderr, "mlx5_simkern: fd %d cmd %#x in %u out %u: %s%s\n", fd, hdr.command, hdr.in_words,
			hdr.out_words, ret < 0 ? "errno " : "ok", ret < 0 ? strerrorname_np(-ret) : "");
	return ret < 0 ? ret : (int)len;
}

/* The command fd `fd` closes: its context goes (and the async peer). */
void mlx5sk_close(int fd)
{
	pthread_mutex_lock(&lock);
	struct ctx *c = find(fd, 0, 0);
	if (c) {
		/* ib_uverbs_cleanup_ucontext: what names others goes first. */
		static const uint8_t order[] = { OBJ_QP, OBJ_SRQ, OBJ_AH, OBJ_MR, OBJ_CQ, OBJ_CHANNEL, OBJ_PD };
		for (size_t k = 0; k < sizeof(order); k++)
			for (uint32_t h = 0; h < c->nobjs; h++)
				if (c->objs[h].type == order[k])
					obj_destroy(c, h);
		free(c->objs);
		c->objs = NULL;
		c->nobjs = 0;
		uars_close(c);
		if (c->async_peer >= 0)
			close(c->async_peer);
		c->fd = -1;
	}
	pthread_mutex_unlock(&lock);
}

/* Contexts and objects alive (for the fuzz test's leak check). */
int mlx5sk_live(void)
{
	int n = 0;
	pthread_mutex_lock(&lock);
	if (ctxs_ready)
		for (int i = 0; i < MAX_CTX; i++) {
			n += ctxs[i].fd != -1;
			for (uint32_t h = 0; h < ctxs[i].nobjs; h++)
				n += ctxs[i].objs[h].type != OBJ_FREE;
		}
	pthread_mutex_unlock(&lock);
	return n;
}

/* The forwarder (device.rs): completion event of CQ `cqn` on the
 * simulator's channel `chan` of device `dev`, written to the program's end
 * of the channel that owns it as ib_uverbs_comp_event_desc. */
void mlx5sk_comp_event(int dev, uint32_t chan, uint32_t cqn)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; ctxs_ready && i < MAX_CTX; i++) {
		struct ctx *c = &ctxs[i];
		if (c->fd == -1 || c->dev != dev)
			continue;
		for (uint32_t h = 0; h < c->nobjs; h++) {
			struct uobj *o = &c->objs[h];
			if (o->type != OBJ_CQ || o->num != cqn || o->pd == UINT32_MAX ||
			    c->objs[o->pd].sim_chan != chan)
				continue;
			struct ib_uverbs_comp_event_desc d = { .cq_handle = o->user_handle };
			if (send(c->objs[o->pd].peer, &d, sizeof(d), MSG_NOSIGNAL | MSG_DONTWAIT) == sizeof(d))
				o->comp_events++;
		}
	}
	pthread_mutex_unlock(&lock);
}

/* The forwarder: asynchronous event `type` (IBV_EVENT_*) of the CQ (type
 * 0), QP (1) or SRQ (14, 15) numbered `num`, or of the port or device,
 * written to the async fd(s) as ib_uverbs_async_event_desc. */
void mlx5sk_async_event(int dev, uint32_t type, uint32_t num)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; ctxs_ready && i < MAX_CTX; i++) {
		struct ctx *c = &ctxs[i];
		if (c->fd == -1 || c->dev != dev || c->async_peer < 0)
			continue;
		struct ib_uverbs_async_event_desc d = { .event_type = type };
		if (type == 0 || type == 1 || type == 14 || type == 15) {
			uint8_t want = type == 0 ? OBJ_CQ : type >= 14 ? OBJ_SRQ : OBJ_QP;
			for (uint32_t h = 0; h < c->nobjs; h++) {
				struct uobj *o = &c->objs[h];
				if (o->type != want || o->num != num)
					continue;
				d.element = o->user_handle;
				if (send(c->async_peer, &d, sizeof(d), MSG_NOSIGNAL | MSG_DONTWAIT) == sizeof(d))
					o->async_events++;
			}
		} else {
			d.element = type == 8 ? 0 : num; /* the port number for port events */
			send(c->async_peer, &d, sizeof(d), MSG_NOSIGNAL | MSG_DONTWAIT);
		}
	}
	pthread_mutex_unlock(&lock);
}

/* The context of command fd `fd` and its objects: 0 when none is left. */
int mlx5sk_live_of(int fd)
{
	int n = 0;
	pthread_mutex_lock(&lock);
	struct ctx *c = ctxs_ready ? find(fd, 0, 0) : NULL;
	if (c) {
		n = 1;
		for (uint32_t h = 0; h < c->nobjs; h++)
			n += c->objs[h].type != OBJ_FREE;
	}
	pthread_mutex_unlock(&lock);
	return n;
}


/* The forwarder, now and then: a completion channel whose program end is
 * closed (ibv_destroy_comp_channel closes it; no command tells the kernel)
 * goes once no CQ uses it, as the kernel drops the channel's file with its
 * last reference. */
void mlx5sk_reap_channels(void)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; ctxs_ready && i < MAX_CTX; i++) {
		struct ctx *c = &ctxs[i];
		if (c->fd == -1)
			continue;
		for (uint32_t h = 0; h < c->nobjs; h++) {
			struct uobj *o = &c->objs[h];
			if (o->type != OBJ_CHANNEL || o->peer < 0)
				continue;
			char b;
			if (recv(o->peer, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 0)
				continue; /* open (EAGAIN), or not a stream end at all */
			int used = 0;
			for (uint32_t k = 0; k < c->nobjs && !used; k++)
				used = c->objs[k].type == OBJ_CQ && c->objs[k].pd == h;
			if (!used)
				obj_destroy(c, h);
		}
	}
	pthread_mutex_unlock(&lock);
}
