/*
 * The C baseline of mlx5-bench (mlx5-bench/src/lib.rs): what hand-written C
 * with mlx5dv.h's helpers spends on the same work, counted by callgrind the
 * same way, inside the phase function only (mlx5-bench's gungraun bench, and
 * benches/callgrind.sh: N and 2N operations, the difference over N).
 * mlx5-bench's build script compiles it with `main` renamed hot_path_c_main;
 * `hot_path c KIND N` runs it.
 *
 *   hot_path_c post N  N signaled 1-SGE RDMA_WRITEs into a send ring in
 *                      ordinary memory: ctrl (mlx5dv_set_ctrl_seg), raddr,
 *                      data (mlx5dv_set_data_seg), wr-id slot, doorbell
 *                      record, 8-byte doorbell store; as rdma-core's fast
 *                      path does, minus its generic ibv_send_wr handling.
 *   hot_path_c post_vary N  the same with its addresses changing per WQE.
 *   hot_path_c poll N  N requester CQEs (written as a NIC would, owner bits
 *                      alternating per lap) polled: owner check, opcode,
 *                      wqe_counter, wr-id, consumer index and its record.
 *   hot_path_c poll1 N the same CQEs, one poll_one call each.
 *
 * Like the Rust bench, no device: the "NIC" is memory. x86 barriers as in
 * rdma-core's util/udma_barrier.h (see ring_db).
 */
#include <infiniband/mlx5dv.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <endian.h>

#define barrier() asm volatile("" ::: "memory")

struct sq {
	uint8_t *buf;
	uint32_t wqe_cnt; /* WQEBBs, power of two */
	uint32_t pi;
	uint32_t qpn;
	uint64_t *wrid;
	volatile uint32_t *dbrec;
	volatile uint64_t *db;
};

/* After a WQE of `nbb` WQEBBs at slot `idx`: its wr-id, the producer, then as
 * rdma-core orders them on x86: udma_to_device_barrier (a compiler barrier),
 * the doorbell record, mmio_wc_start (sfence), the 8-byte doorbell,
 * mmio_flush_writes (sfence). */
static inline void ring_db(struct sq *q, struct mlx5_wqe_ctrl_seg *ctrl, uint32_t idx, uint32_t nbb, uint64_t i)
{
	q->wrid[idx] = i;
	q->pi += nbb;
	barrier();
	q->dbrec[MLX5_SND_DBR] = htobe32(q->pi & 0xffff);
	asm volatile("sfence" ::: "memory");
	*q->db = *(uint64_t *)ctrl;
	asm volatile("sfence" ::: "memory");
}

__attribute__((noinline)) void post_phase(struct sq *q, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		uint32_t idx = q->pi & (q->wqe_cnt - 1);
		uint8_t *w = q->buf + ((size_t)idx << 6);
		struct mlx5_wqe_ctrl_seg *ctrl = (void *)w;
		struct mlx5_wqe_raddr_seg *raddr = (void *)(w + 16);
		struct mlx5_wqe_data_seg *data = (void *)(w + 32);
		mlx5dv_set_ctrl_seg(ctrl, q->pi, MLX5_OPCODE_RDMA_WRITE, 0, q->qpn,
				    MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
		raddr->raddr = htobe64(0x555500001000ULL);
		raddr->rkey = htobe32(0x5678);
		raddr->reserved = 0;
		mlx5dv_set_data_seg(data, 64, 0x1234, 0x7f1234560000ULL);
		ring_db(q, ctrl, idx, 1, i);
	}
}

/* post_phase's RDMA_WRITE with its remote and local addresses changing per
 * WQE (as mlx5-bench's post_vary_phase changes them). */
__attribute__((noinline)) void post_vary_phase(struct sq *q, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		uint64_t off = i << 6;
		uint32_t idx = q->pi & (q->wqe_cnt - 1);
		uint8_t *w = q->buf + ((size_t)idx << 6);
		struct mlx5_wqe_ctrl_seg *ctrl = (void *)w;
		struct mlx5_wqe_raddr_seg *raddr = (void *)(w + 16);
		struct mlx5_wqe_data_seg *data = (void *)(w + 32);
		mlx5dv_set_ctrl_seg(ctrl, q->pi, MLX5_OPCODE_RDMA_WRITE, 0, q->qpn,
				    MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
		raddr->raddr = htobe64(0x555500001000ULL + off);
		raddr->rkey = htobe32(0x5678);
		raddr->reserved = 0;
		mlx5dv_set_data_seg(data, 64, 0x1234, 0x7f1234560000ULL + off);
		ring_db(q, ctrl, idx, 1, i);
	}
}

