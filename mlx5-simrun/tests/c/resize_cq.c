/*
 * ibv_resize_cq through the unmodified libibverbs and libmlx5 on the
 * emulated device: libmlx5 allocates the new ring, the kernel's RESIZE_CQ
 * moves the CQ there, the simulator ends the old ring with a RESIZE CQE
 * and libmlx5 copies the unpolled completions across: they are polled in
 * order after the resize, and later ones arrive in the new ring. Growing
 * with CQEs unpolled, shrinking, the same size again (nothing to do), and
 * shrinking below what is unpolled (EINVAL, the CQ unharmed). Exit 0 when
 * every check holds.
 */
#include "verbs_util.h"

static struct ibv_qp *qp;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static uint64_t next_id, polled_id;

/* `n` signalled WRITEs. (The device executes the doorbells rung before a
 * RESIZE_CQ first, so their CQEs are unpolled when it resizes.) */
static void post(int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge sge = { (uintptr_t)mr->addr, 8, mr->lkey };
		struct ibv_send_wr wr = { .wr_id = next_id++, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		wr.wr.rdma.remote_addr = (uintptr_t)mr->addr + 64;
		wr.wr.rdma.rkey = mr->rkey;
		CHECK(!ibv_post_send(qp, &wr, &bad), "post_send");
	}
}

/* Polls `n` completions, in order of posting. */
static void poll_n(int n)
{
	for (int got = 0; got < n;) {
		struct ibv_wc wc;
		int r;
		for (long k = 0; (r = ibv_poll_cq(cq, 1, &wc)) == 0; k++)
			CHECK(k < 100000000, "completion %lu missing", (unsigned long)polled_id);
		CHECK(r == 1 && wc.status == IBV_WC_SUCCESS, "poll: %d %s", r, ibv_wc_status_str(wc.status));
		CHECK(wc.wr_id == polled_id, "wr_id %lu, expected %lu", (unsigned long)wc.wr_id,
		      (unsigned long)polled_id);
		polled_id++;
		got++;
	}
}

int main(void)
{
	struct ibv_port_attr port;
	union ibv_gid gid;
	struct ibv_context *ctx = open_first(&port, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	mr = ibv_reg_mr(pd, calloc(1, 4096), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	cq = ibv_create_cq(ctx, 3, NULL, NULL, 0);
	struct ibv_cq *pcq = ibv_create_cq(ctx, 3, NULL, NULL, 0);
	CHECK(pd && mr && cq && pcq, "objects");
	CHECK(cq->cqe == 3, "cqe %d", cq->cqe);
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .cap = { 32, 1, 1, 1, 0 },
				       .qp_type = IBV_QPT_RC };
	qp = ibv_create_qp(pd, &qa);
	qa.send_cq = qa.recv_cq = pcq;
	struct ibv_qp *peer = ibv_create_qp(pd, &qa);
	CHECK(qp && peer, "qps");
	to_rts(qp, peer->qp_num, &port, &gid);
	to_rts(peer, qp->qp_num, &port, &gid);

	/* Grow from 4 to 16 entries with two CQEs unpolled (and one polled). */
	post(3);
	poll_n(1);
	CHECK(!ibv_resize_cq(cq, 15), "grow: %d", errno);
	CHECK(cq->cqe == 15, "cqe after growing %d", cq->cqe);
	poll_n(2);
	post(12);
	poll_n(12);

	/* The same size: nothing to do. */
	CHECK(!ibv_resize_cq(cq, 9) && cq->cqe == 15, "same size: cqe %d", cq->cqe);

	/* Shrink below what is unpolled: EINVAL, and the CQ goes on. */
	post(3);
	int e = ibv_resize_cq(cq, 1);
	CHECK(e == EINVAL, "shrink below 3 unpolled: %d", e);
	CHECK(cq->cqe == 15, "cqe after the refusal %d", cq->cqe);
	poll_n(3);

	/* Shrink with one unpolled, then fill the small ring across its laps. */
	post(1);
	CHECK(!ibv_resize_cq(cq, 1), "shrink: %d", errno);
	CHECK(cq->cqe == 1, "cqe after shrinking %d", cq->cqe);
	poll_n(1);
	for (int lap = 0; lap < 5; lap++) {
		post(2);
		poll_n(2);
	}

	CHECK(!ibv_destroy_qp(qp) && !ibv_destroy_qp(peer), "destroy qp");
	CHECK(!ibv_destroy_cq(cq) && !ibv_destroy_cq(pcq), "destroy cq");
	void *buf = mr->addr;
	CHECK(!ibv_dereg_mr(mr) && !ibv_dealloc_pd(pd) && !ibv_close_device(ctx), "close");
	free(buf);
	printf("resize_cq: all right\n");
	return 0;
}
