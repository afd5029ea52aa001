//! Completion channels (`ibv_comp_channel`): an armed CQ
//! ([`crate::CompletionQueue::arm`]) signals its channel on the next
//! (solicited) completion; the channel's file descriptor is readable while
//! events are pending, so it fits `poll(2)`, `epoll` or an async reactor.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::backend::Backend;
use crate::ctx::CtxInner;
use crate::error::{Error, Result};

pub(crate) struct ChannelInner<B: Backend> {
    pub(crate) raw: B::Channel,
    _ctx: Rc<CtxInner<B>>,
}

/// A completion channel. CQs created with it keep it alive.
pub struct CompChannel<B: Backend> {
    pub(crate) inner: Rc<ChannelInner<B>>,
}

impl<B: Backend> std::fmt::Debug for CompChannel<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompChannel").field("fd", &B::channel_fd(&self.inner.raw)).finish()
    }
}

/// One completion event: the CQ that had an armed completion. Events are
/// acknowledged when taken; poll the CQ, then arm it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqEvent {
    /// The CQ number.
    pub cqn: u32,
}

impl<B: Backend> ChannelInner<B> {
    pub(crate) fn ctx(&self) -> &Rc<CtxInner<B>> {
        &self._ctx
    }
}

impl<B: Backend> CompChannel<B> {
    pub(crate) fn new(raw: B::Channel, ctx: Rc<CtxInner<B>>) -> Self {
        CompChannel { inner: Rc::new(ChannelInner { raw, _ctx: ctx }) }
    }

    /// The oldest pending event, without blocking (`ibv_get_cq_event` on
    /// a non-blocking channel, then `ibv_ack_cq_events`).
    pub fn get_event(&self) -> Result<Option<CqEvent>> {
        Ok(B::get_cq_event(&self.inner.raw)?.map(|cqn| CqEvent { cqn }))
    }

    /// Block until an event arrives, at most `timeout` (`None`: forever).
    /// `Ok(None)` when the time ran out.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<Option<CqEvent>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(e) = self.get_event()? {
                return Ok(Some(e));
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(l) if !l.is_zero() => Some(l),
                    _ => return Ok(None),
                },
                None => None,
            };
            if B::channel_progress(&self.inner.raw) {
                std::thread::yield_now();
                continue;
            }
            wait_readable(self.as_raw_fd(), left)?;
        }
    }
}

/// `poll(2)` for readability, at most `timeout`.
pub(crate) fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> Result<bool> {
    Ok(wait_either(fd, None, timeout)? & 1 != 0)
}

/// `poll(2)` on `fd` and, when given, `also` (a device's async fd), at most
/// `timeout`: bit 0 set when `fd` is readable, bit 1 when `also` is.
pub(crate) fn wait_either(fd: RawFd, also: Option<RawFd>, timeout: Option<Duration>) -> Result<u8> {
    let ms = timeout.map_or(-1, |t| t.as_millis().clamp(1, i32::MAX as u128) as i32);
    let mut p = [
        libc::pollfd { fd, events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: also.unwrap_or(-1), events: libc::POLLIN, revents: 0 },
    ];
    let n = if also.is_some() { 2 } else { 1 };
    // SAFETY: `n` valid pollfds for the duration of the call.
    let r = unsafe { libc::poll(p.as_mut_ptr(), n, ms) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(Error::Verbs { op: "poll", errno: e.raw_os_error().unwrap_or(0), msg: e.to_string() });
    }
    Ok(u8::from(p[0].revents != 0) | (u8::from(n == 2 && p[1].revents != 0) << 1))
}

impl<B: Backend> AsRawFd for CompChannel<B> {
    fn as_raw_fd(&self) -> RawFd {
        B::channel_fd(&self.inner.raw)
    }
}

impl<B: Backend> AsFd for CompChannel<B> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor belongs to the channel, which outlives the borrow.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}
