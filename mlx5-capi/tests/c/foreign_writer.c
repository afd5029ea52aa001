/* A program that writes WQEs with its own code, as one written for mlx5dv
 * does: rdma-core's infiniband/mlx5dv.h helpers build the WQEs into the raw
 * send ring mlx5r_qp_raw_get hands out, plain stores publish the doorbell
 * record and ring the doorbell register (alternating its halves), and the
 * CQ is polled straight from the raw CQE ring. The simulator's NIC threads
 * (watch mode) notice all of it from memory alone. Nothing of the ring
 * core's data path is used. */
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include "common.h"

enum { N = 16384, WQES = 40 };

int main(void) {
    two_hosts t = two_hosts_open();
    mlx5r_context *ca = t.ca, *cb = t.cb;
    mlx5r_pd *pa = t.pa, *pb = t.pb;
    mlx5r_cq_obj *cqa_o, *cqb_o;
    OK(mlx5r_cq_create(ca, 64, &cqa_o));
    OK(mlx5r_cq_create(cb, 64, &cqb_o));
    uint8_t *la = zalloc(N), *rb = zalloc(N);
    mlx5r_mr *ma, *mb;
    OK(mlx5r_mr_reg(pa, la, N, 15, &ma));
    OK(mlx5r_mr_reg(pb, rb, N, 15, &mb));
    uint32_t lka, rkb;
    OK(mlx5r_mr_keys(ma, &lka, NULL));
    OK(mlx5r_mr_keys(mb, NULL, &rkb));
    mlx5r_qp_attr rc = {.qp_type = MLX5R_QPT_RC, .max_send_wr = 16, .max_recv_wr = 16,
                        .max_send_sge = 1, .max_recv_sge = 1};
    mlx5r_qp *qa, *qb;
    OK(mlx5r_qp_create(ca, pa, cqa_o, cqa_o, NULL, &rc, &qa));
    OK(mlx5r_qp_create(cb, pb, cqb_o, cqb_o, NULL, &rc, &qb));
    rc_connect(qa, qb);

    /* What mlx5dv_init_obj would give. */
    mlx5r_qp_raw qp;
    mlx5r_cq_raw cq;
    OK(mlx5r_qp_raw_get(qa, &qp));
    OK(mlx5r_cq_raw_get(cqa_o, &cq));
    CHECK(qp.sq_stride == 64 && qp.bf_size == 256 && qp.bf_reg != NULL && cq.cqe_size == 64);

    uint32_t pi = 0, ci = 0, bf_offset = 0;
    for (int n = 0; n < WQES; n++) {
        for (int i = 0; i < 64; i++) la[n * 64 + i] = (uint8_t)(n + i);
        /* WQE: ctrl, raddr, data (3 DS) at the producer slot */
        uint8_t *wqe = qp.sq_buf + (pi & (qp.sq_wqe_cnt - 1)) * 64;
        struct mlx5_wqe_ctrl_seg *ctrl = (void *)wqe;
        struct mlx5_wqe_raddr_seg *raddr = (void *)(wqe + 16);
        struct mlx5_wqe_data_seg *data = (void *)(wqe + 32);
        raddr->raddr = htobe64((uint64_t)(uintptr_t)(rb + n * 64));
        raddr->rkey = htobe32(rkb);
        raddr->reserved = 0;
        mlx5dv_set_data_seg(data, 64, lka, (uint64_t)(uintptr_t)(la + n * 64));
        mlx5dv_set_ctrl_seg(ctrl, pi, MLX5_OPCODE_RDMA_WRITE, 0, qp.qpn, MLX5_WQE_CTRL_CQ_UPDATE, 3, 0, 0);
        pi += 1;
        /* WQE stores, barrier, doorbell record, barrier, doorbell, barrier */
        __atomic_thread_fence(__ATOMIC_RELEASE);
        qp.dbrec[1] = htobe32(pi & 0xffff);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        *(volatile uint64_t *)(qp.bf_reg + bf_offset) = *(uint64_t *)ctrl;
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        bf_offset ^= qp.bf_size;

        /* poll the CQE with the owner-bit rule */
        double end = now_s() + 10.0;
        struct mlx5_cqe64 *cqe;
        for (;;) {
            cqe = (void *)(cq.buf + (ci & (cq.cqe_cnt - 1)) * 64);
            uint8_t op_own = __atomic_load_n(&cqe->op_own, __ATOMIC_ACQUIRE);
            if ((op_own >> 4) != MLX5_CQE_INVALID && (op_own & 1) == !!(ci & cq.cqe_cnt)) break;
            CHECK(now_s() < end);
            sched_yield();
        }
        CHECK(mlx5dv_get_cqe_opcode(cqe) == MLX5_CQE_REQ);
        CHECK(be16toh(cqe->wqe_counter) == (uint16_t)(pi - 1));
        CHECK((be32toh(cqe->sop_drop_qpn) & 0xffffff) == qp.qpn);
        ci++;
        __atomic_store_n(&cq.dbrec[0], htobe32(ci & 0xffffff), __ATOMIC_RELEASE);
        CHECK(memcmp(rb + n * 64, la + n * 64, 64) == 0);
    }
    mlx5r_qp_free(qa); mlx5r_qp_free(qb);
    mlx5r_cq_free(cqa_o); mlx5r_cq_free(cqb_o);
    mlx5r_mr_free(ma); mlx5r_mr_free(mb); two_hosts_close(&t);
    free(la); free(rb);
    printf("foreign_writer: %d WQEs written with mlx5dv.h, executed from memory: ok\n", WQES);
    return 0;
}
