/*
 * Thread domains through the unmodified libibverbs and libmlx5 on the
 * emulated device: ibv_alloc_td gives each domain a dedicated UAR, which
 * libmlx5 maps as a dynamic UAR page (MLX5_IB_MMAP_ALLOC_WC) and names at
 * QP creation (MLX5_QP_FLAG_BFREG_INDEX); a QP of a parent domain with the
 * TD rings its doorbells and BlueFlame writes there, and 200 inline
 * WRITEs (BlueFlame) and 200 gathered ones (doorbell) land and complete
 * on each of two QPs with two TDs. Exit 0 when every check holds.
 */
#include "verbs_util.h"

/* `n` signalled WRITEs of 8 bytes from `qp` (inline: BlueFlame), each to its
 * own slot of `dst`, each waited for on `cq`. */
static void writes(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *src, struct ibv_mr *dst, int n,
		   int inl, uint64_t tag)
{
	for (int i = 0; i < n; i++) {
		uint64_t v = tag << 32 | (uint64_t)i;
		memcpy((char *)src->addr + 8 * i, &v, 8);
		struct ibv_sge sge = { (uintptr_t)src->addr + 8 * i, 8, src->lkey };
		struct ibv_send_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED | (inl ? IBV_SEND_INLINE : 0) },
				   *bad;
		wr.wr.rdma.remote_addr = (uintptr_t)dst->addr + 8 * i;
		wr.wr.rdma.rkey = dst->rkey;
		CHECK(!ibv_post_send(qp, &wr, &bad), "post_send %d", i);
		struct ibv_wc wc;
		int got;
		for (long k = 0; (got = ibv_poll_cq(cq, 1, &wc)) == 0; k++)
			CHECK(k < 100000000, "no completion for WRITE %d", i);
		CHECK(got == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)i, "WRITE %d: %s", i,
		      ibv_wc_status_str(wc.status));
		CHECK(!memcmp((char *)dst->addr + 8 * i, &v, 8), "WRITE %d did not land", i);
	}
}

int main(void)
{
	struct ibv_port_attr port;
	union ibv_gid gid;
	struct ibv_context *ctx = open_first(&port, &gid);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "pd");

	struct ibv_td_init_attr ta = { 0 };
	struct ibv_td *td[2];
	struct ibv_pd *ppd[2];
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2], *peer[2];
	struct ibv_mr *src[2], *dst[2];
	for (int t = 0; t < 2; t++) {
		td[t] = ibv_alloc_td(ctx, &ta);
		CHECK(td[t], "ibv_alloc_td %d", t);
		struct ibv_parent_domain_init_attr pa = { .pd = pd, .td = td[t] };
		ppd[t] = ibv_alloc_parent_domain(ctx, &pa);
		CHECK(ppd[t], "ibv_alloc_parent_domain %d", t);
		cq[t] = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		CHECK(cq[t], "cq");
		struct ibv_qp_init_attr qa = { .send_cq = cq[t], .recv_cq = cq[t], .cap = { 8, 1, 1, 1, 64 },
					       .qp_type = IBV_QPT_RC };
		qp[t] = ibv_create_qp(ppd[t], &qa);
		CHECK(qp[t], "QP on thread domain %d", t);
		peer[t] = ibv_create_qp(pd, &qa);
		CHECK(peer[t], "peer QP");
		to_rts(qp[t], peer[t]->qp_num, &port, &gid);
		to_rts(peer[t], qp[t]->qp_num, &port, &gid);
		src[t] = ibv_reg_mr(pd, calloc(1, 4096), 4096, IBV_ACCESS_LOCAL_WRITE);
		dst[t] = ibv_reg_mr(pd, calloc(1, 4096), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		CHECK(src[t] && dst[t], "mr");
	}
	/* Interleaved, so that each QP's doorbells follow the other's. */
	for (int round = 0; round < 2; round++)
		for (int t = 0; t < 2; t++)
			writes(qp[t], cq[t], src[t], dst[t], 200, round == 0, (uint64_t)(t + 1) << 8 | round);

	for (int t = 0; t < 2; t++) {
		CHECK(!ibv_destroy_qp(qp[t]) && !ibv_destroy_qp(peer[t]) && !ibv_destroy_cq(cq[t]), "destroy");
		CHECK(!ibv_dealloc_pd(ppd[t]) && !ibv_dealloc_td(td[t]), "dealloc parent domain, td");
		void *a = src[t]->addr, *b = dst[t]->addr;
		CHECK(!ibv_dereg_mr(src[t]) && !ibv_dereg_mr(dst[t]), "dereg");
		free(a);
		free(b);
	}
	CHECK(!ibv_dealloc_pd(pd) && !ibv_close_device(ctx), "close");
	printf("thread_domain: all right\n");
	return 0;
}
