//! The completion side for C (step 5): CQs with a configuration (CQE size,
//! compression, completion channel), arming, completion channels with a
//! file descriptor for `poll(2)` / `epoll`, the CQ error check and the
//! device's asynchronous events. Polling itself is in `ring_ops`
//! (`mlx5r_cqe_poll`, `mlx5r_cqe_poll_scatter`).

#![allow(non_camel_case_types)]

use std::os::fd::AsRawFd;

use mlx5_api::sim::Sim;
use mlx5_api::{AsyncEvent, CompChannel, CqConfig, CqeSize, MiniCqeFormat};
use mlx5_hw::Hw;

use crate::codes::*;
use crate::objects::{check_null, err, free, put, Back, CqObj, CtxObj};

/// A completion channel (`mlx5r_channel`).
#[derive(Debug)]
pub struct ChannelObj(Back<CompChannel<Sim>, CompChannel<Hw>>);

/// `mlx5r_cq_attr.compression`: no CQE compression.
pub const MLX5R_CQE_COMP_NONE: u32 = 0;
/// `mlx5r_cq_attr.compression`: on; responder mini-CQEs carry the RSS hash
/// (`MLX5DV_CQE_RES_FORMAT_HASH`).
pub const MLX5R_CQE_COMP_HASH: u32 = 1;
/// `mlx5r_cq_attr.compression`: on; responder mini-CQEs carry the L4
/// checksum (`MLX5DV_CQE_RES_FORMAT_CSUM`).
pub const MLX5R_CQE_COMP_CSUM: u32 = 2;

/// CQ creation attributes (`mlx5r_cq_create_ex`).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct mlx5r_cq_attr {
    /// Entries wanted (rounded up as the device does).
    pub cqe: u32,
    /// 64 (or 0: the default) or 128 bytes per CQE.
    pub cqe_size: u32,
    /// `MLX5R_CQE_COMP_*` (64-byte CQEs only).
    pub compression: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// Where completion events go after `mlx5r_cq_arm` (may be null).
    pub channel: *mut ChannelObj,
}

/// One asynchronous event of a device (`mlx5r_async_event_get`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct mlx5r_async_event {
    /// `enum ibv_event_type` (`IBV_EVENT_CQ_ERR` = 0, `IBV_EVENT_QP_FATAL`
    /// = 1, ..., `IBV_EVENT_DEVICE_FATAL` = 8, `IBV_EVENT_PORT_ERR` = 10).
    pub event_type: u32,
    /// The CQN, QPN or SRQN the event names, or the port number; 0 for
    /// device-wide events.
    pub element: u32,
}

/// The `enum ibv_event_type` value and element of an event.
pub(crate) fn raw_event(e: &AsyncEvent) -> mlx5r_async_event {
    use AsyncEvent::*;
    let (event_type, element) = match *e {
        CqError { cqn } => (0, cqn),
        QpFatal { qpn } => (1, qpn),
        QpRequestError { qpn } => (2, qpn),
        QpAccessError { qpn } => (3, qpn),
        CommEstablished { qpn } => (4, qpn),
        SqDrained { qpn } => (5, qpn),
        PathMigrated { qpn } => (6, qpn),
        PathMigrationError { qpn } => (7, qpn),
        DeviceFatal => (8, 0),
        PortActive { port } => (9, port.into()),
        PortError { port } => (10, port.into()),
        LidChange { port } => (11, port.into()),
        PkeyChange { port } => (12, port.into()),
        SmChange { port } => (13, port.into()),
        SrqError { srqn } => (14, srqn),
        SrqLimitReached { srqn } => (15, srqn),
        QpLastWqeReached { qpn } => (16, qpn),
        ClientReregister { port } => (17, port.into()),
        GidChange { port } => (18, port.into()),
        Other { event_type } => (event_type, 0),
    };
    mlx5r_async_event { event_type, element }
}

