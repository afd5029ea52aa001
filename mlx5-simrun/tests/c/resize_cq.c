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
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                                                   \
	do {                                                                                               \
		if (!(cond)) {                                                                             \
			fprintf(stderr, "resize_cq: line %d: ", __LINE__);                                 \
			fprintf(stderr, __VA_ARGS__);                                                      \
			fprintf(stderr, "\n");                                                             \
			exit(1);                                                                           \
		}                                                                                          \
	} while (0)

static struct ibv_qp *qp;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static uint64_t next_id, polled_id;

static void to_rts(struct ibv_qp *q, uint32_t dest, struct ibv_port_attr *port, union ibv_gid *gid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	CHECK(!ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), "INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.min_rnr_timer = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.dlid = port->lid;
	if (port->link_layer == IBV_LINK_LAYER_ETHERNET) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = *gid;
		a.ah_attr.grh.hop_limit = 64;
	}
	CHECK(!ibv_modify_qp(q, &a,
			     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
	      "RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	CHECK(!ibv_modify_qp(q, &a,
			     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				     IBV_QP_MAX_QP_RD_ATOMIC),
	      "RTS");
}

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
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open");
	struct ibv_port_attr port;
	union ibv_gid gid;
	CHECK(!ibv_query_port(ctx, 1, &port) && !ibv_query_gid(ctx, 1, 0, &gid), "query");
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
	ibv_free_device_list(list);
	printf("resize_cq: all right\n");
	return 0;
}
