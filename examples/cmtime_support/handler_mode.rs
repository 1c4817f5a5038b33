//! `cmtime --api handler`: the phases through `ib_cm::handler`, as the C
//! tool runs them through the C API: each side's handler answers on the
//! library's worker (the passive one sends the REP from inside the REQ and
//! the DREP from inside the DREQ, the active one the RTU from inside the
//! REP), and this thread sends the REQs and DREQs and destroys the ids.
//! Each passive id is adopted in its request, so that it is destroyed in
//! the destroy phase, as the C tool destroys its passive ids.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ib_cm::handler::{CmId, Handler, HandlerId, Verdict};
use ib_cm::{Device, Event, Path, Reply, ReqInfo};

use super::{Bench, Phase, Result, active_qpn, passive_qpn, request};

/// The handler of every active id: connection `id.data()`.
struct ActiveSide(Arc<Bench>);

impl Handler for ActiveSide {
    fn event(&self, id: &CmId, event: Event) -> Verdict {
        let bench = &self.0;
        let i = id.data() as usize;
        match event {
            Event::RepReceived(_) => match id.confirm(&[]) {
                Ok(()) => bench.side_up(i),
                Err(e) => bench.fail(i, Phase::Connect, "confirm", &e),
            },
            Event::DrepReceived { .. } => bench.settle(i, Phase::Disconnect, true),
            Event::TimewaitExit => {}
            Event::DreqError { .. } => {
                bench.fail(i, Phase::Disconnect, "active side", &event.kernel_name())
            }
            other => bench.fail(i, Phase::Connect, "active side", &other.kernel_name()),
        }
        Verdict::Keep
    }
}

/// The listener's handler: connection `id.data()`, named by the REQ's
/// private data.
struct PassiveSide(Arc<Bench>);

impl Handler for PassiveSide {
    fn request(&self, id: &CmId, req: ReqInfo) -> Verdict {
        let bench = &self.0;
        let pd = &req.private_data;
        let i = u32::from_be_bytes([pd[0], pd[1], pd[2], pd[3]]) as usize;
        if i >= bench.conns.len() || req.remote_qpn != active_qpn(i) {
            eprintln!(
                "{}: a REQ for connection {i}: no such connection",
                super::PROG
            );
            return Verdict::Destroy;
        }
        id.set_data(i as u64);
        let Some(owned) = id.adopt() else {
            return Verdict::Destroy;
        };
        *bench.conns[i].handler_ids[1].lock() = Some(owned);
        if let Err(e) = id.reply(&Reply::new(passive_qpn(i))) {
            bench.fail(i, Phase::Connect, "reply", &e);
        }
        Verdict::Keep
    }

    fn event(&self, id: &CmId, event: Event) -> Verdict {
        let bench = &self.0;
        let i = id.data() as usize;
        match event {
            Event::RtuReceived { .. } => bench.side_up(i),
            Event::DreqReceived { .. } => {
                if let Err(e) = id.reply_disconnect(&[]) {
                    bench.fail(i, Phase::Disconnect, "reply_disconnect", &e);
                }
            }
            Event::TimewaitExit => {}
            other => bench.fail(i, Phase::Connect, "passive side", &other.kernel_name()),
        }
        Verdict::Keep
    }
}

/// The active side's phases for connections `range`.
struct Active {
    bench: Arc<Bench>,
    device: Device,
    path: Path,
    handler: Arc<ActiveSide>,
}

impl Active {
    fn create(&self, range: std::ops::Range<usize>) -> Result {
        for i in range {
            let c = &self.bench.conns[i];
            c.start[Phase::Create as usize].store(self.bench.stamp(), Ordering::Relaxed);
            let id = self.device.create_id_with(self.handler.clone())?;
            id.set_data(i as u64);
            c.end[Phase::Create as usize].store(self.bench.stamp(), Ordering::Relaxed);
            *c.handler_ids[0].lock() = Some(id);
        }
        Ok(())
    }

    async fn connect(&self, range: std::ops::Range<usize>) -> Result {
        self.bench.reset_counts(range.len());
        let n = range.len();
        for i in range {
            let c = &self.bench.conns[i];
            c.start[Phase::Connect as usize].store(self.bench.stamp(), Ordering::Relaxed);
            let sent = match &*c.handler_ids[0].lock() {
                Some(id) => id.request(request(self.path, i)),
                None => continue,
            };
            if let Err(e) = sent {
                self.bench.fail(i, Phase::Connect, "request", &e);
            }
        }
        self.bench.wait_settled(Phase::Connect, n).await
    }

    async fn disconnect(&self, range: std::ops::Range<usize>) -> Result {
        self.bench.reset_counts(range.len());
        let n = range.len();
        for i in range {
            let c = &self.bench.conns[i];
            c.start[Phase::Disconnect as usize].store(self.bench.stamp(), Ordering::Relaxed);
            let sent = match &*c.handler_ids[0].lock() {
                Some(id) => id.send_disconnect(&[]),
                None => continue,
            };
            if let Err(e) = sent {
                self.bench.fail(i, Phase::Disconnect, "send_disconnect", &e);
            }
        }
        self.bench.wait_settled(Phase::Disconnect, n).await
    }

    fn destroy(&self, range: std::ops::Range<usize>) {
        for i in range {
            let c = &self.bench.conns[i];
            let ids: [Option<HandlerId>; 2] = [c.handler_ids[0].lock().take(), {
                c.handler_ids[1].lock().take()
            }];
            c.start[Phase::Destroy as usize].store(self.bench.stamp(), Ordering::Relaxed);
            drop(ids);
            c.end[Phase::Destroy as usize].store(self.bench.stamp(), Ordering::Relaxed);
        }
    }
}

/// The four phases for `n` connections (after the warm-up one, index `n`),
/// as the async mode's `main` runs them: the phases' start times and the
/// resident set before, after create and once connected.
pub async fn run(
    bench: Arc<Bench>,
    active_dev: &str,
    passive_dev: &str,
    n: usize,
    warmup: bool,
) -> Result<([u64; 4], [u64; 3])> {
    let passive_device = Device::open(passive_dev)?;
    let _listener =
        passive_device.listen_with(super::SERVICE_ID, Arc::new(PassiveSide(bench.clone())))?;
    let device = Device::open(active_dev)?;
    let path = device.path_to(1, passive_device.gid(1, 0)?)?;
    let active = Active {
        bench: bench.clone(),
        device,
        path,
        handler: Arc::new(ActiveSide(bench.clone())),
    };
    if warmup {
        active.create(n..n + 1)?;
        active.connect(n..n + 1).await?;
        active.disconnect(n..n + 1).await?;
        active.destroy(n..n + 1);
    }
    let mut starts = [0u64; 4];
    let before = super::rss_bytes();
    starts[0] = bench.stamp();
    active.create(0..n)?;
    let created = super::rss_bytes();
    starts[1] = bench.stamp();
    active.connect(0..n).await?;
    let connected = super::rss_bytes();
    starts[2] = bench.stamp();
    active.disconnect(0..n).await?;
    starts[3] = bench.stamp();
    active.destroy(0..n);
    Ok((starts, [before, created, connected]))
}
