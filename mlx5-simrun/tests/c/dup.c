/*
 * Duplicated command fds on the emulated device, as the kernel has them:
 * a duplicate (dup, fcntl F_DUPFD_CLOEXEC as Python's os.dup, dup2) names
 * the same file, so the same context: commands written through it reach
 * that context's objects, and the context outlives its first descriptor
 * while a duplicate stays open. ibv_import_device on a duplicate fails
 * with EPROTONOSUPPORT, the kernel's answer for the ioctl-only
 * QUERY_CONTEXT method it lacks. Exit 0 when every check holds.
 */
#include "verbs_util.h"
#include <fcntl.h>
#include <unistd.h>

/* A PD and a CQ made through descriptor `fd` of `ctx`'s file, an MR on the
 * PD made through the context's own descriptor, all destroyed again. */
static void objects_through(struct ibv_context *ctx, int fd)
{
	int own = ctx->cmd_fd;
	ctx->cmd_fd = fd;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	ctx->cmd_fd = own;
	CHECK(pd && cq, "objects through fd %d: %d", fd, errno);
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "an MR on the PD made through fd %d: %d", fd, errno);
	CHECK(!ibv_dereg_mr(mr) && !ibv_destroy_cq(cq) && !ibv_dealloc_pd(pd), "destroy");
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open");
	int fd = ctx->cmd_fd;

	int a = dup(fd);
	int b = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	CHECK(a >= 0 && b >= 0, "dup");
	objects_through(ctx, a);
	objects_through(ctx, b);

	errno = 0;
	CHECK(!ibv_import_device(b) && errno == EPROTONOSUPPORT, "import: errno %d", errno);
	/* (The failed import closed `b`, as libibverbs' context teardown does.) */
	CHECK(!close(a), "close duplicate");
	objects_through(ctx, fd);

	/* The first descriptor replaced by a duplicate of a duplicate: the
	 * context lives on through the duplicate, then through `fd` again. */
	int c = dup(fd);
	CHECK(c >= 0 && dup2(c, fd) == fd, "dup2");
	objects_through(ctx, c);
	objects_through(ctx, fd);
	CHECK(!close(c), "close");
	objects_through(ctx, fd);

	CHECK(!ibv_close_device(ctx), "close device");
	ibv_free_device_list(list);
	printf("dup: all right\n");
	return 0;
}
