/*
 * What the C test programs share: CHECK (print the program, the line and a
 * message, exit 1) and to_rts (an RC QP through INIT, RTR and RTS towards
 * QP `dest` on the port `port` describes, with a GRH to `gid` on RoCE).
 */
#ifndef VERBS_UTIL_H
#define VERBS_UTIL_H

#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                                                   \
	do {                                                                                               \
		if (!(cond)) {                                                                             \
			fprintf(stderr, "%s: line %d: ", program_invocation_short_name, __LINE__);         \
			fprintf(stderr, __VA_ARGS__);                                                      \
			fprintf(stderr, "\n");                                                             \
			exit(1);                                                                           \
		}                                                                                          \
	} while (0)

/* The first device, opened; port 1's attributes into `port` and its GID 0 into
 * `gid` unless NULL. (The device list is freed: an open context keeps its
 * device.) */
static inline struct ibv_context *open_first(struct ibv_port_attr *port, union ibv_gid *gid)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open %s", ibv_get_device_name(list[0]));
	ibv_free_device_list(list);
	CHECK(!port || !ibv_query_port(ctx, 1, port), "query port");
	CHECK(!gid || !ibv_query_gid(ctx, 1, 0, gid), "query gid");
	return ctx;
}

/* RC QP `qp` to RTS towards QP `dest` of the port `port` describes (its LID;
 * on RoCE a GRH to `gid`, source GID 0): remote `access`, `rd_atomic` READs
 * and atomics outstanding each way, 1024-byte MTU, 7 retries and RNR retries. */
static inline void to_rts_with(struct ibv_qp *qp, uint32_t dest, const struct ibv_port_attr *port,
			       const union ibv_gid *gid, unsigned access, uint8_t rd_atomic)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = rd_atomic;
	a.min_rnr_timer = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.dlid = port->lid;
	if (port->link_layer == IBV_LINK_LAYER_ETHERNET) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = *gid;
		a.ah_attr.grh.hop_limit = 64;
	}
	CHECK(!ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
	      "RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = rd_atomic;
	CHECK(!ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				     IBV_QP_MAX_QP_RD_ATOMIC),
	      "RTS");
}

/* to_rts_with REMOTE_WRITE access and no READs or atomics outstanding. */
static inline void to_rts(struct ibv_qp *qp, uint32_t dest, const struct ibv_port_attr *port,
			  const union ibv_gid *gid)
{
	to_rts_with(qp, dest, port, gid, IBV_ACCESS_REMOTE_WRITE, 0);
}

#endif
