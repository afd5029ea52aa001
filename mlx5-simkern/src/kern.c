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
#define _GNU_SOURCE /* process_vm_writev */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
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

/* Per command fd: the device and the context GET_CONTEXT made. */
struct ctx {
	int fd;        /* the command fd, -1 when the slot is free */
	int dev;
	int has_ucontext;
	int async_peer; /* our end of the async event socketpair */
};

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
			return &ctxs[i];
		}
	return NULL;
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
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		return -errno;
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
	r.drv.tot_bfregs = req.total_num_bfregs ? (req.total_num_bfregs + 1) & ~1u : 16;
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
		return -EFAULT;
	}
	c->has_ucontext = 1;
	c->async_peer = sv[1];
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
		switch (cmd) {
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
			ret = -ENOSYS;
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
		default:
			ret = -ENOSYS;
		}
	}
out:
	pthread_mutex_unlock(&lock);
	return ret < 0 ? ret : (int)len;
}

/* The command fd `fd` closes: its context goes (and the async peer). */
void mlx5sk_close(int fd)
{
	pthread_mutex_lock(&lock);
	struct ctx *c = find(fd, 0, 0);
	if (c) {
		if (c->async_peer >= 0)
			close(c->async_peer);
		c->fd = -1;
	}
	pthread_mutex_unlock(&lock);
}

/* Contexts alive (for the fuzz test's leak check). */
int mlx5sk_live(void)
{
	int n = 0;
	pthread_mutex_lock(&lock);
	if (ctxs_ready)
		for (int i = 0; i < MAX_CTX; i++)
			n += ctxs[i].fd != -1;
	pthread_mutex_unlock(&lock);
	return n;
}
