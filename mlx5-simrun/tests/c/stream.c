/*
 * An RC stream between two processes on one device (step 12: the UDP wire,
 * exactly once under noise). Run as `stream server N` and `stream client N`
 * under mlx5_simrun --shared: each prints "qpn rkey addr" and reads its
 * peer's line from stdin, then:
 *
 * - the client, N times: RDMA WRITE of 4 KiB (four packets at MTU 1024) with
 *   pattern i into slot i % 16 of the server's buffer; FETCH_AND_ADD 1 on the
 *   server's counter, whose original value must be i (executed once each, never
 *   again on a duplicate); RDMA READ of the slot back, which must be pattern
 *   i; SEND with immediate i carrying i. Then "ok N".
 * - the server takes the N receives in order, each with immediate i and
 *   payload i, and then finds the counter at N and every slot holding the
 *   pattern of the last write to it. Then "ok N".
 *
 * Any difference exits 1 with the reason. After "ok N" the program stays, its
 * device's endpoint with it, until its stdin closes.
 */
#include "verbs_util.h"

#include <arpa/inet.h>
#include <inttypes.h>

enum { SLOT = 4096, SLOTS = 16, COUNTER = SLOTS * SLOT, BUF = COUNTER + 64, DEPTH = 100, RECV = 16 * DEPTH };

static void pattern(uint8_t *p, uint32_t i)
{
	for (int k = 0; k < SLOT; k++)
		p[k] = (uint8_t)(i * 7 + k);
}

static struct ibv_wc wait_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	CHECK(n == 1, "poll_cq");
	CHECK(wc.status == IBV_WC_SUCCESS, "wr_id %" PRIu64 ": %s", wc.wr_id, ibv_wc_status_str(wc.status));
	return wc;
}

