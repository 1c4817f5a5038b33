//! The tokio adapter: a device's [`Driver`] on tokio's reactor
//! (`AsyncFd` on the device's eventfd), as a task of the runtime.

use std::future::poll_fn;
use std::os::fd::OwnedFd;
use std::task::Poll;

use tokio::io::unix::AsyncFd;

use super::{Device, Driver};
use crate::api::error::{Error, Result};
use crate::errno::EINVAL;
use crate::refusal::Rule;

/// Events run in one turn of the driver task before it lets the runtime's
/// other tasks run: a burst of requests must not starve the task that
/// accepts them (the listener's backlog is 1024).
const BATCH: usize = 256;

impl Device {
    /// Opens device `name` as [`Device::open`] and spawns its driver on the
    /// current tokio runtime (any flavour; it needs tokio's IO driver,
    /// `enable_io`). The task ends when the device closes. `EINVAL` when
    /// called outside a runtime.
    pub fn open_tokio(name: &str) -> Result<Device> {
        let op = "aio::Device::open_tokio";
        let outside = |_| {
            let rule = Rule::Text("called outside a tokio runtime with IO enabled");
            Error::refused(op, EINVAL, Some(rule))
        };
        let runtime = tokio::runtime::Handle::try_current().map_err(outside)?;
        let (device, driver) = Device::open(name)?;
        let fd = {
            let _in_runtime = runtime.enter();
            register(&driver).map_err(|e| {
                let errno = crate::errno::Errno(e.raw_os_error().unwrap_or(libc::EIO));
                Error::refused(op, errno, None)
            })?
        };
        runtime.spawn(drive(driver, fd));
        Ok(device)
    }
}

impl Driver {
    /// Drives the device on the current tokio runtime until it closes: what
    /// [`Device::open_tokio`] spawns, for a program that spawns it itself.
    pub async fn run_tokio(self) -> std::io::Result<()> {
        let fd = register(&self)?;
        drive(self, fd).await;
        Ok(())
    }
}

/// The driver's eventfd on the current runtime's reactor: a descriptor of
/// its own, so that the registration never outlives the one it names.
fn register(driver: &Driver) -> std::io::Result<AsyncFd<OwnedFd>> {
    crate::os::async_fd::readable(driver.fd.try_clone()?)
}

/// Waits until the eventfd is readable, runs what is pending, and again,
/// until the device closes.
async fn drive(driver: Driver, fd: AsyncFd<OwnedFd>) {
    loop {
        let ready = poll_fn(|cx| {
            if driver.poll_closed(cx).is_ready() {
                return Poll::Ready(None);
            }
            fd.poll_read_ready(cx).map(Some)
        })
        .await;
        let Some(Ok(mut guard)) = ready else {
            return;
        };
        match driver.run_pending(BATCH) {
            None => return,
            // The queue is empty and the eventfd with it: the next event
            // makes it readable again, a new edge for the reactor (a clear
            // never hides one that came meanwhile: tokio clears only the
            // readiness this guard saw).
            Some(n) if n < BATCH => guard.clear_ready(),
            // More may wait: the other tasks first.
            Some(_) => {
                drop(guard);
                tokio::task::yield_now().await;
            }
        }
    }
}
