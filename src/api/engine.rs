//! Engines: independent connection managers in one process.

use std::sync::Arc;

use crate::cm;

/// A connection manager: its own cm_id tables, worker thread and timers.
///
/// Every [`Device`](super::Device) is opened in one. [`Device::open`]
/// uses the process's engine, which the C API uses too; an engine of its
/// own ([`Engine::new`]) lets two libraries in one program each keep
/// their connections apart: neither sees the other's ids, listeners or
/// service IDs, and a flood of work in one does not wait behind the other.
/// A device name is open in one engine at a time; the in-process fabric's
/// `loopN` devices are its ports, shared by every engine of the process,
/// so engines on it connect to each other as hosts on a wire do.
///
/// An engine lives while a device opened in it does; its worker thread
/// ends after that.
///
/// ```
/// use ib_cm::{ConnectRequest, Device, Engine, Reply};
///
/// # fn main() -> ib_cm::Result<()> {
/// let (host_a, host_b) = (Engine::new(), Engine::new());
/// let a = Device::open_in(&host_a, "loop20")?;
/// let b = Device::open_in(&host_b, "loop21")?;
/// let listener = b.listen(0x1234)?;
/// let server = std::thread::spawn(move || -> ib_cm::Result<()> {
///     let mut conn = listener.accept()?.accept(Reply::new(0x22))?;
///     conn.next_event()?; // the DREQ
///     conn.reply_disconnect(b"")
/// });
/// let path = a.path_to(1, b.gid(1, 0)?)?;
/// let mut conn = a.connect(ConnectRequest::builder(path, 0x1234, 0x11).build())?;
/// conn.disconnect(b"")?;
/// server.join().unwrap()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Engine(pub(super) Arc<cm::Cm>);

impl Engine {
    /// A new engine, independent of every other.
    pub fn new() -> Engine {
        Engine(cm::Cm::new())
    }

    /// The process's engine: the one [`Device::open`](super::Device::open)
    /// and the C API use.
    pub fn process() -> Engine {
        Engine(cm::Cm::process().clone())
    }

    /// How many cm_ids exist in this engine (listeners and connections the
    /// CM still holds included).
    pub fn id_count(&self) -> usize {
        self.0.id_count()
    }
}

impl Default for Engine {
    fn default() -> Self {
        Engine::new()
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let process = Arc::ptr_eq(&self.0, cm::Cm::process());
        f.debug_struct("Engine").field("process", &process).finish()
    }
}
