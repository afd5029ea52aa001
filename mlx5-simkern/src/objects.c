/*
 * The emulated kernel's objects: each context's table of handles (the
 * kernel's idr: another context's handle, a destroyed one or one of
 * another type is refused as the kernel refuses it) and the commands that
 * create, change and destroy PDs, MRs, completion channels, CQs, QPs,
 * SRQs and address handles in the simulator (device.rs).
 */
#include "kern.h"

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
struct uobj *sk_obj_get(struct ctx *c, uint32_t handle, uint8_t type)
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


/* Tears one object down in the simulator and frees its slot. */
void sk_obj_destroy(struct ctx *c, uint32_t h)
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
	case OBJ_MW:
		mlx5sk_dealloc_mw(c->dev, o->num);
		c->objs[o->pd].users--;
		break;
	case OBJ_DEVX_MKEY:
		mlx5sk_dealloc_mw(c->dev, o->num);
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
int sk_put2(uint64_t dst, const void *core, size_t core_len, const void *drv, size_t drv_len, size_t room)
{
	int r = sk_put(dst, core, core_len, room);
	if (r || room <= core_len)
		return r;
	return sk_put(dst + core_len, drv, drv_len, room - core_len);
}

int sk_alloc_pd(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
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
	r = sk_put2(cmd->response, &core, sizeof(core), &drv, sizeof(drv), room);
	if (r)
		sk_obj_destroy(c, (uint32_t)h);
	return r;
}

int sk_dealloc_pd(struct ctx *c, const uint8_t *in, size_t in_len)
{
	const struct ib_uverbs_dealloc_pd *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *o = sk_obj_get(c, cmd->pd_handle, OBJ_PD);
	if (!o)
		return obj_lookup_err(c, cmd->pd_handle);
	if (o->users)
		return -EBUSY;
	sk_obj_destroy(c, cmd->pd_handle);
	return 0;
}

