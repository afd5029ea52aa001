/*
 * An indirect mkey through the unmodified libibverbs and libmlx5, on the
 * emulated device (run with MLX5_SIM_DEVX=1: a DEVX context): libmlx5
 * creates it (mlx5dv_create_mkey, DEVX CREATE_MKEY) and writes the UMR that
 * gives it three pieces of B's memory (mlx5dv_wr_mr_list); A WRITEs 300 bytes
 * through it from its offset 0 and READs 60 of them back across two pieces.
 *
 * Then a second mkey, created for remote invalidation, gets an interleaved
 * layout (mlx5dv_wr_mr_interleaved: 16 bytes every 64, then 8 every 16, 4
 * times) and A's 96-byte WRITE through it lands at those strides; A's SEND
 * with invalidate of it frees it, and A's next WRITE through it is refused.
 *
 * The UMR WQEs libmlx5 wrote are printed as they lie in the ring, with what
 * they were built from, for tests/verbs.rs to compare with our builder:
 *   wqe mr_list qpn=N idx=I HEX
 *   args mr_list key=K access=A n=N
 *   entry LEN LKEY ADDR        (one line per entry)
 *   wqe mr_interleaved qpn=N idx=I HEX
 *   args mr_interleaved key=K access=A repeat=R
 *   ilv ADDR COUNT SKIP LKEY   (one line per entry)
 * Exit 0 ("all right") when every check holds.
 */
#include "verbs_util.h"
#include <infiniband/mlx5dv.h>

enum { BUF = 16384 };

static struct ibv_cq *cq;

