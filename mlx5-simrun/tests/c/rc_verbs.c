/*
 * RC through the unmodified libibverbs and libmlx5, on the emulated device:
 * two QPs, one on mlx5_0 and one on mlx5_1 (or both on mlx5_0 with
 * `same`), connected to each other, then RDMA WRITE, SEND/RECV (with
 * immediate), RDMA READ, fetch-and-add and compare-and-swap, each checked
 * byte for byte in the target memory and by its completion (opcode, status,
 * byte count, immediate). libmlx5 writes every WQE and doorbell; the
 * simulator executes them in this process's memory.
 *
 * Exit 0 when every check holds; otherwise a line on stderr saying which
 * failed, and 1. Usage: rc_verbs [same] [ex] [rate=N] (`ex`: the CQs come
 * from ibv_create_cq_ex and the posts from the ibv_wr_* API; `rate=N`: only
 * N 64-byte WRITEs, timed).
 */
#include "verbs_util.h"
#include <arpa/inet.h>
#include <time.h>

enum { BUF = 8192 };

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_cq_ex *cqx;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	struct ibv_mr *mr;
	uint8_t *buf;
	struct ibv_port_attr port;
	union ibv_gid gid;
};

static int use_ex;

static void open_side(struct side *s, struct ibv_device *dev, struct ibv_context *shared)
{
	s->ctx = shared ? shared : ibv_open_device(dev);
	CHECK(s->ctx, "ibv_open_device failed");
	CHECK(!ibv_query_port(s->ctx, 1, &s->port), "ibv_query_port");
	CHECK(!ibv_query_gid(s->ctx, 1, 0, &s->gid), "ibv_query_gid");
	s->pd = ibv_alloc_pd(s->ctx);
	CHECK(s->pd, "ibv_alloc_pd");
	s->buf = aligned_alloc(4096, BUF);
	CHECK(s->buf, "aligned_alloc");
	memset(s->buf, 0, BUF);
	s->mr = ibv_reg_mr(s->pd, s->buf, BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(s->mr, "ibv_reg_mr");
	CHECK(s->mr->lkey == s->mr->rkey, "lkey %#x rkey %#x", s->mr->lkey, s->mr->rkey);
	if (use_ex) {
		struct ibv_cq_init_attr_ex a = { .cqe = 64, .wc_flags = IBV_WC_STANDARD_FLAGS };
		s->cqx = ibv_create_cq_ex(s->ctx, &a);
		CHECK(s->cqx, "ibv_create_cq_ex");
		s->cq = ibv_cq_ex_to_cq(s->cqx);
	} else {
		s->cq = ibv_create_cq(s->ctx, 64, NULL, NULL, 0);
		CHECK(s->cq, "ibv_create_cq");
	}
	struct ibv_qp_init_attr_ex qa = {
		.send_cq = s->cq,
		.recv_cq = s->cq,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 2, .max_recv_sge = 2,
			 .max_inline_data = 64 },
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = s->pd,
	};
	if (use_ex) {
		qa.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ |
				    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
				    IBV_QP_EX_WITH_SEND_WITH_IMM;
	}
	s->qp = ibv_create_qp_ex(s->ctx, &qa);
	CHECK(s->qp, "ibv_create_qp_ex");
	if (use_ex) {
		s->qpx = ibv_qp_to_qp_ex(s->qp);
		CHECK(s->qpx, "ibv_qp_to_qp_ex");
	}
}

static void connect_to(struct side *s, const struct side *peer)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .pkey_index = 0,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						    IBV_ACCESS_REMOTE_ATOMIC };
	CHECK(!ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qp->qp_num;
	a.rq_psn = 0x123;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.port_num = 1;
	a.ah_attr.dlid = peer->port.lid;
	if (peer->port.link_layer == IBV_LINK_LAYER_ETHERNET) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = peer->gid;
		a.ah_attr.grh.hop_limit = 64;
	}
	CHECK(!ibv_modify_qp(s->qp, &a,
			     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
	      "to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0x123;
	a.max_rd_atomic = 4;
	CHECK(!ibv_modify_qp(s->qp, &a,
			     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				     IBV_QP_MAX_QP_RD_ATOMIC),
	      "to RTS");
	struct ibv_qp_init_attr ia;
	CHECK(!ibv_query_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_CAP, &ia), "ibv_query_qp");
	CHECK(a.qp_state == IBV_QPS_RTS, "state %d", a.qp_state);
	CHECK(a.dest_qp_num == peer->qp->qp_num, "dest_qp_num %#x", a.dest_qp_num);
	CHECK(a.sq_psn == 0x123, "sq_psn %#x", a.sq_psn);
}

/* One completion within 10 s (the engine runs in its own thread). */
static struct ibv_wc poll1(struct side *s)
{
	struct ibv_wc wc;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(s->cq, 1, &wc);
		CHECK(n >= 0, "ibv_poll_cq %d", n);
		if (n == 1)
			return wc;
		clock_gettime(CLOCK_MONOTONIC, &t);
		CHECK(t.tv_sec - t0.tv_sec < 10, "no completion within 10 s");
	}
}