/* A 32-byte inline SEND: ctrl, inline header, data (3 DS). */
__attribute__((noinline)) void post_inline_phase(struct sq *q, uint64_t n)
{
	static const uint8_t data[32] = { 0x5a };
	for (uint64_t i = 0; i < n; i++) {
		uint32_t idx = q->pi & (q->wqe_cnt - 1);
		uint8_t *w = q->buf + ((size_t)idx << 6);
		struct mlx5_wqe_ctrl_seg *ctrl = (void *)w;
		struct mlx5_wqe_inl_data_seg *inl = (void *)(w + 16);
		mlx5dv_set_ctrl_seg(ctrl, q->pi, MLX5_OPCODE_SEND, 0, q->qpn, MLX5_WQE_CTRL_CQ_UPDATE, 4, 0, 0);
		inl->byte_count = htobe32(32 | MLX5_INLINE_SEG);
		memcpy(inl + 1, data, 32);
		ring_db(q, ctrl, idx, 1, i);
	}
}

/* A UD SEND: ctrl, datagram segment (the pre-built AV copied, then Q_Key and
 * QPN, as rdma-core's post_send does with an address handle), data; 5 DS. */
__attribute__((noinline)) void post_ud_phase(struct sq *q, struct mlx5_wqe_av *av, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		uint32_t idx = q->pi & (q->wqe_cnt - 1);
		uint8_t *w = q->buf + ((size_t)idx << 6);
		struct mlx5_wqe_ctrl_seg *ctrl = (void *)w;
		mlx5dv_set_ctrl_seg(ctrl, q->pi, MLX5_OPCODE_SEND, 0, q->qpn, MLX5_WQE_CTRL_CQ_UPDATE, 5, 0, 0);
		struct mlx5_wqe_datagram_seg *dg = (void *)(w + 16);
		memcpy(&dg->av, av, sizeof(dg->av));
		dg->av.key.qkey.qkey = htobe32(0x11111111);
		dg->av.dqp_dct = htobe32(0x99 | MLX5_EXTENDED_UD_AV);
		/* The data segment is the first DS of the second WQEBB (ring wrap aside). */
		uint8_t *w2 = q->buf + (((size_t)(idx + 1) & (q->wqe_cnt - 1)) << 6);
		mlx5dv_set_data_seg((void *)w2, 64, 0x1234, 0x7f1234560000ULL);
		ring_db(q, ctrl, idx, 2, i);
	}
}

/* A DCI RDMA_WRITE: ctrl, AV with DC key and DCT number, raddr, data; 6 DS. */
__attribute__((noinline)) void post_dc_phase(struct sq *q, struct mlx5_wqe_av *av, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		uint32_t idx = q->pi & (q->wqe_cnt - 1);
		uint8_t *w = q->buf + ((size_t)idx << 6);
		struct mlx5_wqe_ctrl_seg *ctrl = (void *)w;
		mlx5dv_set_ctrl_seg(ctrl, q->pi, MLX5_OPCODE_RDMA_WRITE, 0, q->qpn, MLX5_WQE_CTRL_CQ_UPDATE, 6, 0, 0);
		struct mlx5_wqe_datagram_seg *dg = (void *)(w + 16);
		memcpy(&dg->av, av, sizeof(dg->av));
		dg->av.key.dc_key = htobe64(0xdc);
		dg->av.dqp_dct = htobe32(0x800001 | MLX5_EXTENDED_UD_AV);
		uint8_t *w2 = q->buf + (((size_t)(idx + 1) & (q->wqe_cnt - 1)) << 6);
		struct mlx5_wqe_raddr_seg *raddr = (void *)w2;
		raddr->raddr = htobe64(0x555500001000ULL);
		raddr->rkey = htobe32(0x5678);
		raddr->reserved = 0;
		mlx5dv_set_data_seg((void *)(w2 + 16), 64, 0x1234, 0x7f1234560000ULL);
		ring_db(q, ctrl, idx, 2, i);
	}
}

/* The RDMA_WRITE of post_phase, rung by BlueFlame: the 64-byte WQE copied to the
 * register with four 16-byte stores (rdma-core's x86 mmio_memcpy_x64). */
