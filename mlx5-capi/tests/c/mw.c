/* Memory windows and indirect mkeys through the C ABI on the simulator: B
 * points an indirect mkey at two pieces of its memory and binds a type-2
 * window (mlx5r_umr_wqe); A WRITEs through both; B invalidates the window
 * (LOCAL_INV) and A's next WRITE through it completes with
 * REMOTE_ACCESS_ERR, writing nothing. Memory and completions are checked. */
#include "common.h"

enum { N = 65536 };

static void ok_cqe(const mlx5r_cq *cq, uint8_t wqe_opcode) {
    mlx5r_cqe c;
    CHECK(poll_one(cq, &c) == MLX5R_CQE_OK && c.wqe_opcode == wqe_opcode);
}

int main(void) {
    two_hosts t = two_hosts_open();
    mlx5r_cq_obj *qa_cq, *qb_cq;
    OK(mlx5r_cq_create(t.ca, 64, &qa_cq));
    OK(mlx5r_cq_create(t.cb, 64, &qb_cq));
    const mlx5r_cq *cqa = mlx5r_cq_desc(qa_cq), *cqb = mlx5r_cq_desc(qb_cq);
    uint8_t *la = zalloc(N), *rb = zalloc(N);
    mlx5r_mr *ma, *mb;
    OK(mlx5r_mr_reg(t.pa, la, N, 15, &ma));
    OK(mlx5r_mr_reg(t.pb, rb, N, 15 | MLX5R_ACCESS_MW_BIND, &mb));
    uint32_t lka, lkb;
    OK(mlx5r_mr_keys(ma, &lka, NULL));
    OK(mlx5r_mr_keys(mb, &lkb, NULL));
    mlx5r_qp_attr rc = {.qp_type = MLX5R_QPT_RC, .max_send_wr = 64, .max_recv_wr = 64,
                        .max_send_sge = 4, .max_recv_sge = 4, .max_inline_data = 64};
    mlx5r_qp *qa, *qb;
    OK(mlx5r_qp_create(t.ca, t.pa, qa_cq, qa_cq, NULL, &rc, &qa));
    OK(mlx5r_qp_create(t.cb, t.pb, qb_cq, qb_cq, NULL, &rc, &qb));
    mlx5r_remote ia, ib;
    OK(mlx5r_qp_local(qa, &ia));
    OK(mlx5r_qp_local(qb, &ib));
    OK(mlx5r_qp_connect(qa, &ib, 0));
    OK(mlx5r_qp_connect(qb, &ia, 0));
    const mlx5r_sq *sqa = mlx5r_qp_sq(qa), *sqb = mlx5r_qp_sq(qb);

    /* 1. An indirect mkey over rb[0x3000, +100) then rb[0x1000, +28): A's 128-byte
     * WRITE at its offset 0 lands in both pieces. */
    mlx5r_mkey *mk;
    OK(mlx5r_mkey_create(t.pb, 2, &mk));
    uint32_t key = mlx5r_mkey_key(mk);
    mlx5r_sge pieces[2] = {{(uint64_t)(uintptr_t)(rb + 0x3000), 100, lkb}, {(uint64_t)(uintptr_t)(rb + 0x1000), 28, lkb}};
    mlx5r_umr_wr u = {.wr_id = 1, .op = MLX5R_UMR_MR_LIST, .send_flags = MLX5R_SEND_SIGNALED, .key = key,
                      .access = 15, .sg_list = pieces, .num_sge = 2};
    OK(mlx5r_umr_wqe(sqb, &u));
    mlx5r_db_ring(sqb, 0);
    ok_cqe(cqb, MLX5R_OPCODE_UMR);
    for (int i = 0; i < 128; i++) la[i] = (uint8_t)(i * 5 + 3);
    mlx5r_sge src = {(uint64_t)(uintptr_t)la, 128, lka};
    mlx5r_send_wr w = {.wr_id = 2, .sg_list = &src, .num_sge = 1, .opcode = MLX5R_OPCODE_RDMA_WRITE,
                       .send_flags = MLX5R_SEND_SIGNALED, .remote_addr = 0, .rkey = key};
    OK(mlx5r_send_wqe(sqa, &w));
    mlx5r_db_ring(sqa, 0);
    ok_cqe(cqa, 0x08);
    CHECK(memcmp(rb + 0x3000, la, 100) == 0 && memcmp(rb + 0x1000, la + 100, 28) == 0);

    /* 1b. An interleaved mkey: 16 bytes every 64 from rb[0x4000], then 8 every 16
     * from rb[0x5000], 3 repetitions; A's 72-byte WRITE lands at those strides. */
    mlx5r_mkey *mi;
    OK(mlx5r_mkey_create(t.pb, 2, &mi));
    mlx5r_sge ents[2] = {{(uint64_t)(uintptr_t)(rb + 0x4000), 16, lkb}, {(uint64_t)(uintptr_t)(rb + 0x5000), 8, lkb}};
    uint32_t skips[2] = {48, 8};
    u = (mlx5r_umr_wr){.wr_id = 6, .op = MLX5R_UMR_MR_INTERLEAVED, .send_flags = MLX5R_SEND_SIGNALED,
                       .key = mlx5r_mkey_key(mi), .access = 15, .sg_list = ents, .num_sge = 2,
                       .repeat_count = 3, .skips = skips};
    OK(mlx5r_umr_wqe(sqb, &u));
    mlx5r_db_ring(sqb, 0);
    ok_cqe(cqb, MLX5R_OPCODE_UMR);
    mlx5r_sge s72 = {(uint64_t)(uintptr_t)la, 72, lka};
    w = (mlx5r_send_wr){.wr_id = 7, .sg_list = &s72, .num_sge = 1, .opcode = MLX5R_OPCODE_RDMA_WRITE,
                        .send_flags = MLX5R_SEND_SIGNALED, .remote_addr = 0, .rkey = mlx5r_mkey_key(mi)};
    OK(mlx5r_send_wqe(sqa, &w));
    mlx5r_db_ring(sqa, 0);
    ok_cqe(cqa, 0x08);
    for (int r = 0; r < 3; r++) {
        CHECK(memcmp(rb + 0x4000 + 64 * r, la + 24 * r, 16) == 0);
        CHECK(memcmp(rb + 0x5000 + 16 * r, la + 24 * r + 16, 8) == 0);
        CHECK(rb[0x4000 + 64 * r + 16] == 0);
    }

    /* 2. A type-2 window over rb[0x100, +0x100) with REMOTE_WRITE. */
    mlx5r_mw *mw;
    OK(mlx5r_mw_alloc(t.pb, MLX5R_MW_TYPE_2, &mw));
    uint32_t next, now = mlx5r_mw_rkey(mw, &next);
    CHECK(next == ((now & ~0xffu) | ((now + 1) & 0xff)) && mlx5r_mw_rkey(mw, NULL) == next);
    mlx5r_sge range = {(uint64_t)(uintptr_t)(rb + 0x100), 0x100, lkb};
    u = (mlx5r_umr_wr){.wr_id = 3, .op = MLX5R_UMR_BIND_MW2, .send_flags = MLX5R_SEND_SIGNALED, .key = now,
                       .new_key = next, .access = 2, .sg_list = &range, .num_sge = 1};
    OK(mlx5r_umr_wqe(sqb, &u));
    mlx5r_db_ring(sqb, 0);
    ok_cqe(cqb, MLX5R_OPCODE_UMR);
    mlx5r_sge s64 = {(uint64_t)(uintptr_t)la, 64, lka};
    w = (mlx5r_send_wr){.wr_id = 4, .sg_list = &s64, .num_sge = 1, .opcode = MLX5R_OPCODE_RDMA_WRITE,
                        .send_flags = MLX5R_SEND_SIGNALED | MLX5R_SEND_SMALL_FENCE,
                        .remote_addr = (uint64_t)(uintptr_t)(rb + 0x180), .rkey = next};
    OK(mlx5r_send_wqe(sqa, &w));
    mlx5r_db_ring(sqa, 0);
    ok_cqe(cqa, 0x08);
    CHECK(memcmp(rb + 0x180, la, 64) == 0);

    /* A type-2 bind without its range is refused before a byte is written. */
    u = (mlx5r_umr_wr){.op = MLX5R_UMR_BIND_MW2, .key = next, .new_key = next + 1};
    CHECK(mlx5r_umr_wqe(sqb, &u) == MLX5R_ERR_BAD_UMR);

    /* 3. LOCAL_INV, then the window's key writes nothing. */
    u = (mlx5r_umr_wr){.wr_id = 5, .op = MLX5R_UMR_LOCAL_INV, .send_flags = MLX5R_SEND_SIGNALED, .key = next};
    OK(mlx5r_umr_wqe(sqb, &u));
    mlx5r_db_ring(sqb, 0);
    ok_cqe(cqb, MLX5R_OPCODE_UMR);
    memset(la, 0xee, 64);
    OK(mlx5r_send_wqe(sqa, &w));
    mlx5r_db_ring(sqa, 0);
    mlx5r_cqe c;
    CHECK(poll_one(cqa, &c) == MLX5R_CQE_ERROR && c.syndrome == 0x13);
    CHECK(rb[0x180] != 0xee);

    mlx5r_qp_free(qa);
    mlx5r_qp_free(qb);
    mlx5r_mw_free(mw);
    mlx5r_mkey_free(mk);
    mlx5r_mkey_free(mi);
    mlx5r_mr_free(ma);
    mlx5r_mr_free(mb);
    mlx5r_cq_free(qa_cq);
    mlx5r_cq_free(qb_cq);
    two_hosts_close(&t);
    free(la);
    free(rb);
    printf("mw: ok\n");
    return 0;
}
