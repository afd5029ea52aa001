/*
 * The device clock through the unmodified libibverbs and libmlx5 on the
 * emulated device: hca_core_clock and the timestamp mask from
 * ibv_query_device_ex, the clock info page (mlx5dv_get_clock_info,
 * mlx5dv_query_device's CLOCK_INFO_UPDATE), the free-running counter
 * (ibv_query_rt_values_ex) read before and after an RDMA WRITE whose
 * completion timestamp lies between the two, that timestamp converted to
 * wall-clock time by mlx5dv_ts_to_ns and by libmlx5 itself (a CQ with
 * IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK), and the kernel's answers
 * to mmaps of the clock pages it refuses. Exit 0 when every check holds.
 */
#include "verbs_util.h"
#include <infiniband/mlx5dv.h>
#include <sys/mman.h>
#include <time.h>

static uint64_t raw_clock(struct ibv_context *ctx)
{
	struct ibv_values_ex v = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
	CHECK(!ibv_query_rt_values_ex(ctx, &v), "ibv_query_rt_values_ex");
	CHECK(v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK, "no raw clock");
	return (uint64_t)v.raw_clock.tv_sec * 1000000000ull + (uint64_t)v.raw_clock.tv_nsec;
}

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* One signalled RDMA WRITE from `qp`, its completion polled from `cq`:
 * the timestamp it carries (cycles, or ns for a wall-clock CQ). */
static uint64_t write_one(struct ibv_qp *qp, struct ibv_cq_ex *cq, struct ibv_mr *mr, int wallclock)
{
	struct ibv_sge sge = { (uintptr_t)mr->addr, 64, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)mr->addr + 4096;
	wr.wr.rdma.rkey = mr->rkey;
	CHECK(!ibv_post_send(qp, &wr, &bad), "post_send");
	struct ibv_poll_cq_attr pa = { 0 };
	int ret;
	for (long i = 0; (ret = ibv_start_poll(cq, &pa)) == ENOENT; i++)
		CHECK(i < 100000000, "no completion");
	CHECK(!ret, "start_poll %d", ret);
	CHECK(cq->status == IBV_WC_SUCCESS && cq->wr_id == 7, "status %d wr_id %lu", cq->status,
	      (unsigned long)cq->wr_id);
	uint64_t ts = wallclock ? ibv_wc_read_completion_wallclock_ns(cq) : ibv_wc_read_completion_ts(cq);
	ibv_end_poll(cq);
	return ts;
}

