/*
 * fork on the UDP wire (step 12), under mlx5_simrun --shared: the parent opens
 * mlx5_0 (the emulated kernel, its NIC threads and its endpoint on the wire
 * exist) and forks. Then each creates an RC QP of its own on mlx5_0; they swap
 * QPN, rkey and address through pipes, and the child WRITEs into the parent's
 * memory and READs it back: each request crosses the wire to the parent's
 * endpoint and each answer comes back to the child's. The child must be a
 * process of its own on the wire (its own endpoint, its QP numbered as its
 * own): were it to share the parent's, the answers would reach the parent and
 * the child's requests would end in retry exceeded. Exit 0 when the child's
 * completions, the bytes it read and the parent's memory are right.
 */
#include "verbs_util.h"
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct info {
	uint32_t qpn, rkey;
	uint64_t addr;
};

struct side {
	struct ibv_port_attr port;
	union ibv_gid gid;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_qp *qp;
};

static char buf[4096];
static const char MSG[] = "written across a fork";

static void make(struct side *s)
{
	struct ibv_context *ctx = open_first(&s->port, &s->gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	s->cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	s->mr = ibv_reg_mr(pd, buf, sizeof(buf),
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK(pd && s->cq && s->mr, "objects");
	struct ibv_qp_init_attr a = { .send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	s->qp = ibv_create_qp(pd, &a);
	CHECK(s->qp, "qp");
}

/* Our QP's number and memory to the other process, theirs back; then both to RTS. */
static struct info meet(struct side *s, int wfd, int rfd)
{
	struct info me = { s->qp->qp_num, s->mr->rkey, (uintptr_t)buf }, peer;
	CHECK(write(wfd, &me, sizeof(me)) == sizeof(me), "pipe write");
	CHECK(read(rfd, &peer, sizeof(peer)) == sizeof(peer), "pipe read");
	CHECK(peer.qpn != me.qpn, "the two processes hold the same QPN 0x%x", me.qpn);
	to_rts_with(s->qp, peer.qpn, &s->port, &s->gid, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 1);
	return peer;
}

static void one(struct side *s, enum ibv_wr_opcode op, char *local, const struct info *peer)
{
	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = sizeof(MSG), .lkey = s->mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { .remote_addr = peer->addr, .rkey = peer->rkey } }, *bad;
	CHECK(!ibv_post_send(s->qp, &wr, &bad), "post");
	struct ibv_wc wc;
	time_t t0 = time(NULL);
	int got;
	while ((got = ibv_poll_cq(s->cq, 1, &wc)) == 0 && time(NULL) - t0 < 30) {
	}
	CHECK(got == 1, "no completion for opcode %d", op);
	CHECK(wc.status == IBV_WC_SUCCESS, "opcode %d: %s", op, ibv_wc_status_str(wc.status));
}

int main(void)
{
	int to_child[2], to_parent[2];
	CHECK(!pipe(to_child) && !pipe(to_parent), "pipes");
	/* The parent uses the device first (the context stays open across the fork). */
	(void)open_first(NULL, NULL);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	struct side s;
	make(&s);
	if (pid == 0) {
		struct info peer = meet(&s, to_parent[1], to_child[0]);
		char ready;
		CHECK(read(to_child[0], &ready, 1) == 1, "the parent's QP is not ready");
		memcpy(buf, MSG, sizeof(MSG));
		one(&s, IBV_WR_RDMA_WRITE, buf, &peer);
		one(&s, IBV_WR_RDMA_READ, buf + 1024, &peer);
		CHECK(!memcmp(buf + 1024, MSG, sizeof(MSG)), "the READ brought back other bytes");
		return 0;
	}
	meet(&s, to_child[1], to_parent[0]);
	CHECK(write(to_child[1], "r", 1) == 1, "pipe write");
	int st;
	CHECK(waitpid(pid, &st, 0) == pid, "wait");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed (status %d)", st);
	CHECK(!memcmp(buf, MSG, sizeof(MSG)), "the child's WRITE is not in the parent's memory");
	printf("all right\n");
	return 0;
}