int sk_reg_mr(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_reg_mr *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	/* ib_check_mr_access, then what this emulation does not model:
	 * zero-based and on-demand MRs, an IOVA other than the address. MW_BIND
	 * (0x10) is modelled. */
	uint32_t access = cmd->access_flags & ~IB_UVERBS_ACCESS_OPTIONAL_RANGE;
	if (access & ~0xffu)
		return -EINVAL;
	if ((access & (IB_UVERBS_ACCESS_REMOTE_WRITE | IB_UVERBS_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IB_UVERBS_ACCESS_LOCAL_WRITE))
		return -EINVAL;
	if (access & ~0x1fu)
		return -EOPNOTSUPP;
	if ((cmd->start & 0xfff) != (cmd->hca_va & 0xfff))
		return -EINVAL;
	if (cmd->hca_va != cmd->start)
		return -EOPNOTSUPP;
	struct uobj *pd = sk_obj_get(c, cmd->pd_handle, OBJ_PD);
	if (!pd)
		return -EINVAL;
	if (!sk_mapped(cmd->start, cmd->length))
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
	r = sk_put(cmd->response, &resp, sizeof(resp), room);
	if (r)
		sk_obj_destroy(c, (uint32_t)h);
	return r;
}

/* REREG_MR (ib_uverbs_rereg_mr, then mlx5_ib_rereg_user_mr): the MR keeps
 * its keys and takes a new PD, range or rights, checked as REG_MR checks
 * them. */
int sk_rereg_mr(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_rereg_mr *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	enum { TRANS = 1, PD = 2, ACCESS = 4 }; /* IB_MR_REREG_* */
	if (!cmd->flags)
		return -EINVAL;
	if (cmd->flags & ~(uint32_t)(TRANS | PD | ACCESS))
		return -EOPNOTSUPP;
	if ((cmd->flags & TRANS) && (cmd->start & 0xfff) != (cmd->hca_va & 0xfff))
		return -EINVAL;
	struct uobj *mr = sk_obj_get(c, cmd->mr_handle, OBJ_MR);
	if (!mr)
		return obj_lookup_err(c, cmd->mr_handle);
	uint32_t access = cmd->access_flags & ~IB_UVERBS_ACCESS_OPTIONAL_RANGE;
	if (cmd->flags & ACCESS) {
		if (access & ~0xffu)
			return -EINVAL;
		if ((access & (IB_UVERBS_ACCESS_REMOTE_WRITE | IB_UVERBS_ACCESS_REMOTE_ATOMIC)) &&
		    !(access & IB_UVERBS_ACCESS_LOCAL_WRITE))
			return -EINVAL;
		if (access & ~0x1fu)
			return -EOPNOTSUPP;
	}
	uint32_t pd_handle = mr->pd;
	if (cmd->flags & PD) {
		if (!sk_obj_get(c, cmd->pd_handle, OBJ_PD))
			return -EINVAL;
		pd_handle = cmd->pd_handle;
	}
	if (cmd->flags & TRANS) {
		if (cmd->hca_va != cmd->start)
			return -EOPNOTSUPP;
		if (!cmd->length || !sk_mapped(cmd->start, cmd->length))
			return -EFAULT;
	}
	int r = mlx5sk_rereg_mr(c->dev, mr->num, cmd->flags, c->objs[pd_handle].num, cmd->start, cmd->length,
				access);
	if (r)
		return r;
	if (pd_handle != mr->pd) {
		c->objs[mr->pd].users--;
		c->objs[pd_handle].users++;
		mr->pd = pd_handle;
	}
	struct ib_uverbs_rereg_mr_resp resp = { .lkey = mr->num, .rkey = mr->num };
	return sk_put(cmd->response, &resp, sizeof(resp), room);
}

int sk_dereg_mr(struct ctx *c, const uint8_t *in, size_t in_len)
{
	const struct ib_uverbs_dereg_mr *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	if (!sk_obj_get(c, cmd->mr_handle, OBJ_MR))
		return obj_lookup_err(c, cmd->mr_handle);
	sk_obj_destroy(c, cmd->mr_handle);
	return 0;
}

/* ALLOC_MW (ib_uverbs_alloc_mw, then mlx5_ib_alloc_mw): a free window of
 * type 1 or 2 in the PD; its rkey (variant 0) in the response. */
int sk_alloc_mw(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_alloc_mw *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	if (cmd->mw_type != 1 && cmd->mw_type != 2) /* IB_MW_TYPE_1, IB_MW_TYPE_2 */
		return -EINVAL;
	if (!sk_obj_get(c, cmd->pd_handle, OBJ_PD))
		return -EINVAL;
	int h = obj_new(c, OBJ_MW);
	if (h < 0)
		return h;
	struct uobj *pd = &c->objs[cmd->pd_handle]; /* the table may have moved */
	uint32_t key;
	int r = mlx5sk_alloc_mw(c->dev, pd->num, cmd->mw_type, &key);
	if (r) {
		c->objs[h].type = OBJ_FREE;
		return r;
	}
	c->objs[h].num = key;
	c->objs[h].pd = cmd->pd_handle;
	pd->users++;
	struct ib_uverbs_alloc_mw_resp resp = { .mw_handle = (uint32_t)h, .rkey = key };
	r = sk_put(cmd->response, &resp, sizeof(resp), room);
	if (r)
		sk_obj_destroy(c, (uint32_t)h);
	return r;
}

int sk_dealloc_mw(struct ctx *c, const uint8_t *in, size_t in_len)
{
	const struct ib_uverbs_dealloc_mw *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	if (!sk_obj_get(c, cmd->mw_handle, OBJ_MW))
		return obj_lookup_err(c, cmd->mw_handle);
	sk_obj_destroy(c, cmd->mw_handle);
	return 0;
}

static uint32_t be32_at(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* DEVX_OBJ_CREATE / _DESTROY (mlx5dv_devx_obj_create, _destroy) of the one
 * object the emulation models: CREATE_MKEY (PRM opcode 0x200) of an indirect
 * mkey, KLM access mode (mlx5dv_create_mkey), in the PD its mkey context
 * names, for translations_octword_size entries. Fields read at their PRM bit
 * offsets (mlx5_ifc.h: create_mkey_in, mkc): the mkey context at byte 16;
 * in it, counting bits of a big-endian DW from its least significant:
 * free (DW0 bit 30), access_mode_4_2 (28:26), umr_en (15), access_mode_1_0
 * (9:8), pd (DW3 23:0), translations_octword_size (DW13).
 * The output: status 0, syndrome 0, mkey_index (DW2 23:0). Any other
 * command: EOPNOTSUPP. */
int sk_devx_obj(struct ctx *c, struct ib_uverbs_ioctl_hdr *h)
{
	struct ib_uverbs_attr *handle = NULL, *cmd_in = NULL, *cmd_out = NULL;
	for (uint16_t i = 0; i < h->num_attrs; i++) {
		struct ib_uverbs_attr *a = &h->attrs[i];
		if (h->method_id == MLX5_IB_METHOD_DEVX_OBJ_CREATE) {
			if (a->attr_id == MLX5_IB_ATTR_DEVX_OBJ_CREATE_HANDLE)
				handle = a;
			else if (a->attr_id == MLX5_IB_ATTR_DEVX_OBJ_CREATE_CMD_IN)
				cmd_in = a;
			else if (a->attr_id == MLX5_IB_ATTR_DEVX_OBJ_CREATE_CMD_OUT)
				cmd_out = a;
		} else if (a->attr_id == MLX5_IB_ATTR_DEVX_OBJ_DESTROY_HANDLE) {
			handle = a;
		}
	}
	if (h->method_id == MLX5_IB_METHOD_DEVX_OBJ_DESTROY) {
		if (!handle)
			return -EINVAL;
		uint32_t hd = (uint32_t)handle->data;
		if (!sk_obj_get(c, hd, OBJ_DEVX_MKEY))
			return obj_lookup_err(c, hd);
		sk_obj_destroy(c, hd);
		return 0;
	}
	if (h->method_id != MLX5_IB_METHOD_DEVX_OBJ_CREATE)
		return -EOPNOTSUPP;
	if (!handle || !cmd_in || !cmd_out || cmd_in->len < 16 + 64 || cmd_out->len < 16)
		return -EINVAL;
	/* The kernel copies them in and out: a range that is not mapped is EFAULT. */
	if (!sk_mapped(cmd_in->data, cmd_in->len) || !sk_mapped(cmd_out->data, cmd_out->len))
		return -EFAULT;
	const uint8_t *in = (const uint8_t *)(uintptr_t)cmd_in->data;
	uint8_t *out = (uint8_t *)(uintptr_t)cmd_out->data;
	if ((be32_at(in) >> 16) != 0x200) /* MLX5_CMD_OP_CREATE_MKEY */
		return -EOPNOTSUPP;
	const uint8_t *mkc = in + 16;
	uint32_t w0 = be32_at(mkc);
	uint32_t mode = ((w0 >> 26) & 7) << 2 | ((w0 >> 8) & 3);
	if (mode != 2 /* KLMS */ || !((w0 >> 15) & 1) /* umr_en */ || !((w0 >> 30) & 1) /* free */)
		return -EOPNOTSUPP;
	uint32_t pdn = be32_at(mkc + 12) & 0xffffff;
	int en_rinval = (be32_at(mkc + 12) >> 24) & 1; /* DW3 bit 24 */
	uint32_t entries = be32_at(mkc + 52);
	int h_new = obj_new(c, OBJ_DEVX_MKEY);
	if (h_new < 0)
		return h_new;
	uint32_t key;
	int r = mlx5sk_alloc_indirect_mkey(c->dev, pdn, entries, en_rinval, &key);
	if (r) {
		c->objs[h_new].type = OBJ_FREE;
		return r;
	}
	c->objs[h_new].num = key;
	memset(out, 0, cmd_out->len);
	uint32_t idx = key >> 8;
	out[9] = (uint8_t)(idx >> 16);
	out[10] = (uint8_t)(idx >> 8);
	out[11] = (uint8_t)idx;
	handle->data = (uint32_t)h_new;
	cmd_out->flags |= UVERBS_ATTR_F_VALID_OUTPUT;
	return 0;
}

int sk_create_comp_channel(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
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
	int r = sk_put(cmd->response, &resp, sizeof(resp), room);
	if (r) {
		close(sv[0]);
		sk_obj_destroy(c, (uint32_t)h);
	}
	return r;
}

/* CREATE_CQ and EX_CREATE_CQ after their core requests are read: `udata`
 * is mlx5_ib_create_cq. The handle, or -errno; `*cqe` the entries - 1. */
int sk_create_cq(struct ctx *c, uint64_t user_handle, uint32_t entries, uint32_t comp_vector, int32_t channel,
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
	if ((u.buf_addr & 63) || (u.db_addr & 7) || !sk_mapped(u.buf_addr, (uint64_t)n * u.cqe_size) ||
	    !sk_mapped(u.db_addr, 8))
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
	c->objs[h].max_wr = n;
	c->objs[h].max_sge = u.cqe_size;
	*cqe = n - 1;
	return h;
}

/* RESIZE_CQ (mlx5_ib_resize_cq over the ring libmlx5 allocated, udata
 * mlx5_ib_resize_cq): roundup_pow_of_two(entries + 1) entries, the same
 * count is nothing to do; the CQE size stays the CQ's (libmlx5 never
 * changes it; another is EINVAL here). The simulator ends the old ring
 * with a RESIZE CQE; a new ring too small for the unpolled CQEs, or a CQ
 * in error, is EINVAL, as the firmware's refusal of MODIFY_CQ is. */
int sk_resize_cq(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_resize_cq *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *o = sk_obj_get(c, cmd->cq_handle, OBJ_CQ);
	if (!o)
		return obj_lookup_err(c, cmd->cq_handle);
	struct mlx5sk_dev d;
	if (mlx5sk_dev_info(c->dev, &d))
		return -ENODEV;
	uint32_t entries = cmd->cqe;
	if (entries < 1 || entries > d.max_cqe || entries > (1u << 22) - 1)
		return -EINVAL;
	uint32_t n = 1;
	while (n < entries + 1)
		n <<= 1;
	if (n != o->max_wr) {
		struct mlx5_ib_resize_cq u = {0};
		size_t udata_len = in_len - sizeof(*cmd);
		if (udata_len < sizeof(u))
			return -EFAULT; /* ib_copy_from_udata of too little */
		memcpy(&u, in + sizeof(*cmd), sizeof(u));
		if (u.reserved0 || u.reserved1 || u.cqe_size != o->max_sge)
			return -EINVAL;
		if ((u.buf_addr & 63) || !sk_mapped(u.buf_addr, (uint64_t)n * u.cqe_size))
			return -EFAULT;
		int r = mlx5sk_resize_cq(c->dev, o->num, u.buf_addr, n);
		if (r)
			return r;
		o->max_wr = n;
	}
	struct ib_uverbs_resize_cq_resp resp = { .cqe = o->max_wr - 1 };
	return sk_put(cmd->response, &resp, sizeof(resp), room);
}

int sk_destroy_cq(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_destroy_cq *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *o = sk_obj_get(c, cmd->cq_handle, OBJ_CQ);
	if (!o)
		return obj_lookup_err(c, cmd->cq_handle);
	if (o->users)
		return -EBUSY;
	if (o->pd != UINT32_MAX)
		sk_drop_unread_events((int)c->objs[o->pd].num, c->objs[o->pd].peer, sizeof(struct ib_uverbs_comp_event_desc),
				   o->user_handle, 0, &o->comp_events);
	sk_drop_unread_events(c->async_fd, c->async_peer, sizeof(struct ib_uverbs_async_event_desc), o->user_handle,
			   CQ_EVENTS, &o->async_events);
	struct ib_uverbs_destroy_cq_resp resp = { .comp_events_reported = o->comp_events,
						  .async_events_reported = o->async_events };
	int r = sk_put(cmd->response, &resp, sizeof(resp), room);
	if (r)
		return r;
	sk_obj_destroy(c, cmd->cq_handle);
	return 0;
}

int sk_create_qp(struct ctx *c, const struct qp_req *q, const uint8_t *udata, size_t udata_len,
		     struct ib_uverbs_create_qp_resp *resp, struct mlx5_ib_create_qp_resp *drv)
{
	struct mlx5_ib_create_qp u = {0};
	if (udata_len < offsetof(struct mlx5_ib_create_qp, sq_buf_addr))
		return -EFAULT;
	memcpy(&u, udata, udata_len < sizeof(u) ? udata_len : sizeof(u));
	/* MLX5_QP_FLAG_BFREG_INDEX names a register of a dynamic UAR page the
	 * library mapped (thread domains: bfreg_index = page * 2 + register);
	 * MLX5_QP_FLAG_UAR_PAGE_INDEX one the ioctl ABI allocated, which is
	 * never here, so no such page. */
	uint32_t known = MLX5_QP_FLAG_SCATTER_CQE | MLX5_QP_FLAG_ALLOW_SCATTER_CQE | MLX5_QP_FLAG_TYPE_DCI |
			 MLX5_QP_FLAG_TYPE_DCT | MLX5_QP_FLAG_BFREG_INDEX | MLX5_QP_FLAG_UAR_PAGE_INDEX;
	if (u.flags & ~known)
		return -EOPNOTSUPP;
	if (u.flags & MLX5_QP_FLAG_UAR_PAGE_INDEX)
		return -EINVAL;
	if ((u.flags & MLX5_QP_FLAG_BFREG_INDEX) &&
	    (u.bfreg_index / 2 >= DYN_UAR_PAGES || !c->dyn_mapped[u.bfreg_index / 2]))
		return -EINVAL; /* bfregn_to_uar_index: no such dynamic page */
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
		srq = sk_obj_get(c, q->srq_handle, OBJ_SRQ);
		if (!srq || u.rq_wqe_count)
			return -EINVAL;
	}
	struct uobj *pd = sk_obj_get(c, q->pd_handle, OBJ_PD);
	struct uobj *scq = sk_obj_get(c, q->send_cq_handle, OBJ_CQ);
	struct uobj *rcq = sk_obj_get(c, q->recv_cq_handle, OBJ_CQ);
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
		if ((u.buf_addr & 63) || (u.db_addr & 7) || !sk_mapped(u.buf_addr, len) || !sk_mapped(u.db_addr, 8))
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
	uint32_t bfreg, reg;
	if (u.flags & MLX5_QP_FLAG_BFREG_INDEX) {
		bfreg = 0; /* mlx5_ib reports no static bfreg; the library uses its own */
		reg = c->dyn_reg[u.bfreg_index / 2] + u.bfreg_index % 2;
	} else {
		uint32_t span = c->medium_hi - c->medium_lo;
		uint32_t compact = span ? c->medium_lo + c->next_bfreg++ % span : 0;
		bfreg = compact / 2 * 4 + compact % 2;
		reg = c->first_reg[compact / 2] + compact % 2;
	}
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

/*
 * An address vector's source GID as the kernel checks it before the driver
 * sees it (rdma_check_ah_attr, rdma_get_gid_attr): a RoCE port needs a GRH
 * (-EINVAL); a GRH's sgid_index past the 16-entry table is -EINVAL and an
 * empty entry -ENODATA. The device has one GID, at index 0.
 */
static int check_av(const struct mlx5sk_dev *d, int is_global, unsigned sgid_index)
{
	if (d->roce && !is_global)
		return -EINVAL;
	if (!is_global)
		return 0;
	if (sgid_index >= 16)
		return -EINVAL;
	return sgid_index == 0 ? 0 : -ENODATA;
}

int sk_modify_qp(struct ctx *c, const struct ib_uverbs_modify_qp *cmd)
{
	struct uobj *o = sk_obj_get(c, cmd->qp_handle, OBJ_QP);
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
	if ((mask & (1u << 7)) && o->qp_kind < 0x100) {
		struct mlx5sk_dev d;
		int r = mlx5sk_dev_info(c->dev, &d);
		if (r)
			return r;
		r = check_av(&d, cmd->dest.is_global, cmd->dest.sgid_index);
		if (r)
			return r;
	}
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

int sk_query_qp(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_query_qp *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *o = sk_obj_get(c, cmd->qp_handle, OBJ_QP);
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
	return sk_put(cmd->response, &r, sizeof(r), room);
}

int sk_destroy_qp(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_destroy_qp *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *o = sk_obj_get(c, cmd->qp_handle, OBJ_QP);
	if (!o)
		return obj_lookup_err(c, cmd->qp_handle);
	sk_drop_unread_events(c->async_fd, c->async_peer, sizeof(struct ib_uverbs_async_event_desc), o->user_handle,
			   QP_EVENTS, &o->async_events);
	struct ib_uverbs_destroy_qp_resp resp = { .events_reported = o->async_events };
	int r = sk_put(cmd->response, &resp, sizeof(resp), room);
	if (r)
		return r;
	sk_obj_destroy(c, cmd->qp_handle);
	return 0;
}

int sk_create_srq(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
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
	struct uobj *pd = sk_obj_get(c, cmd->pd_handle, OBJ_PD);
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
	if ((u.buf_addr & 63) || (u.db_addr & 3) || !sk_mapped(u.buf_addr, (uint64_t)max * desc) || !sk_mapped(u.db_addr, 4))
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
	r = sk_put2(cmd->response, &core, sizeof(core), &drv, sizeof(drv), room);
	if (r)
		sk_obj_destroy(c, (uint32_t)h);
	return r;
}

int sk_modify_srq(struct ctx *c, const uint8_t *in, size_t in_len)
{
	const struct ib_uverbs_modify_srq *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *o = sk_obj_get(c, cmd->srq_handle, OBJ_SRQ);
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

int sk_query_srq(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_query_srq *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *o = sk_obj_get(c, cmd->srq_handle, OBJ_SRQ);
	if (!o)
		return -EINVAL;
	struct ib_uverbs_query_srq_resp r = { .max_wr = o->max_wr, .max_sge = o->max_sge };
	int e = mlx5sk_srq_limit(c->dev, o->num, &r.srq_limit);
	if (e)
		return e;
	return sk_put(cmd->response, &r, sizeof(r), room);
}

int sk_destroy_srq(struct ctx *c, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_destroy_srq *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *o = sk_obj_get(c, cmd->srq_handle, OBJ_SRQ);
	if (!o)
		return obj_lookup_err(c, cmd->srq_handle);
	if (o->users)
		return -EBUSY;
	sk_drop_unread_events(c->async_fd, c->async_peer, sizeof(struct ib_uverbs_async_event_desc), o->user_handle,
			   SRQ_EVENTS, &o->async_events);
	struct ib_uverbs_destroy_srq_resp resp = { .events_reported = o->async_events };
	int r = sk_put(cmd->response, &resp, sizeof(resp), room);
	if (r)
		return r;
	sk_obj_destroy(c, cmd->srq_handle);
	return 0;
}

/* CREATE_AH: an address handle of the PD. On RoCE the kernel resolves the
 * destination MAC of the GID (mlx5_ib_create_ah_resp.dmac, which libmlx5
 * puts in its address vector): here, the simulated port with that GID;
 * none is EHOSTUNREACH. A RoCE address needs its GRH, and a GRH a source
 * GID the port has (check_av). The address
 * vector itself is the library's: the device keeps nothing of it. */
int sk_create_ah(struct ctx *c, const struct mlx5sk_dev *d, const uint8_t *in, size_t in_len, size_t room)
{
	const struct ib_uverbs_create_ah *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	struct uobj *pd = sk_obj_get(c, cmd->pd_handle, OBJ_PD);
	if (!pd)
		return -EINVAL;
	if (cmd->attr.port_num != 1)
		return -EINVAL;
	struct mlx5_ib_create_ah_resp drv;
	memset(&drv, 0, sizeof(drv));
	drv.response_length = sizeof(drv);
	int r = check_av(d, cmd->attr.is_global, cmd->attr.grh.sgid_index);
	if (r)
		return r;
	if (d->roce) {
		r = mlx5sk_resolve_mac(cmd->attr.grh.dgid, drv.dmac);
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
	r = sk_put2(cmd->response, &core, sizeof(core), &drv, sizeof(drv), room);
	if (r)
		sk_obj_destroy(c, (uint32_t)h);
	return r;
}

int sk_destroy_ah(struct ctx *c, const uint8_t *in, size_t in_len)
{
	const struct ib_uverbs_destroy_ah *cmd = (const void *)in;
	if (in_len < sizeof(*cmd))
		return -EINVAL;
	if (!sk_obj_get(c, cmd->ah_handle, OBJ_AH))
		return obj_lookup_err(c, cmd->ah_handle);
	sk_obj_destroy(c, cmd->ah_handle);
	return 0;
}
