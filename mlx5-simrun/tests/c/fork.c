/*
 * fork in a program on the emulated device: the parent opens mlx5_0 (so the
 * emulated kernel and its NIC threads exist), forks, and the child then runs
 * an RC loopback RDMA WRITE of its own (two QPs on mlx5_0), checking the
 * completion and the bytes; the parent does the same after the child exits.
 * `fork` copies only the calling thread: the emulated kernel starts its NIC
 * threads again in the child (pthread_atfork), or the child's doorbells are
 * never executed. Exit 0 when both succeed.
 */
#include "verbs_util.h"
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int loopback_write(void)
{
	struct ibv_port_attr port;
	union ibv_gid gid;
	struct ibv_context *ctx = open_first(&port, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	static char buf[128];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(pd && cq && mr, "objects");
	struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *q1 = ibv_create_qp(pd, &a), *q2 = ibv_create_qp(pd, &a);
	CHECK(q1 && q2, "qps");
	to_rts(q1, q2->qp_num, &port, &gid);
	to_rts(q2, q1->qp_num, &port, &gid);
	memcpy(buf, "forked!", 8);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { .remote_addr = (uintptr_t)buf + 64, .rkey = mr->rkey } }, *bad;
	CHECK(!ibv_post_send(q1, &wr, &bad), "post");
	struct ibv_wc wc;
	time_t t0 = time(NULL);
	int got;
	while ((got = ibv_poll_cq(cq, 1, &wc)) == 0 && time(NULL) - t0 < 3) {
	}
	CHECK(got == 1 && wc.status == IBV_WC_SUCCESS, "completion: %d", got);
	CHECK(!memcmp(buf + 64, "forked!", 8), "data");
	return 0;
}

int main(void)
{
	/* The parent uses the device first (the context stays open across the fork). */
	(void)open_first(NULL, NULL);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0)
		return loopback_write();
	int st;
	CHECK(waitpid(pid, &st, 0) == pid, "wait");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed (status %d)", st);
	return loopback_write();
}