/* mmap of the command fd at (command << 8 | index) pages: the errno, 0 when mapped. */
static int map_errno(struct ibv_context *ctx, unsigned cmd, unsigned idx, int prot, int flags)
{
	void *p = mmap(NULL, 4096, prot, flags, ctx->cmd_fd, (off_t)((cmd << 8) | idx) * 4096);
	if (p == MAP_FAILED)
		return errno;
	munmap(p, 4096);
	return 0;
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open");
	CHECK(mlx5dv_is_supported(list[0]), "not an mlx5 device");

	struct ibv_device_attr_ex dx;
	CHECK(!ibv_query_device_ex(ctx, NULL, &dx), "query_device_ex");
	CHECK(dx.hca_core_clock == 156250, "hca_core_clock %lu kHz", (unsigned long)dx.hca_core_clock);
	CHECK(dx.completion_timestamp_mask == (1ull << 63) - 1, "timestamp mask %lx",
	      (unsigned long)dx.completion_timestamp_mask);

	struct mlx5dv_context dv = { .comp_mask = MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE |
						  MLX5DV_CONTEXT_MASK_HCA_CORE_CLOCK };
	CHECK(!mlx5dv_query_device(ctx, &dv), "mlx5dv_query_device");
	CHECK(dv.comp_mask & MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE, "no clock info page");
	CHECK(dv.comp_mask & MLX5DV_CONTEXT_MASK_HCA_CORE_CLOCK, "no core clock page");
	CHECK(dv.max_clock_info_update_nsec > 3600ull * 1000000000ull, "update period %lu ns",
	      (unsigned long)dv.max_clock_info_update_nsec);

	struct mlx5dv_clock_info ci;
	CHECK(!mlx5dv_get_clock_info(ctx, &ci), "mlx5dv_get_clock_info");
	/* 6.4 ns per cycle at 156.25 MHz, as mult >> shift. */
	double ns_per_cycle = (double)ci.mult / (double)(1ull << ci.shift);
	CHECK(ns_per_cycle > 6.3999 && ns_per_cycle < 6.4001, "%f ns per cycle", ns_per_cycle);
	CHECK(ci.mask == (1ull << 63) - 1, "clock info mask %lx", (unsigned long)ci.mask);
	uint64_t then = now_ns();
	CHECK(ci.nsec <= then && then - ci.nsec < 60ull * 1000000000ull, "clock info at %lu, now %lu",
	      (unsigned long)ci.nsec, (unsigned long)then);

	/* Two QPs on the device, connected to each other. */
	struct ibv_port_attr port;
	CHECK(!ibv_query_port(ctx, 1, &port), "query_port");
	union ibv_gid gid;
	CHECK(!ibv_query_gid(ctx, 1, 0, &gid), "query_gid");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = aligned_alloc(4096, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(pd && buf && mr, "pd/mr");
	struct ibv_cq_init_attr_ex ca = { .cqe = 16,
					  .wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP };
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &ca);
	ca.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
	struct ibv_cq_ex *wcq = ibv_create_cq_ex(ctx, &ca);
	CHECK(cq && wcq, "create_cq_ex (timestamp %p, wall clock %p)", (void *)cq, (void *)wcq);
	struct ibv_qp_init_attr qa = { .send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq),
				       .cap = { 4, 4, 1, 1, 0 }, .qp_type = IBV_QPT_RC };
	struct ibv_qp *q1 = ibv_create_qp(pd, &qa);
	qa.send_cq = qa.recv_cq = ibv_cq_ex_to_cq(wcq);
	struct ibv_qp *q2 = ibv_create_qp(pd, &qa);
	CHECK(q1 && q2, "create_qp");
	to_rts(q1, q2->qp_num, &port, &gid);
	to_rts(q2, q1->qp_num, &port, &gid);

	/* The completion's timestamp lies between two reads of the counter. */
	uint64_t before = raw_clock(ctx);
	uint64_t ts = write_one(q1, cq, mr, 0);
	uint64_t after = raw_clock(ctx);
	CHECK(before < ts && ts <= after, "raw clock %lu, timestamp %lu, raw clock %lu", (unsigned long)before,
	      (unsigned long)ts, (unsigned long)after);
	uint64_t ns = mlx5dv_ts_to_ns(&ci, ts);
	uint64_t now = now_ns();
	CHECK(ns >= ci.nsec && ns < now + 60ull * 1000000000ull, "timestamp at %lu ns, clock info %lu, now %lu",
	      (unsigned long)ns, (unsigned long)ci.nsec, (unsigned long)now);
	CHECK(ns == ci.nsec + (((ts - ci.last_cycles) * ci.mult) >> ci.shift), "conversion");

	/* libmlx5's own conversion for a wall-clock CQ. */
	uint64_t wall = write_one(q2, wcq, mr, 1);
	CHECK(wall >= ci.nsec && wall < now_ns() + 60ull * 1000000000ull, "wall-clock timestamp %lu",
	      (unsigned long)wall);

	/* The clock pages are read-only, and the clock info page is V1. */
	CHECK(map_errno(ctx, 5, 0, PROT_READ, MAP_SHARED) == 0, "core clock page");
	CHECK(map_errno(ctx, 5, 0, PROT_READ | PROT_WRITE, MAP_SHARED) == EPERM, "writable core clock page");
	CHECK(map_errno(ctx, 7, 0, PROT_READ, MAP_SHARED) == 0, "clock info page");
	CHECK(map_errno(ctx, 7, 1, PROT_READ, MAP_SHARED) == EOPNOTSUPP, "clock info V2");
	CHECK(map_errno(ctx, 7, 0, PROT_READ | PROT_WRITE, MAP_SHARED) == EPERM, "writable clock info");
	CHECK(map_errno(ctx, 7, 0, PROT_READ | PROT_EXEC, MAP_SHARED) == EPERM, "executable clock info");
	CHECK(map_errno(ctx, 7, 0, PROT_READ, MAP_PRIVATE) == EINVAL, "private clock info");

	CHECK(!ibv_destroy_qp(q1) && !ibv_destroy_qp(q2), "destroy_qp");
	CHECK(!ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) && !ibv_destroy_cq(ibv_cq_ex_to_cq(wcq)), "destroy_cq");
	CHECK(!ibv_dereg_mr(mr) && !ibv_dealloc_pd(pd), "dereg");
	CHECK(!ibv_close_device(ctx), "close");
	ibv_free_device_list(list);
	free(buf);
	printf("clock: all right\n");
	return 0;
}