static struct ibv_wc wait_one(void)
{
	struct ibv_wc wc;
	int n;
	for (long i = 0; (n = ibv_poll_cq(cq, 1, &wc)) == 0; i++)
		CHECK(i < 100000000, "no completion");
	CHECK(n == 1, "poll %d", n);
	return wc;
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "no device");
	struct mlx5dv_context_attr dva = { .flags = MLX5DV_CONTEXT_FLAGS_DEVX };
	struct ibv_context *ctx = mlx5dv_open_device(list[0], &dva);
	CHECK(ctx, "mlx5dv_open_device with DEVX: %s (is MLX5_SIM_DEVX set?)", strerror(errno));
	ibv_free_device_list(list);
	struct ibv_port_attr port;
	union ibv_gid gid;
	CHECK(!ibv_query_port(ctx, 1, &port) && !ibv_query_gid(ctx, 1, 0, &gid), "query port");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(pd && cq, "pd, cq");
	uint8_t *abuf = aligned_alloc(4096, BUF), *bbuf = aligned_alloc(4096, BUF);
	CHECK(abuf && bbuf, "aligned_alloc");
	memset(abuf, 0, BUF);
	memset(bbuf, 0, BUF);
	unsigned all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *amr = ibv_reg_mr(pd, abuf, BUF, all), *bmr = ibv_reg_mr(pd, bbuf, BUF, all);
	CHECK(amr && bmr, "ibv_reg_mr");

	struct ibv_qp_init_attr_ex qa = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1,
			 .max_inline_data = 64 },
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_SEND_WITH_INV,
	};
	struct ibv_qp *a = ibv_create_qp_ex(ctx, &qa);
	CHECK(a, "create A: %s", strerror(errno));
	struct mlx5dv_qp_init_attr dq = { .comp_mask = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS,
					  .send_ops_flags = MLX5DV_QP_EX_WITH_MR_LIST };
	struct ibv_qp *b = mlx5dv_create_qp(ctx, &qa, &dq);
	CHECK(b, "mlx5dv_create_qp B: %s", strerror(errno));
	to_rts_with(a, b->qp_num, &port, &gid, all, 1);
	to_rts_with(b, a->qp_num, &port, &gid, all, 1);
	struct mlx5dv_qp dvb;
	struct mlx5dv_obj o = { .qp = { .in = b, .out = &dvb } };
	CHECK(!mlx5dv_init_obj(&o, MLX5DV_OBJ_QP), "mlx5dv_init_obj");

	struct mlx5dv_mkey_init_attr mi = { .pd = pd, .create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT,
					    .max_entries = 3 };
	struct mlx5dv_mkey *mk = mlx5dv_create_mkey(&mi);
	CHECK(mk, "mlx5dv_create_mkey: %s", strerror(errno));
	CHECK(mk->lkey == mk->rkey, "lkey %#x rkey %#x", mk->lkey, mk->rkey);

	/* Three pieces of B's memory, out of order: 100 bytes at 0x3000, 28 at
	 * 0x1000, 200 at 0x2000. */
	struct ibv_sge pieces[3] = {
		{ (uintptr_t)bbuf + 0x3000, 100, bmr->lkey },
		{ (uintptr_t)bbuf + 0x1000, 28, bmr->lkey },
		{ (uintptr_t)bbuf + 0x2000, 200, bmr->lkey },
	};
	struct ibv_qp_ex *bx = ibv_qp_to_qp_ex(b);
	struct mlx5dv_qp_ex *bdv = mlx5dv_qp_ex_from_ibv_qp_ex(bx);
	ibv_wr_start(bx);
	bx->wr_id = 1;
	bx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	mlx5dv_wr_mr_list(bdv, mk, all, 3, pieces);
	CHECK(!ibv_wr_complete(bx), "mr_list: %s", strerror(errno));
	struct ibv_wc wc = wait_one();
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1, "mr_list: %s", ibv_wc_status_str(wc.status));
	const uint8_t *ring = dvb.sq.buf;
	unsigned ds = ring[7] & 0x3f;
	printf("wqe mr_list qpn=%u idx=0 ", b->qp_num);
	for (unsigned i = 0; i < ds * 16; i++)
		printf("%02x", ring[i % (dvb.sq.wqe_cnt * 64)]);
	printf("\nargs mr_list key=%u access=%u n=3\n", mk->lkey, all);
	for (int i = 0; i < 3; i++)
		printf("entry %u %u %lu\n", pieces[i].length, pieces[i].lkey, (unsigned long)pieces[i].addr);

	/* A's WRITE of 300 bytes at the mkey's offset 0, then a READ of 60 bytes at
	 * offset 90 (the end of piece 0, all of piece 1, the start of piece 2). */
	for (int i = 0; i < 300; i++)
		abuf[i] = (uint8_t)(i * 7 + 3);
	struct ibv_qp_ex *ax = ibv_qp_to_qp_ex(a);
	ibv_wr_start(ax);
	ax->wr_id = 2;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(ax, mk->rkey, 0);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf, 300);
	CHECK(!ibv_wr_complete(ax), "write");
	wc = wait_one();
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 2, "write: %s", ibv_wc_status_str(wc.status));
	CHECK(!memcmp(bbuf + 0x3000, abuf, 100) && !memcmp(bbuf + 0x1000, abuf + 100, 28) &&
		      !memcmp(bbuf + 0x2000, abuf + 128, 172),
	      "the WRITE did not land in the pieces");
	CHECK(bbuf[0x2000 + 172] == 0, "written past the 300 bytes");
	ibv_wr_start(ax);
	ax->wr_id = 3;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(ax, mk->rkey, 90);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf + 0x1000, 60);
	CHECK(!ibv_wr_complete(ax), "read");
	wc = wait_one();
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 3, "read: %s", ibv_wc_status_str(wc.status));
	CHECK(!memcmp(abuf + 0x1000, abuf + 90, 60), "the READ across pieces");
	CHECK(!mlx5dv_destroy_mkey(mk), "mlx5dv_destroy_mkey");

	/* An interleaved mkey: 16 bytes every 64 from 0x1000, then 8 every 16 from
	 * 0x2800, 4 repetitions (96 bytes). The UMR is B's second WQE: the first
	 * took WQEBBs 0 to 2. */
	struct mlx5dv_mkey_init_attr mi2 = {
		.pd = pd,
		.create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT | MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE,
		.max_entries = 3
	};
	struct mlx5dv_mkey *mk2 = mlx5dv_create_mkey(&mi2);
	CHECK(mk2, "mlx5dv_create_mkey: %s", strerror(errno));
	memset(bbuf, 0, BUF);
	struct mlx5dv_mr_interleaved il[2] = {
		{ (uintptr_t)bbuf + 0x1000, 16, 48, bmr->lkey },
		{ (uintptr_t)bbuf + 0x2800, 8, 8, bmr->lkey },
	};
	ibv_wr_start(bx);
	bx->wr_id = 4;
	bx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	mlx5dv_wr_mr_interleaved(bdv, mk2, all, 4, 2, il);
	CHECK(!ibv_wr_complete(bx), "mr_interleaved: %s", strerror(errno));
	wc = wait_one();
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 4, "mr_interleaved: %s", ibv_wc_status_str(wc.status));
	unsigned at = ((ds + 3) / 4) * 64;
	ds = ring[at + 7] & 0x3f;
	printf("wqe mr_interleaved qpn=%u idx=%u ", b->qp_num, at / 64);
	for (unsigned i = 0; i < ds * 16; i++)
		printf("%02x", ring[(at + i) % (dvb.sq.wqe_cnt * 64)]);
	printf("\nargs mr_interleaved key=%u access=%u repeat=4\n", mk2->lkey, all);
	for (int i = 0; i < 2; i++)
		printf("ilv %lu %u %u %u\n", (unsigned long)il[i].addr, il[i].bytes_count, il[i].bytes_skip, il[i].lkey);
	ibv_wr_start(ax);
	ax->wr_id = 5;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(ax, mk2->rkey, 0);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf, 96);
	CHECK(!ibv_wr_complete(ax), "write");
	wc = wait_one();
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 5, "write: %s", ibv_wc_status_str(wc.status));
	for (int r = 0; r < 4; r++) {
		CHECK(!memcmp(bbuf + 0x1000 + 64 * r, abuf + 24 * r, 16), "repetition %d, entry 0", r);
		CHECK(!memcmp(bbuf + 0x2800 + 16 * r, abuf + 24 * r + 16, 8), "repetition %d, entry 1", r);
		CHECK(bbuf[0x1000 + 64 * r + 16] == 0, "a skipped byte was written");
	}
	/* A's SEND with invalidate of the interleaved mkey (created for remote
	 * invalidation) frees it; A's next WRITE through it is refused. */
	struct ibv_sge rs = { (uintptr_t)bbuf + 0x3800, 64, bmr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 40, .sg_list = &rs, .num_sge = 1 }, *bad;
	CHECK(!ibv_post_recv(b, &rw, &bad), "post_recv");
	ibv_wr_start(ax);
	ax->wr_id = 6;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_inv(ax, mk2->rkey);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf, 8);
	CHECK(!ibv_wr_complete(ax), "send_inv");
	struct ibv_wc w1 = wait_one(), w2 = wait_one();
	struct ibv_wc *rcv = w1.wr_id == 40 ? &w1 : &w2;
	CHECK(w1.status == IBV_WC_SUCCESS && w2.status == IBV_WC_SUCCESS, "send_inv: %s %s",
	      ibv_wc_status_str(w1.status), ibv_wc_status_str(w2.status));
	CHECK((rcv->wc_flags & IBV_WC_WITH_INV) && rcv->invalidated_rkey == mk2->rkey, "invalidated rkey %#x",
	      rcv->invalidated_rkey);
	memset(bbuf + 0x1000, 0, 16);
	ibv_wr_start(ax);
	ax->wr_id = 7;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(ax, mk2->rkey, 0);
	ibv_wr_set_sge(ax, amr->lkey, (uintptr_t)abuf, 16);
	CHECK(!ibv_wr_complete(ax), "write");
	wc = wait_one();
	CHECK(wc.wr_id == 7 && wc.status == IBV_WC_REM_ACCESS_ERR, "after invalidation: %s", ibv_wc_status_str(wc.status));
	CHECK(bbuf[0x1000] == 0, "the invalidated mkey was written");
	CHECK(!mlx5dv_destroy_mkey(mk2), "mlx5dv_destroy_mkey");
	printf("all right\n");
	return 0;
}
