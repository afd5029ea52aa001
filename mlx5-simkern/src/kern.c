/*
 * The emulated uverbs kernel's command side (with objects.c, the object
 * commands, and events.c, the events; kern.h is what they share): command
 * fds and their contexts, the write() dispatch, GET_CONTEXT, the queries
 * and the UAR mmaps. The write() ABI of
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
#include "kern.h"

struct ctx ctxs[MAX_CTX];
pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
int ctxs_ready;

static void uars_close(struct ctx *c);

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
/* Whether [addr, addr + len) is mapped in this process (the kernel pins an
 * MR's pages and a ring's, and fails with EFAULT where there are none). */
int sk_mapped(uint64_t addr, uint64_t len)
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

/* MLX5_SIMKERN_NO_PROCESS_VM=1: copy as on a system that refuses
 * process_vm_writev (tests run the fallback with it). */
static int no_process_vm(void)
{
	static int v = -1;
	if (v < 0) {
		const char *e = getenv("MLX5_SIMKERN_NO_PROCESS_VM");
		v = e && *e && strcmp(e, "0");
	}
	return v;
}

int sk_put(uint64_t dst, const void *src, size_t len, size_t room)
{
	size_t n = len < room ? len : room;
	if (!n)
		return 0;
	struct iovec local = { (void *)src, n }, remote = { (void *)(uintptr_t)dst, n };
	ssize_t w;
	if (no_process_vm()) {
		errno = ENOSYS;
		w = -1;
	} else {
		w = process_vm_writev(getpid(), &local, 1, &remote, 1, 0);
	}
	if (w == (ssize_t)n)
		return 0;
	if (w < 0 && (errno == ENOSYS || errno == EPERM)) {
		/* A system that refuses process_vm_writev (a container's seccomp
		 * profile): the range must be mapped, then a plain copy. */
		if (!sk_mapped(dst, n))
			return -EFAULT;
		memcpy((void *)(uintptr_t)dst, src, n);
		return 0;
	}
	return -EFAULT;
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

/*
 * The clock: hca_core_clock (kHz) in EX_QUERY_DEVICE, and cycles to
 * nanoseconds for the clock info page: 1e6 / 156250 = 6.4 ns per cycle,
 * as mult >> shift (mult = round(6.4 * 2^16)).
 */
#define CORE_CLOCK_KHZ 156250
#define CLOCK_SHIFT 16
#define CLOCK_MULT 419430u
#define CLOCK_MASK ((1ULL << 63) - 1)

/*
 * The clock info page (struct mlx5_ib_clock_info, V1) mlx5_ib keeps for
 * mlx5dv_get_clock_info: the simulator's clock `cycles` at wall-clock time
 * now. The page is written once: the counter is a tick per WQE, message or
 * RNR period, and overflow_period (delta * mult within 64 bits) is hours.
 */
static void clock_info_fill(uint8_t *page, uint64_t cycles)
{
	struct mlx5_ib_clock_info ci;
	struct timespec now;
	memset(&ci, 0, sizeof(ci));
	clock_gettime(CLOCK_REALTIME, &now);
	ci.sign = 0; /* even: not being updated */
	ci.nsec = (uint64_t)now.tv_sec * 1000000000ULL + (uint64_t)now.tv_nsec;
	ci.cycles = cycles;
	ci.frac = 0;
	ci.mult = CLOCK_MULT;
	ci.shift = CLOCK_SHIFT;
	ci.mask = CLOCK_MASK;
	ci.overflow_period = (UINT64_MAX / CLOCK_MULT >> 1) * 64 / 10;
	memcpy(page, &ci, sizeof(ci));
}

/* The context's pages: a memfd of `n` UAR pages, each attached to the
 * simulator's context, then the core clock page (the simulator's clock as
 * the internal timer, MLX5_IB_MMAP_CORE_CLOCK), the clock info page
 * (MLX5_IB_MMAP_CLOCK_INFO) and the dynamic UAR pages (attached when
 * mapped), all mapped here for the simulator. */
static int uars_open(struct ctx *c, uint32_t n)
{
	if (!n || n > MAX_UAR_PAGES)
		return -ENOMEM;
	uint32_t id;
	int r = mlx5sk_open_context(c->dev, &id);
	if (r)
		return r;
	size_t bytes = (size_t)(n + 2 + DYN_UAR_PAGES) * 4096; /* sparse: pages are made when touched */
	int fd = memfd_create("mlx5_simkern-uar", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)bytes)) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		mlx5sk_close_context(c->dev, id);
		return r;
	}
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
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
	memset(c->dyn_mapped, 0, sizeof(c->dyn_mapped));
	for (uint32_t i = 0; i < n; i++) {
		r = mlx5sk_attach_uar(c->dev, id, c->uars + (size_t)i * 4096, &c->first_reg[i]);
		if (r) {
			uars_close(c);
			return r;
		}
	}
	uint8_t *clock = c->uars + (size_t)n * 4096;
	r = mlx5sk_attach_clock(c->dev, id, clock);
	if (r) {
		uars_close(c);
		return r;
	}
	uint64_t cycles;
	memcpy(&cycles, clock, sizeof(cycles));
	clock_info_fill(clock + 4096, be64toh(cycles));
	return 0;
}

