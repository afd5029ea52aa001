/*
 * Address vectors as the kernel checks them before the driver sees them
 * (rdma_check_ah_attr, rdma_get_gid_attr), through the unmodified
 * libibverbs on the emulated device: a GRH naming an empty GID entry is
 * ENODATA, one past the 16-entry table EINVAL, and on RoCE an address
 * without a GRH EINVAL; for ibv_modify_qp to RTR, and for ibv_create_ah on
 * RoCE (the only link where libmlx5 asks the kernel for an AH) the empty
 * entry and the missing GRH.
 * The valid address (GID index 0) is then taken. Exit 0 when all hold.
 */
#include "verbs_util.h"

static struct ibv_ah_attr av(struct ibv_port_attr *port, union ibv_gid *gid, int global, int sgid)
{
	struct ibv_ah_attr a = { .dlid = port->lid, .port_num = 1 };
	if (global) {
		a.is_global = 1;
		a.grh.dgid = *gid;
		a.grh.sgid_index = sgid;
		a.grh.hop_limit = 64;
	}
	return a;
}

static int to_rtr(struct ibv_qp *qp, struct ibv_ah_attr ah)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = qp->qp_num,
				 .min_rnr_timer = 1, .ah_attr = ah };
	return ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int ah_errno(struct ibv_pd *pd, struct ibv_ah_attr a)
{
	struct ibv_ah *ah = ibv_create_ah(pd, &a);
	if (!ah)
		return errno;
	CHECK(!ibv_destroy_ah(ah), "destroy_ah");
	return 0;
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open");
	struct ibv_port_attr port;
	CHECK(!ibv_query_port(ctx, 1, &port), "query_port");
	int roce = port.link_layer == IBV_LINK_LAYER_ETHERNET;
	union ibv_gid gid, empty;
	CHECK(!ibv_query_gid(ctx, 1, 0, &gid), "query_gid 0");
	CHECK(!ibv_query_gid(ctx, 1, 1, &empty), "query_gid 1");
	CHECK(!memcmp(&empty, &(union ibv_gid){ 0 }, 16), "GID 1 is not empty");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .cap = { 1, 1, 1, 1, 0 },
				       .qp_type = IBV_QPT_RC };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK(pd && cq && qp, "objects");
	struct ibv_qp_attr init = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	CHECK(!ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "INIT");

	int e;
	CHECK((e = to_rtr(qp, av(&port, &gid, 1, 1))) == ENODATA, "RTR, empty GID entry: %d", e);
	CHECK((e = to_rtr(qp, av(&port, &gid, 1, 16))) == EINVAL, "RTR, GID index 16: %d", e);
	if (roce) {
		/* libmlx5 asks the kernel for an AH on RoCE only (for the MAC); on
		 * InfiniBand it writes the address vector itself. */
		CHECK((e = ah_errno(pd, av(&port, &gid, 1, 1))) == ENODATA, "AH, empty GID entry: %d", e);
		/* (Index 16 fails in libibverbs' GID type lookup, before the kernel.) */
		CHECK((e = to_rtr(qp, av(&port, &gid, 0, 0))) == EINVAL, "RTR, RoCE without GRH: %d", e);
		CHECK((e = ah_errno(pd, av(&port, &gid, 0, 0))) == EINVAL, "AH, RoCE without GRH: %d", e);
	} else {
		CHECK((e = ah_errno(pd, av(&port, &gid, 0, 0))) == 0, "AH, LID only: %d", e);
	}
	CHECK((e = ah_errno(pd, av(&port, &gid, 1, 0))) == 0, "AH, GID 0: %d", e);
	CHECK((e = to_rtr(qp, av(&port, &gid, 1, 0))) == 0, "RTR, GID 0: %d", e);

	CHECK(!ibv_destroy_qp(qp) && !ibv_destroy_cq(cq) && !ibv_dealloc_pd(pd), "destroy");
	CHECK(!ibv_close_device(ctx), "close");
	ibv_free_device_list(list);
	printf("address: all right\n");
	return 0;
}
