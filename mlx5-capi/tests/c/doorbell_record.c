/* Watch mode's promise that it notices a send queue's doorbell-record
 * advance with no register store at all (spec §1.5: the record is what the
 * NIC executes up to; the doorbell only wakes it). The program posts
 * through the C ABI, then publishes the producer counter in the doorbell
 * record itself, as a driver that batches without ringing would, and never
 * touches the UAR register: the WRITEs must still complete. */
#include "common.h"

enum { N = 4096, ROUNDS = 8 };

/* The doorbell record word (big-endian, 16 bits of the producer counter),
 * Release-stored after the WQE's bytes (barrier A). */
static void publish_record_only(const mlx5r_sq *sq) {
    uint32_t pi = __atomic_load_n(&sq->pi, __ATOMIC_RELAXED);
    __atomic_store_n(sq->dbrec, __builtin_bswap32(pi & 0xffff), __ATOMIC_RELEASE);
}

int main(void) {
    two_hosts t = two_hosts_open();
    mlx5r_cq_obj *qa_cq, *qb_cq;
    OK(mlx5r_cq_create(t.ca, 64, &qa_cq));
    OK(mlx5r_cq_create(t.cb, 64, &qb_cq));
    const mlx5r_cq *cqa = mlx5r_cq_desc(qa_cq);
    uint8_t *la = zalloc(N), *rb = zalloc(N);
    mlx5r_mr *ma, *mb;
    OK(mlx5r_mr_reg(t.pa, la, N, 15, &ma));
    OK(mlx5r_mr_reg(t.pb, rb, N, 15, &mb));
    uint32_t lka, rkb;
    OK(mlx5r_mr_keys(ma, &lka, NULL));
    OK(mlx5r_mr_keys(mb, NULL, &rkb));
    mlx5r_qp_attr rc = {.qp_type = MLX5R_QPT_RC, .max_send_wr = 16, .max_recv_wr = 1,
                        .max_send_sge = 1, .max_recv_sge = 1};
    mlx5r_qp *qa, *qb;
    OK(mlx5r_qp_create(t.ca, t.pa, qa_cq, qa_cq, NULL, &rc, &qa));
    OK(mlx5r_qp_create(t.cb, t.pb, qb_cq, qb_cq, NULL, &rc, &qb));
    rc_connect(qa, qb);
    const mlx5r_sq *sq = mlx5r_qp_sq(qa);

    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < 64; i++) la[r * 64 + i] = (uint8_t)(r * 7 + i + 1);
        mlx5r_sge sg = {(uint64_t)(uintptr_t)(la + r * 64), 64, lka};
        mlx5r_send_wr w = {.wr_id = 500 + r, .sg_list = &sg, .num_sge = 1, .opcode = MLX5R_OPCODE_RDMA_WRITE,
                           .send_flags = MLX5R_SEND_SIGNALED,
                           .remote_addr = (uint64_t)(uintptr_t)(rb + r * 64), .rkey = rkb};
        OK(mlx5r_send_wqe(sq, &w));
        publish_record_only(sq);
        mlx5r_cqe c;
        uint64_t wr;
        CHECK(poll_one(cqa, &c) == MLX5R_CQE_OK && c.opcode == 0 && c.wqe_opcode == 0x08);
        OK(mlx5r_sq_retire(sq, c.wqe_counter, &wr));
        CHECK(wr == (uint64_t)(500 + r));
        CHECK(memcmp(la + r * 64, rb + r * 64, 64) == 0);
    }
    printf("doorbell_record: %d WRITEs executed from the doorbell record alone: ok\n", ROUNDS);

    mlx5r_qp_free(qa); mlx5r_qp_free(qb);
    mlx5r_mr_free(ma); mlx5r_mr_free(mb);
    mlx5r_cq_free(qa_cq); mlx5r_cq_free(qb_cq);
    two_hosts_close(&t);
    free(la); free(rb);
    return 0;
}