static void expect(struct side *s, uint64_t wr_id, enum ibv_wc_opcode op, uint32_t len)
{
	struct ibv_wc wc = poll1(s);
	CHECK(wc.status == IBV_WC_SUCCESS, "wr_id %llu: status %s", (unsigned long long)wc.wr_id,
	      ibv_wc_status_str(wc.status));
	CHECK(wc.wr_id == wr_id, "wr_id %llu, expected %llu", (unsigned long long)wc.wr_id,
	      (unsigned long long)wr_id);
	CHECK(wc.opcode == op, "wr_id %llu: opcode %d, expected %d", (unsigned long long)wr_id, wc.opcode, op);
	if (op == IBV_WC_RECV || op == IBV_WC_RDMA_READ)
		CHECK(wc.byte_len == len, "wr_id %llu: byte_len %u, expected %u", (unsigned long long)wr_id,
		      wc.byte_len, len);
	if (op == IBV_WC_RECV) {
		CHECK(wc.wc_flags & IBV_WC_WITH_IMM, "no immediate");
		CHECK(ntohl(wc.imm_data) == 0xfeedbeef, "immediate %#x", ntohl(wc.imm_data));
		CHECK(wc.qp_num == s->qp->qp_num, "qp_num %#x", wc.qp_num);
	}
}

static void post(struct side *s, uint64_t wr_id, enum ibv_wr_opcode op, uint32_t off, uint32_t len,
		 const struct side *peer, uint32_t roff, uint64_t compare_add, uint64_t swap)
{
	if (use_ex) {
		struct ibv_qp_ex *q = s->qpx;
		ibv_wr_start(q);
		q->wr_id = wr_id;
		q->wr_flags = IBV_SEND_SIGNALED;
		switch (op) {
		case IBV_WR_RDMA_WRITE:
			ibv_wr_rdma_write(q, peer->mr->rkey, (uintptr_t)peer->buf + roff);
			break;
		case IBV_WR_RDMA_READ:
			ibv_wr_rdma_read(q, peer->mr->rkey, (uintptr_t)peer->buf + roff);
			break;
		case IBV_WR_SEND_WITH_IMM:
			ibv_wr_send_imm(q, htonl(0xfeedbeef));
			break;
		case IBV_WR_ATOMIC_FETCH_AND_ADD:
			ibv_wr_atomic_fetch_add(q, peer->mr->rkey, (uintptr_t)peer->buf + roff, compare_add);
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP:
			ibv_wr_atomic_cmp_swp(q, peer->mr->rkey, (uintptr_t)peer->buf + roff, compare_add, swap);
			break;
		default:
			CHECK(0, "opcode %d", op);
		}
		ibv_wr_set_sge(q, s->mr->lkey, (uintptr_t)s->buf + off, len);
		CHECK(!ibv_wr_complete(q), "ibv_wr_complete");
		return;
	}
	struct ibv_sge sge = { (uintptr_t)s->buf + off, len, s->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	if (op == IBV_WR_SEND_WITH_IMM)
		wr.imm_data = htonl(0xfeedbeef);
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = (uintptr_t)peer->buf + roff;
		wr.wr.atomic.rkey = peer->mr->rkey;
		wr.wr.atomic.compare_add = compare_add;
		wr.wr.atomic.swap = swap;
	} else if (peer) {
		wr.wr.rdma.remote_addr = (uintptr_t)peer->buf + roff;
		wr.wr.rdma.rkey = peer->mr->rkey;
	}
	CHECK(!ibv_post_send(s->qp, &wr, &bad), "ibv_post_send");
}

static void close_side(struct side *s, int close_ctx)
{
	CHECK(!ibv_destroy_qp(s->qp), "ibv_destroy_qp");
	CHECK(!ibv_destroy_cq(s->cq), "ibv_destroy_cq");
	CHECK(!ibv_dereg_mr(s->mr), "ibv_dereg_mr");
	CHECK(!ibv_dealloc_pd(s->pd), "ibv_dealloc_pd");
	free(s->buf);
	if (close_ctx)
		CHECK(!ibv_close_device(s->ctx), "ibv_close_device");
}

/* `rate=N`: N 64-byte RDMA WRITEs a -> b through ibv_post_send, 16 in
 * flight, every 8th signaled; prints the message rate. */
