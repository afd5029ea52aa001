/*
 * ibv_rereg_mr through the unmodified libibverbs and libmlx5 on the
 * emulated device: a new translation moves the MR (same keys) so that a
 * WRITE lands in the new memory; a new PD moves it (the old PD can then be
 * freed, the new one cannot while the MR is on it); new rights are
 * enforced at once (a WRITE without REMOTE_WRITE is a remote access
 * error, nothing written); bad requests are refused. Exit 0 when every
 * check holds.
 */
#include "verbs_util.h"

/* An 8-byte WRITE of `v` to `addr` with `rkey`: its completion status. */
static enum ibv_wc_status write8(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *src, uint64_t v,
				 uint64_t addr, uint32_t rkey)
{
	memcpy(src->addr, &v, 8);
	struct ibv_sge sge = { (uintptr_t)src->addr, 8, src->lkey };
	struct ibv_send_wr wr = { .wr_id = v, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	CHECK(!ibv_post_send(qp, &wr, &bad), "post_send");
	struct ibv_wc wc;
	int r;
	for (long k = 0; (r = ibv_poll_cq(cq, 1, &wc)) == 0; k++)
		CHECK(k < 100000000, "no completion");
	CHECK(r == 1 && wc.wr_id == v, "poll");
	return wc.status;
}

int main(void)
{
	struct ibv_port_attr port;
	union ibv_gid gid;
	struct ibv_context *ctx = open_first(&port, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx), *pd2 = ibv_alloc_pd(ctx), *pd3 = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	CHECK(pd && pd2 && pd3 && cq, "objects");
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .cap = { 8, 1, 1, 1, 0 },
				       .qp_type = IBV_QPT_RC };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa), *peer = ibv_create_qp(pd, &qa);
	CHECK(qp && peer, "qps");
	to_rts(qp, peer->qp_num, &port, &gid);
	to_rts(peer, qp->qp_num, &port, &gid);
	char *a = calloc(1, 4096), *b = calloc(1, 4096);
	struct ibv_mr *src = ibv_reg_mr(pd, calloc(1, 64), 64, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mr = ibv_reg_mr(pd, a, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(src && mr, "mrs");
	uint32_t rkey = mr->rkey, lkey = mr->lkey;
	CHECK(write8(qp, cq, src, 1, (uintptr_t)a, rkey) == IBV_WC_SUCCESS && a[0] == 1, "WRITE to a");

	/* A new translation: the same keys now name `b`. */
	CHECK(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b, 4096, 0), "rereg translation");
	CHECK(mr->rkey == rkey && mr->lkey == lkey, "keys changed");
	CHECK(write8(qp, cq, src, 2, (uintptr_t)b + 8, rkey) == IBV_WC_SUCCESS && b[8] == 2, "WRITE to b");

	/* A new PD: the first may go, the new one may not while the MR is on it;
	 * the MR moves back to the QPs' PD. */
	CHECK(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0), "rereg pd");
	CHECK(ibv_dealloc_pd(pd2) == EBUSY, "pd2 freed under its MR");
	CHECK(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd3, NULL, 0, 0), "rereg pd3");
	CHECK(!ibv_dealloc_pd(pd2), "pd2 no longer used");
	CHECK(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0), "rereg back");

	/* Refused: no flags, remote write without local write; the MR unchanged. */
	CHECK(ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0) != 0, "no flags accepted");
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE) != 0,
	      "remote write without local write accepted");
	CHECK(write8(qp, cq, src, 3, (uintptr_t)b + 16, rkey) == IBV_WC_SUCCESS && b[16] == 3, "MR unchanged");

	/* New rights: without REMOTE_WRITE the WRITE is a remote access error. */
	CHECK(!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE), "rereg access");
	enum ibv_wc_status st = write8(qp, cq, src, 4, (uintptr_t)b + 24, rkey);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "WRITE without the right: %s", ibv_wc_status_str(st));
	CHECK(b[24] == 0, "written without the right");

	CHECK(!ibv_destroy_qp(qp) && !ibv_destroy_qp(peer) && !ibv_destroy_cq(cq), "destroy");
	void *s = src->addr;
	CHECK(!ibv_dereg_mr(mr) && !ibv_dereg_mr(src) && !ibv_dealloc_pd(pd3) && !ibv_dealloc_pd(pd), "dealloc");
	CHECK(!ibv_close_device(ctx), "close");
	free(a);
	free(b);
	free(s);
	printf("rereg_mr: all right\n");
	return 0;
}