__attribute__((noinline)) void post_bf_phase(struct sq *q, uint8_t *bf, uint64_t n)
{
	uint32_t bf_off = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t idx = q->pi & (q->wqe_cnt - 1);
		uint8_t *w = q->buf + ((size_t)idx << 6);
		struct mlx5_wqe_ctrl_seg *ctrl = (void *)w;
		struct mlx5_wqe_raddr_seg *raddr = (void *)(w + 16);
		mlx5dv_set_ctrl_seg(ctrl, q->pi, MLX5_OPCODE_RDMA_WRITE, 0, q->qpn, MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
		raddr->raddr = htobe64(0x555500001000ULL);
		raddr->rkey = htobe32(0x5678);
		raddr->reserved = 0;
		mlx5dv_set_data_seg((void *)(w + 32), 64, 0x1234, 0x7f1234560000ULL);
		q->wrid[idx] = i;
		q->pi++;
		barrier();
		q->dbrec[MLX5_SND_DBR] = htobe32(q->pi & 0xffff);
		asm volatile("sfence" ::: "memory"); /* mmio_wc_start */
		__uint128_t *d = (void *)(bf + bf_off), *src = (void *)w;
		for (int k = 0; k < 4; k++)
			((volatile __uint128_t *)d)[k] = src[k];
		asm volatile("sfence" ::: "memory");
		bf_off ^= 256;
	}
}

/* A 1-SGE receive into a 16-byte-stride RQ, then its doorbell record. */
__attribute__((noinline)) void recv_phase(struct mlx5_wqe_data_seg *rq, uint32_t cnt, volatile uint32_t *dbrec,
					  uint64_t *wrid, uint64_t n)
{
	uint32_t head = 0;
	for (uint64_t i = 0; i < n; i++) {
		uint32_t idx = head & (cnt - 1);
		mlx5dv_set_data_seg(&rq[idx], 64, 0x1234, 0x7f1234560000ULL);
		wrid[idx] = i;
		head++;
		barrier();
		dbrec[MLX5_RCV_DBR] = htobe32(head & 0xffff);
	}
}

struct cq {
	struct mlx5_cqe64 *buf;
	uint32_t cqe_cnt;
	uint32_t ci;
	volatile uint32_t *dbrec;
	uint64_t *wrid; /* the SQ's wr-id slots */
	uint32_t sq_mask;
};

__attribute__((noinline)) uint64_t poll_phase(struct cq *c, uint32_t n, uint32_t *errors)
{
	uint64_t sum = 0;
	uint32_t got = 0;
	while (got < n) {
		struct mlx5_cqe64 *cqe = &c->buf[c->ci & (c->cqe_cnt - 1)];
		uint8_t op_own = ((volatile struct mlx5_cqe64 *)cqe)->op_own;
		if ((op_own & MLX5_CQE_OWNER_MASK) != !!(c->ci & c->cqe_cnt) ||
		    (op_own >> 4) == MLX5_CQE_INVALID)
			continue;
		barrier(); /* udma_from_device_barrier on x86 */
		/* Errors are counted, and report their syndrome (as ibv_wc's status). */
		if ((op_own >> 4) == MLX5_CQE_REQ_ERR || (op_own >> 4) == MLX5_CQE_RESP_ERR)
			*errors += ((struct mlx5_err_cqe *)cqe)->syndrome != 0;
		uint16_t wqe_counter = be16toh(cqe->wqe_counter);
		sum += c->wrid[wqe_counter & c->sq_mask];
		c->ci++;
		c->dbrec[0 /* set_ci */] = htobe32(c->ci & 0xffffff);
		got++;
	}
	return sum;
}

/* At most one CQE: poll_phase's body as a function a latency loop calls
 * (inlined, as hand-written C would have it). */
static inline uint32_t poll_one(struct cq *c, uint64_t *sum, uint32_t *errors)
{
	struct mlx5_cqe64 *cqe = &c->buf[c->ci & (c->cqe_cnt - 1)];
	uint8_t op_own = ((volatile struct mlx5_cqe64 *)cqe)->op_own;
	if ((op_own & MLX5_CQE_OWNER_MASK) != !!(c->ci & c->cqe_cnt) || (op_own >> 4) == MLX5_CQE_INVALID)
		return 0;
	barrier();
	if ((op_own >> 4) == MLX5_CQE_REQ_ERR || (op_own >> 4) == MLX5_CQE_RESP_ERR)
		*errors += ((struct mlx5_err_cqe *)cqe)->syndrome != 0;
	*sum += c->wrid[be16toh(cqe->wqe_counter) & c->sq_mask];
	c->ci++;
	c->dbrec[0] = htobe32(c->ci & 0xffffff);
	return 1;
}

