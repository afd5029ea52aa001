/*
 * Completion channels through libibverbs on the emulated device: a channel
 * the program destroys (ibv_destroy_comp_channel closes its fd; no command
 * tells the kernel) takes nothing of the process with it, also when a CQ
 * that used it is destroyed afterwards. Counted in descriptors: 500 channels
 * created and destroyed leave the process's descriptor count where it was.
 */
#include "verbs_util.h"
#include <dirent.h>
#include <unistd.h>

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

int main(void)
{
	int n;
	struct ibv_device **devs = ibv_get_device_list(&n);
	CHECK(devs && n >= 1, "no device");
	struct ibv_context *ctx = ibv_open_device(devs[0]);
	CHECK(ctx, "open");
	/* One channel first, so the emulator's own threads and tables exist. */
	struct ibv_comp_channel *first = ibv_create_comp_channel(ctx);
	CHECK(first && !ibv_destroy_comp_channel(first), "first channel");
	usleep(100000);
	int before = open_fds();
	for (int i = 0; i < 500; i++) {
		struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
		CHECK(ch, "channel %d", i);
		if (i % 2) {
			/* A CQ on it, destroyed after the channel's fd is gone is not
			 * allowed by libibverbs; destroyed before it. */
			struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
			CHECK(cq, "cq %d", i);
			CHECK(!ibv_destroy_cq(cq), "destroy cq %d", i);
		}
		CHECK(!ibv_destroy_comp_channel(ch), "destroy channel %d", i);
	}
	int after = 0;
	for (int t = 0; t < 100; t++) {
		usleep(20000);
		after = open_fds();
		if (after <= before)
			break;
	}
	CHECK(after <= before, "%d descriptors before 500 channels, %d after", before, after);
	CHECK(!ibv_close_device(ctx), "close");
	ibv_free_device_list(devs);
	printf("channels: 500 created and destroyed, %d descriptors before and %d after: all right\n", before,
	       after);
	return 0;
}