/* After every QP of the context is destroyed. */
static void uars_close(struct ctx *c)
{
	if (c->memfd < 0)
		return;
	mlx5sk_close_context(c->dev, c->sim_ctx);
	munmap(c->uars, (size_t)(c->npages + 2 + DYN_UAR_PAGES) * 4096);
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
	/* DEVX only when asked for (MLX5_SIM_DEVX): libmlx5 asks on every open
	 * and falls back without it, and the emulation models one DEVX object
	 * (an indirect mkey, sk_devx_obj). */
	if (req.flags & MLX5_IB_ALLOC_UCTX_DEVX) {
		const char *e = getenv("MLX5_SIM_DEVX");
		if (!e || !*e || !strcmp(e, "0"))
			return -EINVAL;
		c->devx = 1;
	}
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
	/* The internal timer is at offset 0 of its page (internal_timer_h at
	 * 0x1000 of the init segment), and the clock info page is V1. */
	r.drv.num_dyn_bfregs = DYN_UAR_PAGES * 2;
	r.drv.comp_mask = MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET;
	r.drv.hca_core_clock_offset = 0;
	r.drv.clock_info_versions = 1 << MLX5_IB_CLOCK_INFO_V1;
	if (sk_put(cmd->response, &r, sizeof(r), out_room)) {
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
	return sk_put(cmd->response, &r, sizeof(r), out_room);
}

/*
 * mmap of a command fd at `off` for `len` bytes with `prot` and `flags`: the
 * memfd to map instead, with the offset in `*moff`, or -errno as mlx5_ib_mmap
 * answers. Offsets are (command << 8 | index) pages (MLX5_IB_MMAP_CMD_SHIFT):
 * the regular and non-cached UAR commands map UAR page `index`; the core
 * clock and the clock info page (V1 only) are read-only pages; ALLOC_WC
 * maps dynamic UAR page `extended index`, once, attaching it to the
 * simulator so that doorbells and BlueFlame writes there are seen.
 */
int mlx5sk_mmap_target(int fd, uint64_t off, size_t len, int prot, int flags, uint64_t *moff)
{
	pthread_mutex_lock(&lock);
	struct ctx *c = find(fd, 0, 0);
	int ret;
	/* get_command, get_index and get_extended_index of mlx5_ib */
	uint64_t pg = off / 4096, cmd = (pg >> 8) & 0xff, idx = pg & 0xff;
	uint64_t ext = idx | ((pg >> 16) & 0xff) << 8;
	if (!c || !c->has_ucontext || c->memfd < 0)
		ret = -EINVAL;
	else if (off % 4096 || len != 4096)
		ret = -EINVAL;
	else if (cmd == MLX5_IB_MMAP_CORE_CLOCK) {
		if (prot & PROT_WRITE)
			ret = -EPERM;
		else {
			*moff = (uint64_t)c->npages * 4096;
			ret = c->memfd;
		}
	} else if (cmd == MLX5_IB_MMAP_CLOCK_INFO) {
		if (!(flags & MAP_SHARED))
			ret = -EINVAL;
		else if (idx != MLX5_IB_CLOCK_INFO_V1)
			ret = -EOPNOTSUPP;
		else if (prot & (PROT_WRITE | PROT_EXEC))
			ret = -EPERM;
		else {
			*moff = (uint64_t)(c->npages + 1) * 4096;
			ret = c->memfd;
		}
	} else if (cmd == MLX5_IB_MMAP_ALLOC_WC) {
		/* A dynamic UAR page, each index once (mlx5_ib: "idx is busy"). */
		if (ext >= DYN_UAR_PAGES || c->dyn_mapped[ext])
			ret = -EINVAL;
		else {
			uint64_t at = (uint64_t)(c->npages + 2 + ext) * 4096;
			ret = mlx5sk_attach_uar(c->dev, c->sim_ctx, c->uars + at, &c->dyn_reg[ext]);
			if (!ret) {
				c->dyn_mapped[ext] = 1;
				*moff = at;
				ret = c->memfd;
			}
		}
	} else if (cmd != MLX5_IB_MMAP_REGULAR_PAGE && cmd != MLX5_IB_MMAP_NC_PAGE)
		ret = -EINVAL; /* the contiguous pages, device memory: not emulated */
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
/* RDMA_VERBS_IOCTL for the DEVX object methods (lib.rs sends only those
 * here): 0 or -errno. */
int mlx5sk_ioctl(int fd, int dev, void *arg)
{
	struct ib_uverbs_ioctl_hdr *h = arg;
	pthread_mutex_lock(&lock);
	struct ctx *c = find(fd, dev, 0);
	int ret = c && c->has_ucontext && c->devx ? sk_devx_obj(c, h) : -EOPNOTSUPP;
	pthread_mutex_unlock(&lock);
	return ret;
}

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
			int h = sk_create_cq(c, q.user_handle, q.cqe, q.comp_vector, q.comp_channel, udata, in_drv, &r.base.cqe,
					  &m.cqn);
			if (h < 0) {
				ret = h;
				break;
			}
			r.base.cq_handle = (uint32_t)h;
			r.response_length = out_core < sizeof(r) ? (uint32_t)out_core : sizeof(r);
			ret = sk_put(ex.response, &r, sizeof(r), out_core);
			if (!ret)
				ret = sk_put(ex.response + out_core, &m, sizeof(m), out_drv);
			if (ret)
				sk_obj_destroy(c, (uint32_t)h);
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
			int h = sk_create_qp(c, &req, udata, in_drv, &r.base, &m);
			if (h < 0) {
				ret = h;
				break;
			}
			r.response_length = out_core < sizeof(r) ? (uint32_t)out_core : sizeof(r);
			ret = sk_put(ex.response, &r, sizeof(r), out_core);
			if (!ret)
				ret = sk_put(ex.response + out_core, &m, sizeof(m), out_drv);
			if (ret)
				sk_obj_destroy(c, (uint32_t)h);
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
			ret = sk_modify_qp(c, &q.base);
			if (!ret) {
				struct ib_uverbs_ex_modify_qp_resp r = { 0, 0 };
				r.response_length = out_core < sizeof(r) ? (uint32_t)out_core : sizeof(r);
				ret = sk_put(ex.response, &r, sizeof(r), out_core);
			}
			if (!ret && out_drv) {
				/* mlx5_ib_modify_qp_resp: a DCT's number once it is in RTR. */
				struct mlx5_ib_modify_qp_resp m = {0};
				m.response_length = out_drv < sizeof(m) ? (uint32_t)out_drv : sizeof(m);
				struct uobj *o = sk_obj_get(c, q.base.qp_handle, OBJ_QP);
				if (o && o->qp_kind == 0x101 && (q.base.attr_mask & 1) && q.base.qp_state == 2)
					ret = mlx5sk_dct_number(c->dev, o->num, &m.dctn);
				if (!ret)
					ret = sk_put(ex.response + out_core, &m, sizeof(m), out_drv);
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
			r.timestamp_mask = CLOCK_MASK;
			r.hca_core_clock = CORE_CLOCK_KHZ;
			r.max_wq_type_rq = 0;
			if (sk_put(ex.response, &r, sizeof(r), out_core)) {
				ret = -EFAULT;
				break;
			}
			struct mlx5_ib_query_device_resp m;
			memset(&m, 0, sizeof(m));
			m.response_length = out_drv < sizeof(m) ? (uint32_t)out_drv : sizeof(m);
			m.cqe_comp_caps.max_num = 64;
			m.cqe_comp_caps.supported_format = MLX5_IB_CQE_RES_FORMAT_HASH | MLX5_IB_CQE_RES_FORMAT_CSUM;
			ret = sk_put(ex.response + out_core, &m, sizeof(m), out_drv);
			break;
		}
		default:
			/* A command this device does not implement (XRC, MW, flows,
			 * WQs, ...): uapi_get_method's EOPNOTSUPP. */
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
			ret = sk_put(q->response, &r, sizeof(r), out_room);
			break;
		}
		case IB_USER_VERBS_CMD_QUERY_PORT:
			ret = query_port(&d, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_ALLOC_PD:
			ret = sk_alloc_pd(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_DEALLOC_PD:
			ret = sk_dealloc_pd(c, in, in_len);
			break;
		case IB_USER_VERBS_CMD_REG_MR:
			ret = sk_reg_mr(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_DEREG_MR:
			ret = sk_dereg_mr(c, in, in_len);
			break;
		case IB_USER_VERBS_CMD_ALLOC_MW:
			ret = sk_alloc_mw(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_DEALLOC_MW:
			ret = sk_dealloc_mw(c, in, in_len);
			break;
		case IB_USER_VERBS_CMD_REREG_MR:
			ret = sk_rereg_mr(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL:
			ret = sk_create_comp_channel(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_CREATE_CQ: {
			const struct ib_uverbs_create_cq *q = (const void *)in;
			if (in_len < sizeof(*q)) {
				ret = -EINVAL;
				break;
			}
			struct ib_uverbs_create_cq_resp r = {0};
			struct mlx5_ib_create_cq_resp m = {0};
			int h = sk_create_cq(c, q->user_handle, q->cqe, q->comp_vector, q->comp_channel, in + sizeof(*q),
					  in_len - sizeof(*q), &r.cqe, &m.cqn);
			if (h < 0) {
				ret = h;
				break;
			}
			r.cq_handle = (uint32_t)h;
			ret = sk_put2(q->response, &r, sizeof(r), &m, sizeof(m), out_room);
			if (ret)
				sk_obj_destroy(c, (uint32_t)h);
			break;
		}
		case IB_USER_VERBS_CMD_DESTROY_CQ:
			ret = sk_destroy_cq(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_RESIZE_CQ:
			ret = sk_resize_cq(c, in, in_len, out_room);
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
			int h = sk_create_qp(c, &req, in + sizeof(*q), in_len - sizeof(*q), &r, &m);
			if (h < 0) {
				ret = h;
				break;
			}
			ret = sk_put2(q->response, &r, sizeof(r), &m, sizeof(m), out_room);
			if (ret)
				sk_obj_destroy(c, (uint32_t)h);
			break;
		}
		case IB_USER_VERBS_CMD_MODIFY_QP: {
			struct ib_uverbs_modify_qp q;
			if (in_len < sizeof(q)) {
				ret = -EINVAL;
				break;
			}
			memcpy(&q, in, sizeof(q));
			ret = sk_modify_qp(c, &q);
			break;
		}
		case IB_USER_VERBS_CMD_QUERY_QP:
			ret = sk_query_qp(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_DESTROY_QP:
			ret = sk_destroy_qp(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_CREATE_SRQ:
			ret = sk_create_srq(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_CREATE_AH:
			ret = sk_create_ah(c, &d, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_DESTROY_AH:
			ret = sk_destroy_ah(c, in, in_len);
			break;
		case IB_USER_VERBS_CMD_MODIFY_SRQ:
			ret = sk_modify_srq(c, in, in_len);
			break;
		case IB_USER_VERBS_CMD_QUERY_SRQ:
			ret = sk_query_srq(c, in, in_len, out_room);
			break;
		case IB_USER_VERBS_CMD_DESTROY_SRQ:
			ret = sk_destroy_srq(c, in, in_len, out_room);
			break;
		default:
			/* A command this device does not implement (XRC, MW, flows,
			 * WQs, ...): uapi_get_method's EOPNOTSUPP. */
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
					sk_obj_destroy(c, h);
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

/* The command fd `fd` closes while a duplicate `to` of it stays open: the
 * context is the same file's, and lives on under `to`. */
void mlx5sk_rekey(int fd, int to)
{
	pthread_mutex_lock(&lock);
	struct ctx *c = find(fd, 0, 0);
	if (c)
		c->fd = to;
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