/// A completion channel: its descriptor (`mlx5r_channel_fd`) is readable
/// while events are pending.
///
/// # Safety
/// `ctx` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_channel_create(ctx: *mut CtxObj, out: *mut *mut ChannelObj) -> i32 {
    check_null!(ctx, out);
    // SAFETY: caller contract.
    let r = match unsafe { &(*ctx).0 } {
        Back::Sim(c) => c.create_comp_channel().map(Back::Sim),
        Back::Hw(c) => c.create_comp_channel().map(Back::Hw),
    };
    match r {
        // SAFETY: caller contract.
        Ok(ch) => unsafe { put(out, ChannelObj(ch)) },
        Err(e) => err(&e),
    }
}

/// The channel's file descriptor (non-blocking; owned by the channel), or
/// `MLX5R_ERR_INVALID` for a null channel.
///
/// # Safety
/// `ch` is null or live.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_channel_fd(ch: *mut ChannelObj) -> i32 {
    check_null!(ch);
    // SAFETY: caller contract.
    match unsafe { &(*ch).0 } {
        Back::Sim(c) => c.as_raw_fd(),
        Back::Hw(c) => c.as_raw_fd(),
    }
}

/// Take the oldest pending event without blocking: 1 with `*cqn` set (the
/// event is acknowledged; poll that CQ, then arm it again), 0 when none is
/// pending, or a negative error.
///
/// # Safety
/// `ch` is live; `cqn` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_channel_get_event(ch: *mut ChannelObj, cqn: *mut u32) -> i32 {
    check_null!(ch, cqn);
    // SAFETY: caller contract.
    let r = match unsafe { &(*ch).0 } {
        Back::Sim(c) => c.get_event(),
        Back::Hw(c) => c.get_event(),
    };
    match r {
        Ok(Some(e)) => {
            // SAFETY: caller contract.
            unsafe { *cqn = e.cqn };
            1
        }
        Ok(None) => 0,
        Err(e) => err(&e),
    }
}

/// Destroy a channel. CQs created with it keep it alive until they are
/// freed.
///
/// # Safety
/// `ch` is null or live, and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_channel_free(ch: *mut ChannelObj) {
    // SAFETY: caller contract.
    unsafe { free(ch) }
}

fn cq_config<'c, B: mlx5_api::Backend>(
    a: &mlx5r_cq_attr,
    ch: Option<&'c CompChannel<B>>,
) -> Result<CqConfig<'c, B>, i32> {
    let mut c = CqConfig::new(a.cqe);
    c = match a.cqe_size {
        0 | 64 => c,
        128 => c.cqe_size(CqeSize::B128),
        _ => return Err(MLX5R_ERR_INVALID),
    };
    c = match a.compression {
        MLX5R_CQE_COMP_NONE => c,
        MLX5R_CQE_COMP_HASH => c.compressed(MiniCqeFormat::Hash),
        MLX5R_CQE_COMP_CSUM => c.compressed(MiniCqeFormat::Csum),
        _ => return Err(MLX5R_ERR_INVALID),
    };
    if a.reserved != 0 {
        return Err(MLX5R_ERR_INVALID);
    }
    Ok(match ch {
        Some(ch) => c.channel(ch),
        None => c,
    })
}

fn create_cq<B: mlx5_api::Backend>(
    ctx: &mlx5_api::Context<B>,
    a: &mlx5r_cq_attr,
    ch: Option<&CompChannel<B>>,
) -> Result<mlx5_api::CompletionQueue<B, ()>, i32> {
    ctx.create_cq(cq_config(a, ch)?, |_, ()| {}).map_err(|e| err(&e))
}

