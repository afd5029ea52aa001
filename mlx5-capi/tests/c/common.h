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
