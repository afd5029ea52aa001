/*
 * Memory windows through the unmodified libibverbs and libmlx5, on the
 * emulated device: libmlx5's own writer builds the UMR WQEs (ibv_wr_bind_mw,
 * ibv_wr_local_inv, ibv_bind_mw for a type-1 window) and the SEND with
 * invalidate (ibv_wr_send_inv); the simulator carries them out. Two RC QPs
 * of one device, connected to each other: B owns the windows over its
 * memory, A uses them.
 *
 * Each WQE libmlx5 wrote is printed as it lies in the ring, with what it was
 * built from, for tests/verbs.rs to compare with the bytes our builders write:
 *   wqe NAME qpn=N idx=I HEX
 *   args NAME kind=K rkey=R new=N lkey=L addr=A len=N access=F
 * Exit 0 ("all right") when every check holds.
 */
#include "verbs_util.h"
#include <infiniband/mlx5dv.h>

enum { BUF = 8192 };

struct q {
	struct ibv_qp *qp;
	struct ibv_qp_ex *x;
	struct mlx5dv_qp dv;
	unsigned idx; /* WQEBB counter of the next WQE */
};

static struct ibv_cq *cq;

static void make(struct q *q, struct ibv_context *ctx, struct ibv_pd *pd)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_SEND |
				  IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV,
	};
	q->qp = ibv_create_qp_ex(ctx, &a);
	CHECK(q->qp, "ibv_create_qp_ex: %s", strerror(errno));
	q->x = ibv_qp_to_qp_ex(q->qp);
	struct mlx5dv_obj o = { .qp = { .in = q->qp, .out = &q->dv } };
	CHECK(!mlx5dv_init_obj(&o, MLX5DV_OBJ_QP), "mlx5dv_init_obj");
	CHECK(q->dv.sq.stride == 64, "stride %u", q->dv.sq.stride);
}

/* The WQE libmlx5 wrote last on `q`, as it lies in the ring (from WQEBB
 * `q->idx`, wrapping), then the counter moves past it. */
static void dump(const char *name, struct q *q)
{
	const uint8_t *ring = q->dv.sq.buf;
	size_t size = (size_t)q->dv.sq.wqe_cnt * 64;
	size_t at = (size_t)(q->idx % q->dv.sq.wqe_cnt) * 64;
	unsigned ds = ring[at + 7] & 0x3f;
	printf("wqe %s qpn=%u idx=%u ", name, q->qp->qp_num, q->idx);
	for (unsigned i = 0; i < ds * 16; i++)
		printf("%02x", ring[(at + i) % size]);
	printf("\n");
	q->idx += (ds + 3) / 4;
}

static struct ibv_wc wait_one(void)
{
	struct ibv_wc wc;
	int n;
	for (long i = 0; (n = ibv_poll_cq(cq, 1, &wc)) == 0; i++)
		CHECK(i < 100000000, "no completion");
	CHECK(n == 1, "poll %d", n);
	return wc;
}

static void ok(uint64_t wr_id, enum ibv_wc_opcode op)
{
	struct ibv_wc wc = wait_one();
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == wr_id && wc.opcode == op,
	      "wr %lu: status %s opcode %d (want wr %lu opcode %d)", (unsigned long)wc.wr_id,
	      ibv_wc_status_str(wc.status), wc.opcode, (unsigned long)wr_id, op);
}

static void bind2(struct q *b, struct ibv_mw *mw, uint32_t rkey, uint32_t new, struct ibv_mr *mr, uint64_t addr,
		  uint32_t len, unsigned access, const char *name)
{
	struct ibv_mw_bind_info bi = { .mr = mr, .addr = addr, .length = len, .mw_access_flags = access };
	mw->rkey = rkey;
	ibv_wr_start(b->x);
	b->x->wr_id = 10;
	b->x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(b->x, mw, new, &bi);
	CHECK(!ibv_wr_complete(b->x), "bind");
	ok(10, IBV_WC_BIND_MW);
	dump(name, b);
	printf("args %s kind=2 rkey=%u new=%u lkey=%u addr=%lu len=%u access=%u\n", name, rkey, new, mr->lkey,
	       (unsigned long)addr, len, access);
}

static void rdma(struct q *a, int write, uint64_t wr_id, struct ibv_mr *mr, uint32_t off, uint32_t len,
		 uint32_t rkey, uint64_t raddr)
{
	ibv_wr_start(a->x);
	a->x->wr_id = wr_id;
	a->x->wr_flags = IBV_SEND_SIGNALED;
	if (write)
		ibv_wr_rdma_write(a->x, rkey, raddr);
	else
		ibv_wr_rdma_read(a->x, rkey, raddr);
	ibv_wr_set_sge(a->x, mr->lkey, (uintptr_t)mr->addr + off, len);
	CHECK(!ibv_wr_complete(a->x), "post");
	a->idx += 1;
}

