/* The completion side through the C ABI on the simulator (watch mode: the
 * NICs run on their own threads): a CQ of 128-byte CQEs on a completion
 * channel, armed, woken by a SEND whose 40 bytes are scattered into the CQE
 * (poll(2) on the channel's descriptor, then mlx5r_cqe_poll_scatter);
 * a compressing CQ whose sessions come back one CQE per completion, in
 * order; a CQ that overruns: mlx5r_cq_check and the async CQ error event. */
#include <poll.h>
#include "common.h"

enum { N = 65536, BURST = 40 };

int main(void) {
    two_hosts t = two_hosts_open();
    mlx5r_context *ca = t.ca, *cb = t.cb;
    mlx5r_pd *pa = t.pa, *pb = t.pb;
    uint8_t *la = zalloc(N), *rb = zalloc(N);
    mlx5r_mr *ma, *mb;
    OK(mlx5r_mr_reg(pa, la, N, 15, &ma));
    OK(mlx5r_mr_reg(pb, rb, N, 15, &mb));
    uint32_t lka, lkb, rkb;
    OK(mlx5r_mr_keys(ma, &lka, NULL));
    OK(mlx5r_mr_keys(mb, &lkb, &rkb));

    /* Bad attributes are refused. */
    mlx5r_cq_obj *bad = NULL;
    mlx5r_cq_attr ba = {.cqe = 16, .cqe_size = 96};
    CHECK(mlx5r_cq_create_ex(ca, &ba, &bad) == MLX5R_ERR_INVALID && bad == NULL);
    ba = (mlx5r_cq_attr){.cqe = 16, .compression = 7};
    CHECK(mlx5r_cq_create_ex(ca, &ba, &bad) == MLX5R_ERR_INVALID);

    /* a: a compressing send CQ; b: 128-byte CQEs on a channel. */
    mlx5r_channel *ch;
    OK(mlx5r_channel_create(cb, &ch));
    int fd = mlx5r_channel_fd(ch);
    CHECK(fd >= 0);
    mlx5r_cq_attr aa = {.cqe = 128, .compression = MLX5R_CQE_COMP_HASH};
    mlx5r_cq_attr bb = {.cqe = 16, .cqe_size = 128, .channel = ch};
    mlx5r_cq_obj *acq, *bcq;
    OK(mlx5r_cq_create_ex(ca, &aa, &acq));
    OK(mlx5r_cq_create_ex(cb, &bb, &bcq));
    mlx5r_cq_raw raw;
    OK(mlx5r_cq_raw_get(bcq, &raw));
    CHECK(raw.cqe_size == 128);
    mlx5r_qp_attr rc = {.qp_type = MLX5R_QPT_RC, .max_send_wr = 64, .max_recv_wr = 16, .max_send_sge = 1,
                        .max_recv_sge = 1, .scatter_to_cqe = 1};
    mlx5r_qp *qa, *qb;
    OK(mlx5r_qp_create(ca, pa, acq, acq, NULL, &rc, &qa));
    OK(mlx5r_qp_create(cb, pb, bcq, bcq, NULL, &rc, &qb));
    rc_connect(qa, qb);
    const mlx5r_sq *sq = mlx5r_qp_sq(qa);
    const mlx5r_cq *cqa = mlx5r_cq_desc(acq), *cqb = mlx5r_cq_desc(bcq);
    mlx5r_cqe c;
    uint64_t wr;

    /* Armed, then a SEND of 40 bytes: the event wakes poll(2). */
    mlx5r_sge r0 = {(uint64_t)(uintptr_t)rb, 64, lkb};
    OK(mlx5r_recv_wqe(mlx5r_qp_rq(qb), &r0, 1, 77));
    OK(mlx5r_cq_arm(bcq, 0));
    CHECK(mlx5r_cqe_poll(cqb, &c) == MLX5R_CQE_EMPTY);
    for (int i = 0; i < 40; i++) la[i] = (uint8_t)(i * 5 + 3);
    mlx5r_sge s0 = {(uint64_t)(uintptr_t)la, 40, lka};
    mlx5r_send_wr w = {.wr_id = 1, .sg_list = &s0, .num_sge = 1, .opcode = MLX5R_OPCODE_SEND};
    OK(mlx5r_send_wqe(sq, &w));
    mlx5r_db_ring(sq, 0);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    CHECK(poll(&p, 1, 10000) == 1);
    uint32_t cqn = 0;
    CHECK(mlx5r_channel_get_event(ch, &cqn) == 1 && cqn == raw.cqn);
    CHECK(mlx5r_channel_get_event(ch, &cqn) == 0);
    uint8_t data[64] = {0};
    CHECK(mlx5r_cqe_poll_scatter(cqb, &c, data, 8) != MLX5R_CQE_OK); /* too small: left in the CQ */
    CHECK(mlx5r_cqe_poll_scatter(cqb, &c, data, sizeof data) == MLX5R_CQE_OK);
    CHECK(c.format == 2 && c.byte_cnt == 40 && c.opcode == 2 && memcmp(data, la, 40) == 0);
    CHECK(rb[0] == 0 && rb[39] == 0); /* scattered to the CQE, not the buffer */
    OK(mlx5r_rq_retire(mlx5r_qp_rq(qb), c.wqe_counter, &wr));
    CHECK(wr == 77);

    /* A burst of signaled WRITEs on a's compressing CQ: one CQE each, in order. */
    for (int i = 0; i < BURST; i++) {
        mlx5r_sge g = {(uint64_t)(uintptr_t)(la + 64 * i), 64, lka};
        w = (mlx5r_send_wr){.wr_id = 100 + i, .sg_list = &g, .num_sge = 1, .opcode = MLX5R_OPCODE_RDMA_WRITE,
                            .send_flags = MLX5R_SEND_SIGNALED, .remote_addr = (uint64_t)(uintptr_t)(rb + 4096 + 64 * i),
                            .rkey = rkb};
        OK(mlx5r_send_wqe(sq, &w));
    }
    mlx5r_db_ring(sq, 0);
    /* the SEND above was unsignaled: it is retired with the first WRITE */
    for (int i = 0; i < BURST; i++) {
        CHECK(poll_one(cqa, &c) == MLX5R_CQE_OK && c.format == 0 && c.wqe_opcode == 0x08);
        OK(mlx5r_sq_retire(sq, c.wqe_counter, &wr));
        CHECK(wr == (uint64_t)(100 + i));
    }
    CHECK(mlx5r_cqe_poll(cqa, &c) == MLX5R_CQE_EMPTY);
    CHECK(mlx5r_cq_check(acq) == MLX5R_OK);

    /* Compression across ring laps: a 16-entry compressing CQ lapped about 20
       times by bursts of 1 to 15 WRITEs (one doorbell each), so sessions start
       anywhere, straddle the ring's end, follow one another across laps and
       mix with lone uncompressed CQEs. Each burst comes back one CQE per
       WRITE, in order; a poller that did not give a consumed session's slots
       back (op_own 0xF0) would take a stale title for a new CQE a lap later. */
    mlx5r_cq_obj *zcq;
    mlx5r_cq_attr za = {.cqe = 16, .compression = MLX5R_CQE_COMP_CSUM};
    OK(mlx5r_cq_create_ex(ca, &za, &zcq));
    mlx5r_cq_raw zr;
    OK(mlx5r_cq_raw_get(zcq, &zr));
    mlx5r_qp *qz, *qy;
    mlx5r_qp_attr zq = {.qp_type = MLX5R_QPT_RC, .max_send_wr = 32, .max_recv_wr = 1, .max_send_sge = 1,
                        .max_recv_sge = 1};
    OK(mlx5r_qp_create(ca, pa, zcq, zcq, NULL, &zq, &qz));
    OK(mlx5r_qp_create(cb, pb, bcq, bcq, NULL, &zq, &qy));
    rc_connect(qz, qy);
    const mlx5r_sq *zsq = mlx5r_qp_sq(qz);
    const mlx5r_cq *zdesc = mlx5r_cq_desc(zcq);
    uint64_t next = 0, total = 0;
    for (int r = 0; total < 20 * (uint64_t)zr.cqe_cnt; r++) {
        int n = (r * 7) % 15 + 1;
        for (int i = 0; i < n; i++) {
            mlx5r_sge g = {(uint64_t)(uintptr_t)(la + 64 * i), 64, lka};
            w = (mlx5r_send_wr){.wr_id = next + i, .sg_list = &g, .num_sge = 1, .opcode = MLX5R_OPCODE_RDMA_WRITE,
                                .send_flags = MLX5R_SEND_SIGNALED,
                                .remote_addr = (uint64_t)(uintptr_t)(rb + 4096 + 64 * i), .rkey = rkb};
            OK(mlx5r_send_wqe(zsq, &w));
        }
        mlx5r_db_ring(zsq, 0);
        for (int i = 0; i < n; i++) {
            CHECK(poll_one(zdesc, &c) == MLX5R_CQE_OK && c.format == 0 && c.wqe_opcode == 0x08);
            OK(mlx5r_sq_retire(zsq, c.wqe_counter, &wr));
            CHECK(wr == next + i);
        }
        CHECK(mlx5r_cqe_poll(zdesc, &c) == MLX5R_CQE_EMPTY);
        next += n;
        total += n;
    }
    CHECK(mlx5r_cq_check(zcq) == MLX5R_OK);
    mlx5r_qp_free(qz); mlx5r_qp_free(qy); mlx5r_cq_free(zcq);

    /* Overrun: a 4-entry CQ nobody polls. */
    mlx5r_cq_obj *small;
    mlx5r_cq_attr sa = {.cqe = 3};
    OK(mlx5r_cq_create_ex(ca, &sa, &small));
    mlx5r_cq_raw sr;
    OK(mlx5r_cq_raw_get(small, &sr));
    mlx5r_qp_attr plain = {.qp_type = MLX5R_QPT_RC, .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
                           .max_recv_sge = 1};
    mlx5r_qp *qs, *qt;
    OK(mlx5r_qp_create(ca, pa, small, small, NULL, &plain, &qs));
    OK(mlx5r_qp_create(cb, pb, bcq, bcq, NULL, &plain, &qt));
    rc_connect(qs, qt);
    for (uint32_t i = 0; i < sr.cqe_cnt + 2; i++) {
        mlx5r_sge g = {(uint64_t)(uintptr_t)la, 8, lka};
        w = (mlx5r_send_wr){.wr_id = i, .sg_list = &g, .num_sge = 1, .opcode = MLX5R_OPCODE_RDMA_WRITE,
                            .send_flags = MLX5R_SEND_SIGNALED, .remote_addr = (uint64_t)(uintptr_t)rb, .rkey = rkb};
        OK(mlx5r_send_wqe(mlx5r_qp_sq(qs), &w));
    }
    mlx5r_db_ring(mlx5r_qp_sq(qs), 0);
    double end = now_s() + 10.0;
    while (mlx5r_cq_check(small) == MLX5R_OK) {
        CHECK(now_s() < end);
        sched_yield();
    }
    CHECK(mlx5r_cq_check(small) == MLX5R_ERR_CQ_OVERRUN);
    mlx5r_async_event ev;
    int found = 0;
    while (mlx5r_async_event_get(ca, &ev) == 1)
        found |= ev.event_type == 0 && ev.element == sr.cqn;
    CHECK(found);

    mlx5r_qp_free(qs); mlx5r_qp_free(qt); mlx5r_qp_free(qa); mlx5r_qp_free(qb);
    mlx5r_cq_free(small); mlx5r_cq_free(acq); mlx5r_cq_free(bcq); mlx5r_channel_free(ch);
    mlx5r_mr_free(ma); mlx5r_mr_free(mb); two_hosts_close(&t);
    free(la); free(rb);
    printf("completion: ok\n");
    return 0;
}
