/*
 * The emulated kernel's events: completion events to a channel's program
 * end, asynchronous events to the async fd (as ib_uverbs_comp_event_desc /
 * ib_uverbs_async_event_desc), the kernel's accounting of unread events at
 * destroy, and the reaping of channels the program closed. The forwarder
 * thread of device.rs calls the mlx5sk_* functions here.
 */
#include "kern.h"

/*
 * An object is destroyed: the events of it that the program has not read
 * yet leave the queue, and are no longer counted as reported, as the
 * kernel's ib_uverbs_release_ucq / ib_uverbs_release_uevent drop them.
 * libibverbs waits at destroy until it has acknowledged as many events as
 * the response reports. `user_fd` is the program's end of the event
 * socketpair (messages of `size` bytes whose first 8 are the object's
 * handle; with `types`, a bit mask of the async event types that name
 * such an object), `peer` ours.
 */
void sk_drop_unread_events(int user_fd, int peer, size_t size, uint64_t handle, uint32_t types,
			       uint32_t *reported)
{
	enum { KEEP = 1024 };
	uint8_t msg[16];
	uint8_t(*kept)[16] = malloc(KEEP * 16);
	size_t n = 0;
	if (!kept || user_fd < 0 || peer < 0) {
		free(kept);
		return;
	}
	while (recv(user_fd, msg, size, MSG_DONTWAIT) == (ssize_t)size) {
		uint64_t h;
		uint32_t type = 0;
		memcpy(&h, msg, 8);
		if (size >= 12)
			memcpy(&type, msg + 8, 4);
		if (h == handle && (!types || (type < 32 && (types >> type) & 1))) {
			if (*reported)
				(*reported)--;
		} else if (n < KEEP) {
			memcpy(kept[n++], msg, size);
		}
	}
	for (size_t i = 0; i < n; i++)
		send(peer, kept[i], size, MSG_NOSIGNAL | MSG_DONTWAIT);
	free(kept);
}

/* The forwarder (device.rs): completion event of CQ `cqn` on the
 * simulator's channel `chan` of device `dev`, written to the program's end
 * of the channel that owns it as ib_uverbs_comp_event_desc. */
void mlx5sk_comp_event(int dev, uint32_t chan, uint32_t cqn)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; ctxs_ready && i < MAX_CTX; i++) {
		struct ctx *c = &ctxs[i];
		if (c->fd == -1 || c->dev != dev)
			continue;
		for (uint32_t h = 0; h < c->nobjs; h++) {
			struct uobj *o = &c->objs[h];
			if (o->type != OBJ_CQ || o->num != cqn || o->pd == UINT32_MAX ||
			    c->objs[o->pd].sim_chan != chan)
				continue;
			struct ib_uverbs_comp_event_desc d = { .cq_handle = o->user_handle };
			if (send(c->objs[o->pd].peer, &d, sizeof(d), MSG_NOSIGNAL | MSG_DONTWAIT) == sizeof(d))
				o->comp_events++;
		}
	}
	pthread_mutex_unlock(&lock);
}

/* The forwarder: asynchronous event `type` (IBV_EVENT_*) of the CQ (type
 * 0), QP (1) or SRQ (14, 15) numbered `num`, or of the port or device,
 * written to the async fd(s) as ib_uverbs_async_event_desc. */
void mlx5sk_async_event(int dev, uint32_t type, uint32_t num)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; ctxs_ready && i < MAX_CTX; i++) {
		struct ctx *c = &ctxs[i];
		if (c->fd == -1 || c->dev != dev || c->async_peer < 0)
			continue;
		struct ib_uverbs_async_event_desc d = { .event_type = type };
		if (type == 0 || type == 1 || type == 14 || type == 15) {
			uint8_t want = type == 0 ? OBJ_CQ : type >= 14 ? OBJ_SRQ : OBJ_QP;
			for (uint32_t h = 0; h < c->nobjs; h++) {
				struct uobj *o = &c->objs[h];
				if (o->type != want || o->num != num)
					continue;
				d.element = o->user_handle;
				if (send(c->async_peer, &d, sizeof(d), MSG_NOSIGNAL | MSG_DONTWAIT) == sizeof(d))
					o->async_events++;
			}
		} else {
			d.element = type == 8 ? 0 : num; /* the port number for port events */
			send(c->async_peer, &d, sizeof(d), MSG_NOSIGNAL | MSG_DONTWAIT);
		}
	}
	pthread_mutex_unlock(&lock);
}

/* The forwarder, now and then: a completion channel whose program end is
 * closed (ibv_destroy_comp_channel closes it; no command tells the kernel)
 * goes once no CQ uses it, as the kernel drops the channel's file with its
 * last reference. */
void mlx5sk_reap_channels(void)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; ctxs_ready && i < MAX_CTX; i++) {
		struct ctx *c = &ctxs[i];
		if (c->fd == -1)
			continue;
		for (uint32_t h = 0; h < c->nobjs; h++) {
			struct uobj *o = &c->objs[h];
			if (o->type != OBJ_CHANNEL || o->peer < 0)
				continue;
			char b;
			if (recv(o->peer, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 0)
				continue; /* open (EAGAIN), or not a stream end at all */
			int used = 0;
			for (uint32_t k = 0; k < c->nobjs && !used; k++)
				used = c->objs[k].type == OBJ_CQ && c->objs[k].pd == h;
			if (!used)
				sk_obj_destroy(c, h);
		}
	}
	pthread_mutex_unlock(&lock);
}
