/*
 * Prints the numbers the device gave this process (an RC QP and an MR,
 * "qpn N lkey N"), then holds them until its standard input
 * closes: two copies run at once show whether they share the device's numbers.
 */
#include "verbs_util.h"

int main(void)
{
	struct ibv_context *ctx = open_first(NULL, NULL);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq, "create_cq");
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "reg_mr");
	struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	CHECK(qp, "create_qp: %s", strerror(errno));
	printf("qpn %u lkey %u\n", qp->qp_num, mr->lkey);
	fflush(stdout);
	char c;
	while (fread(&c, 1, 1, stdin) == 1) {
	}
	CHECK(!ibv_destroy_qp(qp), "destroy_qp");
	CHECK(!ibv_dereg_mr(mr), "dereg_mr");
	CHECK(!ibv_destroy_cq(cq), "destroy_cq");
	CHECK(!ibv_dealloc_pd(pd), "dealloc_pd");
	ibv_close_device(ctx);
	return 0;
}
