/*
 * An SRQ's limit through the unmodified libibverbs and libmlx5 on the
 * emulated device: ibv_modify_srq arms it, SENDs consume receives until
 * fewer are posted than the limit, and IBV_EVENT_SRQ_LIMIT_REACHED naming
 * the SRQ arrives on the async fd (ibv_get_async_event), once;
 * ibv_query_srq then reports the limit disarmed. A limit of the SRQ's size
 * or more is refused. Exit 0 when every check holds.
 */
#include "verbs_util.h"
#include <poll.h>

static void send_one(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *mr)
{
	struct ibv_sge sge = { (uintptr_t)mr->addr, 16, mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	CHECK(!ibv_post_send(qp, &wr, &bad), "post_send");
	struct ibv_wc wc;
	int n, spins = 0;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		CHECK(++spins < 100000000, "no completion");
	CHECK(n == 1 && wc.status == IBV_WC_SUCCESS, "send status %d", wc.status);
}

/* An async event within `ms`, or none (-1). */
static int next_event(struct ibv_context *ctx, int ms, struct ibv_async_event *ev)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	if (poll(&p, 1, ms) != 1)
		return -1;
	CHECK(!ibv_get_async_event(ctx, ev), "ibv_get_async_event");
	return 0;
}

int main(void)
{
	int n;
	struct ibv_device **devs = ibv_get_device_list(&n);
	CHECK(devs && n >= 1, "no device");
	struct ibv_context *ctx = ibv_open_device(devs[0]);
	CHECK(ctx, "open");
	struct ibv_port_attr port;
	union ibv_gid gid;
	CHECK(!ibv_query_port(ctx, 1, &port) && !ibv_query_gid(ctx, 1, 0, &gid), "query_port");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);  /* a's sends */
	struct ibv_cq *rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0); /* b's receives */
	char *buf = aligned_alloc(4096, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 7, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(pd && cq && rcq && mr && srq, "objects");
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
						.max_recv_sge = 1 } };
	struct ibv_qp *a = ibv_create_qp(pd, &qa);
	qa.srq = srq;
	qa.cap.max_recv_wr = 0;
	qa.send_cq = qa.recv_cq = rcq;
	struct ibv_qp *b = ibv_create_qp(pd, &qa);
	CHECK(a && b, "QPs");
	to_rts(a, b->qp_num, &port, &gid);
	to_rts(b, a->qp_num, &port, &gid);

	for (int i = 0; i < 4; i++) {
		struct ibv_sge sge = { (uintptr_t)buf + 1024 + 64 * i, 64, mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;
		CHECK(!ibv_post_srq_recv(srq, &wr, &bad), "post_srq_recv");
	}
	struct ibv_srq_attr attr = { .srq_limit = 1000 };
	CHECK(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT), "a limit above the SRQ's size is refused");
	attr.srq_limit = 3;
	CHECK(!ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT), "ibv_modify_srq");
	CHECK(!ibv_query_srq(srq, &attr) && attr.srq_limit == 3, "armed limit %u", attr.srq_limit);

	struct ibv_async_event ev;
	send_one(a, cq, mr);
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(rcq, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "receive 1");
	CHECK(next_event(ctx, 200, &ev) < 0, "an event with 3 receives still posted");
	send_one(a, cq, mr);
	CHECK(ibv_poll_cq(rcq, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "receive 2");
	CHECK(!next_event(ctx, 5000, &ev), "no SRQ limit event");
	CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED, "event %d", ev.event_type);
	CHECK(ev.element.srq == srq, "the event names another SRQ");
	ibv_ack_async_event(&ev);
	CHECK(!ibv_query_srq(srq, &attr) && attr.srq_limit == 0, "disarmed: limit %u", attr.srq_limit);
	send_one(a, cq, mr);
	CHECK(ibv_poll_cq(rcq, 1, &wc) == 1, "receive 3");
	CHECK(next_event(ctx, 200, &ev) < 0, "a second event");

	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b), "destroy QPs");
	CHECK(!ibv_destroy_srq(srq), "destroy SRQ");
	CHECK(!ibv_dereg_mr(mr) && !ibv_destroy_cq(cq) && !ibv_destroy_cq(rcq) && !ibv_dealloc_pd(pd), "destroy");
	CHECK(!ibv_close_device(ctx), "close");
	ibv_free_device_list(devs);
	free(buf);
	printf("srq_limit: armed, fired once below the limit, disarmed, refused above the size: all right\n");
	return 0;
}
