/* Helpers shared by the C test programs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>
#include "mlx5r.h"

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); exit(1); } } while (0)
#define OK(e) do { int32_t r_ = (e); if (r_ < 0) { fprintf(stderr, "%s:%d: %s = %d (%s)\n", __FILE__, __LINE__, #e, r_, mlx5r_strerror(r_)); exit(1); } } while (0)

static inline double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Poll until one CQE arrives (the watch-mode NIC runs on its own thread). */
static inline int32_t poll_one(const mlx5r_cq *cq, mlx5r_cqe *out) {
    double end = now_s() + 10.0;
    for (;;) {
        int32_t r = mlx5r_cqe_poll(cq, out);
        if (r != MLX5R_CQE_EMPTY) return r;
        if (now_s() > end) { fprintf(stderr, "no CQE within 10 s\n"); exit(1); }
        sched_yield();
    }
}

static inline void *zalloc(size_t n) {
    void *p = aligned_alloc(4096, n);
    CHECK(p != NULL);
    memset(p, 0, n);
    return p;
}

/* Two simulated hosts (LIDs 1 and 2) whose NICs watch memory (watch mode),
 * a context and a PD on each. */
typedef struct {
    mlx5r_fabric *f;
    mlx5r_context *ca, *cb;
    mlx5r_pd *pa, *pb;
} two_hosts;

static inline two_hosts two_hosts_open(void) {
    two_hosts t;
    OK(mlx5r_sim_fabric_new(MLX5R_SIM_WATCH, &t.f));
    CHECK(mlx5r_sim_add_host(t.f, 1) == 0 && mlx5r_sim_add_host(t.f, 2) == 1);
    OK(mlx5r_sim_open(t.f, 0, &t.ca));
    OK(mlx5r_sim_open(t.f, 1, &t.cb));
    OK(mlx5r_pd_alloc(t.ca, &t.pa));
    OK(mlx5r_pd_alloc(t.cb, &t.pb));
    return t;
}

/* After every QP, CQ and MR of the hosts is freed. */
static inline void two_hosts_close(two_hosts *t) {
    mlx5r_pd_free(t->pa); mlx5r_pd_free(t->pb);
    mlx5r_context_close(t->ca); mlx5r_context_close(t->cb);
    mlx5r_sim_fabric_free(t->f);
}

/* Connect two RC QPs to each other (PSN 0). */
static inline void rc_connect(mlx5r_qp *a, mlx5r_qp *b) {
    mlx5r_remote ia, ib;
    OK(mlx5r_qp_local(a, &ia));
    OK(mlx5r_qp_local(b, &ib));
    OK(mlx5r_qp_connect(a, &ib, 0));
    OK(mlx5r_qp_connect(b, &ia, 0));
}