int main(int argc, char **argv)
{
	CHECK(argc == 3, "usage: stream server|client N");
	int server = !strcmp(argv[1], "server");
	uint32_t n = (uint32_t)atoi(argv[2]);
	struct ibv_port_attr port;
	union ibv_gid gid;
	struct ibv_context *ctx = open_first(&port, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "pd");
	uint8_t *buf = aligned_alloc(4096, BUF + RECV + 4096);
	CHECK(buf, "alloc");
	memset(buf, 0, BUF + RECV + 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, BUF + RECV + 4096,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					       IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(mr, "mr");
	struct ibv_cq *cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	CHECK(cq, "cq");
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 16, .max_recv_wr = 128, .max_send_sge = 1,
						.max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK(qp, "qp");
	printf("%u %u %" PRIu64 "\n", qp->qp_num, mr->rkey, (uint64_t)(uintptr_t)buf);
	fflush(stdout);
	uint32_t dest, rkey;
	uint64_t raddr;
	CHECK(scanf("%u %u %" SCNu64, &dest, &rkey, &raddr) == 3, "peer's line");
	to_rts_with(qp, dest, &port, &gid,
		    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC, 4);

	uint8_t *recvbuf = buf + BUF, *local = buf + BUF + RECV;
	if (server) {
		uint32_t posted = 0, got = 0;
		/* Each receive its own 16 bytes (a receive is read after later ones may have landed). */
		for (; posted < n && posted < DEPTH; posted++) {
			struct ibv_sge s = { .addr = (uintptr_t)(recvbuf + posted % DEPTH * 16), .length = 16,
					     .lkey = mr->lkey };
			struct ibv_recv_wr w = { .wr_id = posted, .sg_list = &s, .num_sge = 1 }, *bad;
			CHECK(!ibv_post_recv(qp, &w, &bad), "post_recv");
		}
		for (; got < n; got++) {
			struct ibv_wc wc = wait_one(cq);
			CHECK(wc.opcode == IBV_WC_RECV && (wc.wc_flags & IBV_WC_WITH_IMM), "receive %u: opcode %d", got,
			      wc.opcode);
			CHECK(ntohl(wc.imm_data) == got, "receive %u has immediate %u (a message lost or twice)", got,
			      ntohl(wc.imm_data));
			uint32_t seq;
			memcpy(&seq, recvbuf + wc.wr_id % DEPTH * 16, 4);
			CHECK(wc.byte_len == 4 && seq == got, "receive %u carries %u", got, seq);
			if (posted < n) {
				struct ibv_sge s = { .addr = (uintptr_t)(recvbuf + posted % DEPTH * 16), .length = 16,
						     .lkey = mr->lkey };
				struct ibv_recv_wr w = { .wr_id = posted++, .sg_list = &s, .num_sge = 1 }, *bad;
				CHECK(!ibv_post_recv(qp, &w, &bad), "post_recv");
			}
		}
		uint64_t counter;
		memcpy(&counter, buf + COUNTER, 8);
		CHECK(counter == n, "counter %" PRIu64 " after %u fetch-and-adds", counter, n);
		uint8_t want[SLOT];
		for (uint32_t s = 0; s < SLOTS && s < n; s++) {
			uint32_t last = s + (n - 1 - s) / SLOTS * SLOTS;
			pattern(want, last);
			CHECK(!memcmp(buf + s * SLOT, want, SLOT), "slot %u is not write %u's", s, last);
		}
	} else {
		uint8_t *src = malloc(SLOT);
		struct ibv_mr *smr = ibv_reg_mr(pd, src, SLOT, IBV_ACCESS_LOCAL_WRITE);
		CHECK(src && smr, "source");
		for (uint32_t i = 0; i < n; i++) {
			uint32_t slot = i % SLOTS;
			pattern(src, i);
			struct ibv_sge ws = { .addr = (uintptr_t)src, .length = SLOT, .lkey = smr->lkey };
			struct ibv_send_wr w = { .wr_id = 4 * i, .sg_list = &ws, .num_sge = 1,
						 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
			w.wr.rdma.remote_addr = raddr + slot * SLOT;
			w.wr.rdma.rkey = rkey;
			CHECK(!ibv_post_send(qp, &w, &bad), "write");
			wait_one(cq);

			struct ibv_sge as = { .addr = (uintptr_t)local, .length = 8, .lkey = mr->lkey };
			struct ibv_send_wr a = { .wr_id = 4 * i + 1, .sg_list = &as, .num_sge = 1,
						 .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD, .send_flags = IBV_SEND_SIGNALED };
			a.wr.atomic.remote_addr = raddr + COUNTER;
			a.wr.atomic.rkey = rkey;
			a.wr.atomic.compare_add = 1;
			CHECK(!ibv_post_send(qp, &a, &bad), "fetch-and-add");
			wait_one(cq);
			uint64_t old;
			memcpy(&old, local, 8);
			CHECK(old == i, "fetch-and-add %u found %" PRIu64 " (executed twice, or lost)", i, old);

			memset(buf, 0, SLOT);
			struct ibv_sge rs = { .addr = (uintptr_t)buf, .length = SLOT, .lkey = mr->lkey };
			struct ibv_send_wr r = { .wr_id = 4 * i + 2, .sg_list = &rs, .num_sge = 1,
						 .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED };
			r.wr.rdma.remote_addr = raddr + slot * SLOT;
			r.wr.rdma.rkey = rkey;
			CHECK(!ibv_post_send(qp, &r, &bad), "read");
			wait_one(cq);
			CHECK(!memcmp(buf, src, SLOT), "read %u: not what write %u wrote", i, i);

			memcpy(local + 8, &i, 4);
			struct ibv_sge ss = { .addr = (uintptr_t)(local + 8), .length = 4, .lkey = mr->lkey };
			struct ibv_send_wr s = { .wr_id = 4 * i + 3, .sg_list = &ss, .num_sge = 1,
						 .opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
						 .imm_data = htonl(i) };
			CHECK(!ibv_post_send(qp, &s, &bad), "send");
			wait_one(cq);
		}
	}
	printf("ok %u\n", n);
	fflush(stdout);
	/* Stay (the device and its endpoint with it) until stdin closes. */
	char rest[16];
	while (fgets(rest, sizeof(rest), stdin))
		;
	return 0;
}
