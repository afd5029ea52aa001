/* Every operation through the C ABI on the simulator (watch mode: the NICs
 * notice work from memory): RC WRITE, READ, SEND, SEND_IMM, fetch-and-add,
 * compare-and-swap, an error completion with its syndrome and explained; a UD SEND; a DC
 * WRITE through a DCT on an SRQ. Memory and completions are checked. */
#include "common.h"

enum { N = 65536 };

int main(void) {
    two_hosts t = two_hosts_open();
    mlx5r_context *ca = t.ca, *cb = t.cb;
    mlx5r_pd *pa = t.pa, *pb = t.pb;
    mlx5r_cq_obj *qa_cq, *qb_cq;
    OK(mlx5r_cq_create(ca, 64, &qa_cq));
    OK(mlx5r_cq_create(cb, 64, &qb_cq));
    const mlx5r_cq *cqa = mlx5r_cq_desc(qa_cq), *cqb = mlx5r_cq_desc(qb_cq);
    uint8_t *la = zalloc(N), *rb = zalloc(N);
    mlx5r_mr *ma, *mb;
    OK(mlx5r_mr_reg(pa, la, N, 15, &ma));
    OK(mlx5r_mr_reg(pb, rb, N, 15, &mb));
    uint32_t lka, rkb, lkb;
    OK(mlx5r_mr_keys(ma, &lka, NULL));
    OK(mlx5r_mr_keys(mb, &lkb, &rkb));

    /* RC pair */
    mlx5r_qp_attr rc = {.qp_type = MLX5R_QPT_RC, .max_send_wr = 64, .max_recv_wr = 64,
                        .max_send_sge = 4, .max_recv_sge = 4, .max_inline_data = 64};
    mlx5r_qp *qa, *qb;
    OK(mlx5r_qp_create(ca, pa, qa_cq, qa_cq, NULL, &rc, &qa));
    OK(mlx5r_qp_create(cb, pb, qb_cq, qb_cq, NULL, &rc, &qb));
    mlx5r_remote ia, ib;
    OK(mlx5r_qp_local(qa, &ia));
    OK(mlx5r_qp_local(qb, &ib));
    CHECK(ia.lid == 1 && ib.lid == 2);
    OK(mlx5r_qp_connect(qa, &ib, 0));
    OK(mlx5r_qp_connect(qb, &ia, 0));
    const mlx5r_sq *sq = mlx5r_qp_sq(qa);
    const mlx5r_rq *rqb = mlx5r_qp_rq(qb);
    mlx5r_cqe c;
    uint64_t wr;

    /* A hint before the post: it changes nothing (the post below takes slot 0 and
       its wr-id is retired as usual); a null queue is ignored. */
    mlx5r_sq_prefetch(sq);
    mlx5r_sq_prefetch(NULL);

    /* RDMA WRITE, 2 SGEs */
    for (int i = 0; i < 128; i++) la[i] = (uint8_t)(i * 3 + 1);
    mlx5r_sge sg[2] = {{(uint64_t)(uintptr_t)la, 64, lka}, {(uint64_t)(uintptr_t)(la + 64), 64, lka}};
    mlx5r_send_wr w = {.wr_id = 101, .sg_list = sg, .num_sge = 2, .opcode = MLX5R_OPCODE_RDMA_WRITE,
                       .send_flags = MLX5R_SEND_SIGNALED, .remote_addr = (uint64_t)(uintptr_t)rb, .rkey = rkb};
    OK(mlx5r_send_wqe(sq, &w));
    CHECK(mlx5r_db_ring(sq, 0) == 1);
    CHECK(poll_one(cqa, &c) == MLX5R_CQE_OK && c.opcode == 0 && c.wqe_opcode == 0x08);
    OK(mlx5r_sq_retire(sq, c.wqe_counter, &wr));
    CHECK(wr == 101 && memcmp(la, rb, 128) == 0);

    /* RDMA READ */
    for (int i = 0; i < 64; i++) rb[4096 + i] = (uint8_t)(200 - i);
    mlx5r_sge rd = {(uint64_t)(uintptr_t)(la + 4096), 64, lka};
    w = (mlx5r_send_wr){.wr_id = 102, .sg_list = &rd, .num_sge = 1, .opcode = MLX5R_OPCODE_RDMA_READ,
                        .send_flags = MLX5R_SEND_SIGNALED, .remote_addr = (uint64_t)(uintptr_t)(rb + 4096), .rkey = rkb};
    OK(mlx5r_send_wqe(sq, &w));
    mlx5r_db_ring(sq, MLX5R_DB_BLUEFLAME);
    CHECK(poll_one(cqa, &c) == MLX5R_CQE_OK && c.wqe_opcode == 0x10 && c.byte_cnt == 64);
    OK(mlx5r_sq_retire(sq, c.wqe_counter, &wr));
    CHECK(wr == 102 && memcmp(la + 4096, rb + 4096, 64) == 0);

    /* SEND and SEND_IMM into posted receives (inline for the second) */
    mlx5r_sge r0 = {(uint64_t)(uintptr_t)(rb + 8192), 256, lkb}, r1 = {(uint64_t)(uintptr_t)(rb + 8448), 256, lkb};
    OK(mlx5r_recv_wqe(rqb, &r0, 1, 7));
    OK(mlx5r_recv_wqe(rqb, &r1, 1, 8));
    memcpy(la + 8192, "hello from C", 12);
    mlx5r_sge s0 = {(uint64_t)(uintptr_t)(la + 8192), 12, lka};
    w = (mlx5r_send_wr){.wr_id = 103, .sg_list = &s0, .num_sge = 1, .opcode = MLX5R_OPCODE_SEND};
    OK(mlx5r_send_wqe(sq, &w)); /* unsignaled: retired by the next signaled CQE */
    w = (mlx5r_send_wr){.wr_id = 104, .sg_list = &s0, .num_sge = 1, .opcode = MLX5R_OPCODE_SEND_IMM,
                        .send_flags = MLX5R_SEND_SIGNALED | MLX5R_SEND_INLINE | MLX5R_SEND_SOLICITED, .imm = 0xc0ffee};
    OK(mlx5r_send_wqe(sq, &w));
    CHECK(mlx5r_db_ring(sq, 0) == 1); /* one doorbell for the batch */
    CHECK(poll_one(cqa, &c) == MLX5R_CQE_OK && c.wqe_opcode == 0x0b);
    OK(mlx5r_sq_retire(sq, c.wqe_counter, &wr));
    CHECK(wr == 104);
    CHECK(poll_one(cqb, &c) == MLX5R_CQE_OK && c.opcode == 2 && c.byte_cnt == 12 && c.src_qpn == ia.qpn);
    OK(mlx5r_rq_retire(rqb, c.wqe_counter, &wr));
    CHECK(wr == 7 && memcmp(rb + 8192, "hello from C", 12) == 0);
    CHECK(poll_one(cqb, &c) == MLX5R_CQE_OK && c.opcode == 3 && c.imm == 0xc0ffee && c.solicited == 1);
    OK(mlx5r_rq_retire(rqb, c.wqe_counter, &wr));
    CHECK(wr == 8 && memcmp(rb + 8448, "hello from C", 12) == 0);

    /* Atomics: fetch-and-add then compare-and-swap (host byte order) */
    uint64_t *remote = (uint64_t *)(rb + 12288), *result = (uint64_t *)(la + 12288);
    *remote = 5;
    mlx5r_sge res = {(uint64_t)(uintptr_t)result, 8, lka};
    w = (mlx5r_send_wr){.wr_id = 105, .sg_list = &res, .num_sge = 1, .opcode = MLX5R_OPCODE_ATOMIC_FA,
                        .send_flags = MLX5R_SEND_SIGNALED | MLX5R_SEND_FENCE, .remote_addr = (uint64_t)(uintptr_t)remote,
                        .rkey = rkb, .compare_add = 3};
    OK(mlx5r_send_wqe(sq, &w));
    mlx5r_db_ring(sq, 0);
    CHECK(poll_one(cqa, &c) == MLX5R_CQE_OK && c.wqe_opcode == 0x12);
    OK(mlx5r_sq_retire(sq, c.wqe_counter, &wr));
    CHECK(wr == 105 && *result == 5 && *remote == 8);
    w = (mlx5r_send_wr){.wr_id = 106, .sg_list = &res, .num_sge = 1, .opcode = MLX5R_OPCODE_ATOMIC_CS,
                        .send_flags = MLX5R_SEND_SIGNALED, .remote_addr = (uint64_t)(uintptr_t)remote, .rkey = rkb,
                        .compare_add = 8, .swap = 42};
    OK(mlx5r_send_wqe(sq, &w));
    mlx5r_db_ring(sq, 0);
    CHECK(poll_one(cqa, &c) == MLX5R_CQE_OK && c.wqe_opcode == 0x11);
    OK(mlx5r_sq_retire(sq, c.wqe_counter, &wr));
    CHECK(wr == 106 && *result == 8 && *remote == 42);

    /* Masked atomics: a 4-byte fetch-and-add by 8-bit fields (big-endian in memory),
     * then an 8-byte compare-and-swap of the low 16 bits only (host order) */
    uint8_t *r4 = rb + 12352, *res4 = la + 12352;
    memcpy(r4, "\x01\xff\x7f\x80", 4);
    mlx5r_sge m4 = {(uint64_t)(uintptr_t)res4, 4, lka};
    w = (mlx5r_send_wr){.wr_id = 110, .sg_list = &m4, .num_sge = 1, .opcode = MLX5R_OPCODE_ATOMIC_MASKED_FA,
                        .send_flags = MLX5R_SEND_SIGNALED, .remote_addr = (uint64_t)(uintptr_t)r4, .rkey = rkb,
                        .atomic_bytes = 4, .compare_add = 0x01010180, .field_boundary = 0x80808080};
    OK(mlx5r_send_wqe(sq, &w));
    mlx5r_db_ring(sq, 0);
    CHECK(poll_one(cqa, &c) == MLX5R_CQE_OK && c.wqe_opcode == 0x15 && c.byte_cnt == 4);
    OK(mlx5r_sq_retire(sq, c.wqe_counter, &wr));
    CHECK(wr == 110 && !memcmp(r4, "\x02\x00\x80\x00", 4) && !memcmp(res4, "\x01\xff\x7f\x80", 4));
    *remote = 0x1122334455667788ull;
    w = (mlx5r_send_wr){.wr_id = 111, .sg_list = &res, .num_sge = 1, .opcode = MLX5R_OPCODE_ATOMIC_MASKED_CS,
                        .send_flags = MLX5R_SEND_SIGNALED, .remote_addr = (uint64_t)(uintptr_t)remote, .rkey = rkb,
                        .atomic_bytes = 8, .swap = 0xaaaabbbbccccddddull, .swap_mask = 0xffff};
    OK(mlx5r_send_wqe(sq, &w));
    mlx5r_db_ring(sq, 0);
    CHECK(poll_one(cqa, &c) == MLX5R_CQE_OK && c.wqe_opcode == 0x14 && c.byte_cnt == 8);
    OK(mlx5r_sq_retire(sq, c.wqe_counter, &wr));
    CHECK(wr == 111 && *result == 0x1122334455667788ull && *remote == 0x112233445566ddddull);

    /* Refused before anything is written: the producer does not move */
    uint32_t pi = sq->pi;
    w = (mlx5r_send_wr){.sg_list = &res, .num_sge = 1, .opcode = MLX5R_OPCODE_ATOMIC_FA,
                        .remote_addr = (uint64_t)(uintptr_t)(rb + 12289), .rkey = rkb};
    CHECK(mlx5r_send_wqe(sq, &w) == MLX5R_ERR_BAD_ATOMIC && sq->pi == pi);
    /* A masked atomic whose result buffer is not its width, or of a width not 4 or 8 */
    w = (mlx5r_send_wr){.sg_list = &res, .num_sge = 1, .opcode = MLX5R_OPCODE_ATOMIC_MASKED_FA,
                        .remote_addr = (uint64_t)(uintptr_t)remote, .rkey = rkb, .atomic_bytes = 4};
    CHECK(mlx5r_send_wqe(sq, &w) == MLX5R_ERR_BAD_ATOMIC && sq->pi == pi);
    w.atomic_bytes = 16;
    CHECK(mlx5r_send_wqe(sq, &w) == MLX5R_ERR_BAD_ATOMIC && sq->pi == pi);

    /* UD SEND */
    mlx5r_cq_obj *ua_cq, *ub_cq;
    OK(mlx5r_cq_create(ca, 16, &ua_cq));
    OK(mlx5r_cq_create(cb, 16, &ub_cq));
    mlx5r_qp_attr ud = rc;
    ud.qp_type = MLX5R_QPT_UD;
    mlx5r_qp *ua, *ub;
    OK(mlx5r_qp_create(ca, pa, ua_cq, ua_cq, NULL, &ud, &ua));
    OK(mlx5r_qp_create(cb, pb, ub_cq, ub_cq, NULL, &ud, &ub));
    OK(mlx5r_qp_connect(ua, NULL, 0x11111111));
    OK(mlx5r_qp_connect(ub, NULL, 0x11111111));
    mlx5r_sge ur = {(uint64_t)(uintptr_t)(rb + 16384), 40 + 64, lkb};
    OK(mlx5r_recv_wqe(mlx5r_qp_rq(ub), &ur, 1, 9));
    mlx5r_av av;
    OK(mlx5r_av_ib(2, 0, &av));
    mlx5r_sge us = {(uint64_t)(uintptr_t)la, 64, lka};
    w = (mlx5r_send_wr){.wr_id = 107, .sg_list = &us, .num_sge = 1, .opcode = MLX5R_OPCODE_SEND,
                        .send_flags = MLX5R_SEND_SIGNALED, .av = &av, .remote_qpn = mlx5r_qp_qpn(ub),
                        .remote_qkey = 0x11111111};
    OK(mlx5r_send_wqe(mlx5r_qp_sq(ua), &w));
    mlx5r_db_ring(mlx5r_qp_sq(ua), MLX5R_DB_BLUEFLAME);
    CHECK(poll_one(mlx5r_cq_desc(ua_cq), &c) == MLX5R_CQE_OK);
    CHECK(poll_one(mlx5r_cq_desc(ub_cq), &c) == MLX5R_CQE_OK && c.byte_cnt == 104 && c.src_qpn == mlx5r_qp_qpn(ua));
    CHECK(memcmp(rb + 16384 + 40, la, 64) == 0);

    /* DC WRITE: a DCI on host 0 to a DCT (on an SRQ) on host 1 */
    mlx5r_srq_obj *srq;
    OK(mlx5r_srq_create(cb, pb, 16, 1, &srq));
    mlx5r_cq_obj *da_cq, *db_cq;
    OK(mlx5r_cq_create(ca, 16, &da_cq));
    OK(mlx5r_cq_create(cb, 16, &db_cq));
    mlx5r_qp_attr dct_a = {.qp_type = MLX5R_QPT_DCT, .dc_key = 0xdcdc};
    mlx5r_qp_attr dci_a = {.qp_type = MLX5R_QPT_DCI, .max_send_wr = 16, .max_send_sge = 1, .max_inline_data = 32};
    mlx5r_qp *dct, *dci;
    OK(mlx5r_qp_create(cb, pb, db_cq, db_cq, srq, &dct_a, &dct));
    OK(mlx5r_qp_create(ca, pa, da_cq, da_cq, NULL, &dci_a, &dci));
    OK(mlx5r_qp_connect(dct, NULL, 0));
    OK(mlx5r_qp_connect(dci, NULL, 0));
    CHECK(mlx5r_qp_qpn(dct) != 0);
    memset(la + 20480, 0x5a, 48);
    mlx5r_sge ds = {(uint64_t)(uintptr_t)(la + 20480), 48, lka};
    w = (mlx5r_send_wr){.wr_id = 108, .sg_list = &ds, .num_sge = 1, .opcode = MLX5R_OPCODE_RDMA_WRITE,
                        .send_flags = MLX5R_SEND_SIGNALED, .remote_addr = (uint64_t)(uintptr_t)(rb + 20480),
                        .rkey = rkb, .av = &av, .remote_qpn = mlx5r_qp_qpn(dct), .dc_key = 0xdcdc};
    CHECK(mlx5r_send_wqe(mlx5r_qp_sq(dci), &(mlx5r_send_wr){.opcode = MLX5R_OPCODE_RDMA_WRITE, .sg_list = &ds,
                                                            .num_sge = 1}) == MLX5R_ERR_MISSING_AV);
    OK(mlx5r_send_wqe(mlx5r_qp_sq(dci), &w));
    mlx5r_db_ring(mlx5r_qp_sq(dci), 0);
    CHECK(poll_one(mlx5r_cq_desc(da_cq), &c) == MLX5R_CQE_OK && c.wqe_opcode == 0x08);
    OK(mlx5r_sq_retire(mlx5r_qp_sq(dci), c.wqe_counter, &wr));
    CHECK(wr == 108 && memcmp(rb + 20480, la + 20480, 48) == 0);

    /* An error completion is a result with its syndrome, never "nothing yet" */
    w = (mlx5r_send_wr){.wr_id = 109, .sg_list = &s0, .num_sge = 1, .opcode = MLX5R_OPCODE_RDMA_WRITE,
                        .remote_addr = (uint64_t)(uintptr_t)rb, .rkey = rkb + 77};
    OK(mlx5r_send_wqe(sq, &w));
    mlx5r_db_ring(sq, 0);
    CHECK(poll_one(cqa, &c) == MLX5R_CQE_ERROR && c.status == 1 && c.syndrome == 0x13 && c.qpn == ia.qpn);
    OK(mlx5r_sq_retire(sq, c.wqe_counter, &wr));
    CHECK(wr == 109);

    /* ... explained: by the CQE alone (as on hardware), and with the simulator's words */
    char why[512], sim[1024], want[80], small[16];
    int n = mlx5r_cqe_explain(&c, why, sizeof why);
    CHECK(n > 0 && n == (int)strlen(why) && strstr(why, "RDMA WRITE on QP") && strstr(why, "REMOTE_ACCESS_ERR") &&
          !strstr(why, "What failed"));
    n = mlx5r_cq_explain(qa_cq, &c, sim, sizeof sim);
    snprintf(want, sizeof want, "What failed: rkey 0x%x is not a memory key", rkb + 77);
    CHECK(n == (int)strlen(sim) && strstr(sim, want));
    /* Cut to fit and NUL-terminated, the whole length still returned */
    CHECK(mlx5r_cqe_explain(&c, small, sizeof small) == (int)strlen(why) && strlen(small) == 15 &&
          !memcmp(small, why, 15));
    CHECK(mlx5r_cqe_explain(&c, NULL, 0) == (int)strlen(why) && mlx5r_cqe_explain(NULL, why, 1) < 0);

    mlx5r_qp_free(dci); mlx5r_qp_free(dct); mlx5r_srq_destroy(srq);
    mlx5r_qp_free(ua); mlx5r_qp_free(ub); mlx5r_qp_free(qa); mlx5r_qp_free(qb);
    mlx5r_cq_free(da_cq); mlx5r_cq_free(db_cq); mlx5r_cq_free(ua_cq); mlx5r_cq_free(ub_cq);
    mlx5r_cq_free(qa_cq); mlx5r_cq_free(qb_cq);
    mlx5r_mr_free(ma); mlx5r_mr_free(mb); two_hosts_close(&t);
    free(la); free(rb);
    printf("abi_ops: ok\n");
    return 0;
}