static void rate(struct side *a, struct side *b, long n)
{
	struct timespec t0, t1;
	long posted = 0, done = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (done < n) {
		while (posted < n && posted - done < 16) {
			struct ibv_sge sge = { (uintptr_t)a->buf, 64, a->mr->lkey };
			struct ibv_send_wr wr = { .wr_id = (uint64_t)posted, .sg_list = &sge, .num_sge = 1,
						  .opcode = IBV_WR_RDMA_WRITE,
						  .send_flags = (posted % 8 == 7 || posted == n - 1) ? IBV_SEND_SIGNALED : 0 },
					   *bad;
			wr.wr.rdma.remote_addr = (uintptr_t)b->buf + 1024;
			wr.wr.rdma.rkey = b->mr->rkey;
			CHECK(!ibv_post_send(a->qp, &wr, &bad), "ibv_post_send");
			posted++;
		}
		struct ibv_wc wc[8];
		int k = ibv_poll_cq(a->cq, 8, wc);
		CHECK(k >= 0, "ibv_poll_cq");
		for (int i = 0; i < k; i++) {
			CHECK(wc[i].status == IBV_WC_SUCCESS, "status %s", ibv_wc_status_str(wc[i].status));
			done = (long)wc[i].wr_id + 1;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("rc_verbs: %ld 64-byte RDMA WRITEs posted by libmlx5 in %.3f s: %.3f Mmsg/s\n", n, s, (double)n / s / 1e6);
}

int main(int argc, char **argv)
{
	int same = 0;
	long rate_n = 0;
	for (int i = 1; i < argc; i++) {
		same |= !strcmp(argv[i], "same");
		use_ex |= !strcmp(argv[i], "ex");
		if (!strncmp(argv[i], "rate=", 5))
			rate_n = atol(argv[i] + 5);
	}
	int n;
	struct ibv_device **devs = ibv_get_device_list(&n);
	CHECK(devs && n >= (same ? 1 : 2), "%d devices", n);
	struct side a = {0}, b = {0};
	open_side(&a, devs[0], NULL);
	open_side(&b, devs[same ? 0 : 1], same ? a.ctx : NULL);
	connect_to(&a, &b);
	connect_to(&b, &a);
	if (rate_n > 0) {
		rate(&a, &b, rate_n);
		return 0;
	}

	/* RDMA WRITE of 3000 bytes (three 1024-byte packets) a -> b. */
	for (int i = 0; i < 3000; i++)
		a.buf[i] = (uint8_t)(i * 7 + 1);
	post(&a, 1, IBV_WR_RDMA_WRITE, 0, 3000, &b, 100, 0, 0);
	expect(&a, 1, IBV_WC_RDMA_WRITE, 0);
	CHECK(!memcmp(b.buf + 100, a.buf, 3000), "WRITE: the target bytes differ");
	CHECK(b.buf[99] == 0 && b.buf[3100] == 0, "WRITE: bytes outside the target changed");

	/* SEND with immediate b -> a into a posted receive. */
	struct ibv_sge rsge = { (uintptr_t)a.buf + 4096, 512, a.mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &rsge, .num_sge = 1 }, *rbad;
	CHECK(!ibv_post_recv(a.qp, &rwr, &rbad), "ibv_post_recv");
	memcpy(b.buf + 200, "a message through libmlx5's own WQEs", 37);
	post(&b, 2, IBV_WR_SEND_WITH_IMM, 200, 37, NULL, 0, 0, 0);
	expect(&b, 2, IBV_WC_SEND, 0);
	expect(&a, 7, IBV_WC_RECV, 37);
	CHECK(!memcmp(a.buf + 4096, "a message through libmlx5's own WQEs", 37), "SEND: the received bytes differ");

	/* RDMA READ of 2000 bytes of a into b. */
	post(&b, 3, IBV_WR_RDMA_READ, 6000, 2000, &a, 0, 0, 0);
	expect(&b, 3, IBV_WC_RDMA_READ, 2000);
	CHECK(!memcmp(b.buf + 6000, a.buf, 2000), "READ: the bytes read differ");

	/* Fetch-and-add and compare-and-swap on 8 bytes of b. */
	uint64_t v = 1000;
	memcpy(b.buf + 4000, &v, 8);
	post(&a, 4, IBV_WR_ATOMIC_FETCH_AND_ADD, 5000, 8, &b, 4000, 5, 0);
	expect(&a, 4, IBV_WC_FETCH_ADD, 8);
	uint64_t got;
	memcpy(&got, a.buf + 5000, 8);
	CHECK(got == 1000, "FETCH_ADD returned %llu", (unsigned long long)got);
	memcpy(&got, b.buf + 4000, 8);
	CHECK(got == 1005, "FETCH_ADD left %llu", (unsigned long long)got);
	post(&a, 5, IBV_WR_ATOMIC_CMP_AND_SWP, 5008, 8, &b, 4000, 1005, 42);
	expect(&a, 5, IBV_WC_COMP_SWAP, 8);
	memcpy(&got, a.buf + 5008, 8);
	CHECK(got == 1005, "CMP_SWAP returned %llu", (unsigned long long)got);
	memcpy(&got, b.buf + 4000, 8);
	CHECK(got == 42, "CMP_SWAP left %llu", (unsigned long long)got);

	/* A burst of 20 WRITEs, all completed in order. */
	for (int i = 0; i < 20; i++)
		post(&a, 100 + i, IBV_WR_RDMA_WRITE, i * 8, 8, &b, 7000 + i * 8, 0, 0);
	for (int i = 0; i < 20; i++)
		expect(&a, 100 + i, IBV_WC_RDMA_WRITE, 0);
	CHECK(!memcmp(b.buf + 7000, a.buf, 160), "burst: the target bytes differ");

	close_side(&a, !same);
	close_side(&b, 1);
	ibv_free_device_list(devs);
	printf("rc_verbs: WRITE, SEND with immediate, READ, FETCH_ADD, CMP_SWAP and a burst of 20: all right\n");
	return 0;
}