int main(void)
{
	struct ibv_port_attr port;
	union ibv_gid gid;
	struct ibv_context *ctx = open_first(&port, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq");
	uint8_t *abuf = aligned_alloc(4096, BUF), *bbuf = aligned_alloc(4096, BUF);
	CHECK(abuf && bbuf, "aligned_alloc");
	memset(abuf, 0, BUF);
	memset(bbuf, 0, BUF);
	unsigned all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *amr = ibv_reg_mr(pd, abuf, BUF, all);
	struct ibv_mr *bmr = ibv_reg_mr(pd, bbuf, BUF, all | IBV_ACCESS_MW_BIND);
	CHECK(amr && bmr, "ibv_reg_mr: %s", strerror(errno));
	struct q a = { 0 }, b = { 0 };
	make(&a, ctx, pd);
	make(&b, ctx, pd);
	to_rts_with(a.qp, b.qp->qp_num, &port, &gid, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 1);
	to_rts_with(b.qp, a.qp->qp_num, &port, &gid, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 1);

	/* 1. A type-2 window over B's [0x100, 0x300), WRITE and READ rights. */
	struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw2, "ibv_alloc_mw type 2: %s", strerror(errno));
	uint32_t rkey = mw2->rkey, r1 = ibv_inc_rkey(rkey);
	bind2(&b, mw2, rkey, r1, bmr, (uintptr_t)bbuf + 0x100, 0x200, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	      "bind2");
	for (int i = 0; i < 64; i++)
		abuf[i] = (uint8_t)(i * 7 + 1);
	rdma(&a, 1, 1, amr, 0, 64, r1, (uintptr_t)bbuf + 0x100);
	ok(1, IBV_WC_RDMA_WRITE);
	CHECK(!memcmp(bbuf + 0x100, abuf, 64), "WRITE through the window");

	/* 2. LOCAL_INV on B: the WQE after a UMR, as libmlx5 writes it. */
	ibv_wr_start(b.x);
	b.x->wr_id = 11;
	b.x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_local_inv(b.x, r1);
	CHECK(!ibv_wr_complete(b.x), "local_inv");
	ok(11, IBV_WC_LOCAL_INV);
	dump("local_inv", &b);
	printf("args local_inv kind=2 rkey=%u new=0 lkey=0 addr=0 len=0 access=0\n", r1);

	/* 3. Bound again under the next key; A's SEND with invalidate frees it. */
	uint32_t r2 = ibv_inc_rkey(r1);
	bind2(&b, mw2, r1, r2, bmr, (uintptr_t)bbuf + 0x100, 0x200, IBV_ACCESS_REMOTE_WRITE, "rebind2");
	struct ibv_sge rs = { .addr = (uintptr_t)bbuf + 0x1000, .length = 256, .lkey = bmr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 20, .sg_list = &rs, .num_sge = 1 }, *bad;
	CHECK(!ibv_post_recv(b.qp, &rw, &bad), "post_recv");
	ibv_wr_start(a.x);
	a.x->wr_id = 2;
	a.x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_inv(a.x, r2);
	ibv_wr_set_sge(a.x, amr->lkey, (uintptr_t)abuf, 32);
	CHECK(!ibv_wr_complete(a.x), "send_inv");
	struct ibv_wc w1 = wait_one(), w2 = wait_one();
	struct ibv_wc *sw = w1.wr_id == 2 ? &w1 : &w2, *rwc = w1.wr_id == 2 ? &w2 : &w1;
	CHECK(sw->status == IBV_WC_SUCCESS && sw->opcode == IBV_WC_SEND, "send_inv: %s", ibv_wc_status_str(sw->status));
	CHECK(rwc->status == IBV_WC_SUCCESS && rwc->wr_id == 20 && (rwc->wc_flags & IBV_WC_WITH_INV) &&
		      rwc->invalidated_rkey == r2,
	      "recv: %s flags %#x rkey %#x", ibv_wc_status_str(rwc->status), rwc->wc_flags, rwc->invalidated_rkey);
	dump("send_inv", &a);
	printf("args send_inv kind=0 rkey=%u new=0 lkey=%u addr=%lu len=32 access=0\n", r2, amr->lkey,
	       (unsigned long)(uintptr_t)abuf);

	/* 4. A type-1 window bound with ibv_bind_mw (which moves its rkey). */
	struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	CHECK(mw1, "ibv_alloc_mw type 1: %s", strerror(errno));
	uint32_t old1 = mw1->rkey;
	memset(bbuf + 0x400, 0x5a, 0x100);
	struct ibv_mw_bind mb = { .wr_id = 12, .send_flags = IBV_SEND_SIGNALED,
				  .bind_info = { .mr = bmr, .addr = (uintptr_t)bbuf + 0x400, .length = 0x100,
						 .mw_access_flags = IBV_ACCESS_REMOTE_READ } };
	CHECK(!ibv_bind_mw(b.qp, mw1, &mb), "ibv_bind_mw: %s", strerror(errno));
	CHECK(mw1->rkey == ibv_inc_rkey(old1), "rkey %#x after %#x", mw1->rkey, old1);
	ok(12, IBV_WC_BIND_MW);
	dump("bind1", &b);
	printf("args bind1 kind=1 rkey=%u new=%u lkey=%u addr=%lu len=256 access=%u\n", old1, mw1->rkey, bmr->lkey,
	       (unsigned long)(uintptr_t)(bbuf + 0x400), (unsigned)IBV_ACCESS_REMOTE_READ);
	rdma(&a, 0, 3, amr, 0x800, 0x100, mw1->rkey, (uintptr_t)bbuf + 0x400);
	ok(3, IBV_WC_RDMA_READ);
	CHECK(!memcmp(abuf + 0x800, bbuf + 0x400, 0x100), "READ through the type-1 window");

	/* 5. The invalidated key writes nothing. */
	memset(abuf, 0xee, 16);
	rdma(&a, 1, 4, amr, 0, 16, r2, (uintptr_t)bbuf + 0x100);
	struct ibv_wc e = wait_one();
	CHECK(e.wr_id == 4 && e.status == IBV_WC_REM_ACCESS_ERR, "after SEND_INV: %s", ibv_wc_status_str(e.status));
	CHECK(bbuf[0x100] != 0xee, "the invalidated window was written");
	printf("all right\n");
	return 0;
}