/// A CQ with a configuration: CQE size, compression, channel. A channel of
/// another backend is `MLX5R_ERR_MISMATCH`; what the device cannot do is
/// `MLX5R_ERR_UNSUPPORTED`.
///
/// # Safety
/// `ctx` is live, `attr` readable (its channel null or live), `out` writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_cq_create_ex(
    ctx: *mut CtxObj,
    attr: *const mlx5r_cq_attr,
    out: *mut *mut CqObj,
) -> i32 {
    check_null!(ctx, attr, out);
    // SAFETY: caller contract.
    let (c, a) = unsafe { (&(*ctx).0, &*attr) };
    // SAFETY: caller contract (null allowed).
    let ch = unsafe { a.channel.as_ref() }.map(|c| &c.0);
    let r = match (c, ch) {
        (Back::Sim(c), None) => create_cq(c, a, None).map(Back::Sim),
        (Back::Sim(c), Some(Back::Sim(ch))) => create_cq(c, a, Some(ch)).map(Back::Sim),
        (Back::Hw(c), None) => create_cq(c, a, None).map(Back::Hw),
        (Back::Hw(c), Some(Back::Hw(ch))) => create_cq(c, a, Some(ch)).map(Back::Hw),
        _ => return MLX5R_ERR_MISMATCH,
    };
    match r {
        // SAFETY: caller contract.
        Ok(q) => unsafe { put(out, CqObj(q)) },
        Err(code) => code,
    }
}

/// Request one completion event on the CQ's channel for the next
/// completion (`solicited_only` non-zero: the next solicited or error one).
/// Poll the CQ after arming: what completed before the arm raises nothing.
///
/// # Safety
/// `cq` is live; the thread that polls it arms it.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_cq_arm(cq: *mut CqObj, solicited_only: u32) -> i32 {
    check_null!(cq);
    // SAFETY: caller contract.
    match unsafe { &(*cq).0 } {
        Back::Sim(q) => q.arm(solicited_only != 0),
        Back::Hw(q) => q.arm(solicited_only != 0),
    }
    MLX5R_OK
}

/// `MLX5R_OK`, or `MLX5R_ERR_CQ_OVERRUN` once the device put the CQ in
/// error (it overran; its QPs are in error too).
///
/// # Safety
/// `cq` is live.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_cq_check(cq: *mut CqObj) -> i32 {
    check_null!(cq);
    // SAFETY: caller contract.
    let r = match unsafe { &(*cq).0 } {
        Back::Sim(q) => q.check(),
        Back::Hw(q) => q.check(),
    };
    match r {
        Ok(()) => MLX5R_OK,
        Err(e) => err(&e),
    }
}

/// Take the device's oldest pending asynchronous event without blocking:
/// 1 with `*out` filled, 0 when none is pending, or a negative error.
///
/// # Safety
/// `ctx` is live; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mlx5r_async_event_get(ctx: *mut CtxObj, out: *mut mlx5r_async_event) -> i32 {
    check_null!(ctx, out);
    // SAFETY: caller contract.
    let r = match unsafe { &(*ctx).0 } {
        Back::Sim(c) => c.async_event(),
        Back::Hw(c) => c.async_event(),
    };
    match r {
        Ok(Some(e)) => {
            // SAFETY: caller contract.
            unsafe { *out = raw_event(&e) };
            1
        }
        Ok(None) => 0,
        Err(e) => err(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbering is verbs.h's `enum ibv_event_type` (spelled out here;
    /// mlx5-hw's layout test checks its constants against the header).
    #[test]
    fn async_events_carry_ibverbs_numbers() {
        assert_eq!(
            raw_event(&AsyncEvent::CqError { cqn: 7 }),
            mlx5r_async_event { event_type: 0, element: 7 }
        );
        assert_eq!(raw_event(&AsyncEvent::DeviceFatal), mlx5r_async_event { event_type: 8, element: 0 });
        assert_eq!(
            raw_event(&AsyncEvent::PortError { port: 1 }),
            mlx5r_async_event { event_type: 10, element: 1 }
        );
        assert_eq!(raw_event(&AsyncEvent::SrqLimitReached { srqn: 3 }).event_type, 15);
        assert_eq!(raw_event(&AsyncEvent::GidChange { port: 2 }).event_type, 18);
    }
}