/* poll1: the CQEs of poll, one poll_one call each. */
__attribute__((noinline)) uint64_t poll1_phase(struct cq *c, uint32_t n, uint32_t *errors)
{
	uint64_t sum = 0;
	uint32_t got = 0;
	while (got < n)
		got += poll_one(c, &sum, errors);
	return sum;
}

static void *page_alloc(size_t len)
{
	void *p;
	if (posix_memalign(&p, 4096, len))
		exit(1);
	memset(p, 0, len);
	return p;
}

static uint32_t pow2(uint32_t v)
{
	uint32_t p = 64;
	while (p < v)
		p <<= 1;
	return p;
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "post";
	uint32_t n = argc > 2 ? (uint32_t)atoi(argv[2]) : 1000;
	uint32_t cnt = pow2(n);
	uint64_t *wrid = page_alloc(cnt * sizeof(uint64_t));
	if (!strncmp(what, "post", 4)) {
		uint32_t *dbrec = page_alloc(64);
		uint64_t *db = page_alloc(4096);
		/* Room for two WQEBBs per WQE (UD, DC), with a wr-id slot per WQEBB. */
		uint64_t *wrid2 = page_alloc(2 * cnt * sizeof(uint64_t));
		struct sq q = { page_alloc((size_t)cnt << 7), 2 * cnt, 0, 0x108, wrid2, dbrec, db };
		struct mlx5_wqe_av av = { 0 };
		av.rlid = htobe16(2);
		if (!strcmp(what, "post"))
			post_phase(&q, n);
		else if (!strcmp(what, "post_vary"))
			post_vary_phase(&q, n);
		else if (!strcmp(what, "post_inline"))
			post_inline_phase(&q, n);
		else if (!strcmp(what, "post_ud"))
			post_ud_phase(&q, &av, n);
		else if (!strcmp(what, "post_dc"))
			post_dc_phase(&q, &av, n);
		else if (!strcmp(what, "post_bf"))
			post_bf_phase(&q, page_alloc(4096), n);
		printf("posted %u WQEBBs\n", q.pi);
		return 0;
	}
	if (!strcmp(what, "recv")) {
		recv_phase(page_alloc((size_t)cnt * 16), cnt, page_alloc(64), wrid, n);
		return 0;
	}
	/* poll: N completions of WQEs 0..N-1, as the NIC writes them (first lap: owner 0). */
	struct mlx5_cqe64 *cqes = page_alloc((size_t)cnt * sizeof(*cqes));
	for (uint32_t i = 0; i < cnt; i++)
		cqes[i].op_own = MLX5_CQE_INVALID << 4;
	/* poll: requester CQEs; poll_resp: responder SEND CQEs; poll_err: flush error CQEs. */
	uint8_t op = !strcmp(what, "poll_resp") ? MLX5_CQE_RESP_SEND
		   : !strcmp(what, "poll_err")  ? MLX5_CQE_RESP_ERR : MLX5_CQE_REQ;
	for (uint32_t i = 0; i < n; i++) {
		wrid[i & (cnt - 1)] = i;
		cqes[i].wqe_counter = htobe16(i);
		cqes[i].sop_drop_qpn = htobe32(0x108);
		cqes[i].op_own = op << 4;
		if (op == MLX5_CQE_RESP_ERR)
			((struct mlx5_err_cqe *)&cqes[i])->syndrome = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
	}
	struct cq c = { cqes, cnt, 0, page_alloc(64), wrid, cnt - 1 };
	uint32_t errors = 0;
	uint64_t sum = !strcmp(what, "poll1") ? poll1_phase(&c, n, &errors) : poll_phase(&c, n, &errors);
	printf("polled %u, sum %llu, errors %u\n", c.ci, (unsigned long long)sum, errors);
	return (op == MLX5_CQE_RESP_ERR ? errors != n : errors != 0) || sum != (uint64_t)n * (n - 1) / 2;
}
