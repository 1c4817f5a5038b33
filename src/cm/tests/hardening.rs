//! Issue 10 ("safe inside a long-running daemon"): the engine-level tests,
//! named after the points.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Condvar, Mutex};

use super::*;
use crate::abi::ib_cm_sidr_status::IB_SIDR_UNSUPPORTED;
use crate::cm::worker::queue_event;
use crate::cm::{SidrReqParams, destroy_id, send_sidr_req};

/// Keeps the worker busy: each event for the gate's id blocks its handler
/// until the test has released that many.
#[derive(Default)]
struct Gate {
    entered: AtomicUsize,
    released: Mutex<usize>,
    changed: Condvar,
}

impl Gate {
    fn handler(self: &Arc<Self>) -> Handler {
        let gate = self.clone();
        Arc::new(move |_, _| {
            let n = gate.entered.fetch_add(1, Ordering::AcqRel) + 1;
            let mut released = gate.released.lock();
            while *released < n {
                gate.changed.wait(&mut released);
            }
            0
        })
    }

    /// Queues one more blocking event for `id` (which has `handler()`).
    fn block(&self, id: &Arc<CmIdPriv>) {
        queue_event(id, CmEvent::bare(IB_CM_USER_ESTABLISHED));
    }

    fn wait_entered(&self, n: usize) {
        wait_until("the worker blocks", || {
            self.entered.load(Ordering::Acquire) >= n
        });
    }

    fn release(&self, n: usize) {
        *self.released.lock() = n;
        self.changed.notify_all();
    }
}

#[test]
fn hardening_01_sidr_req_after_listener_destroyed_gets_unsupported() {
    let pair = Pair::new();
    let gate = Arc::new(Gate::default());
    let blocker = super::super::create_id(&pair.b, gate.handler());
    gate.block(&blocker);
    gate.wait_entered(1);
    let params = SidrReqParams {
        path: pair.a.init_path(1, &pair.b.ports[0].gids[0].gid).unwrap(),
        service_id: SERVICE_ID,
        timeout_ms: 60_000,
        private_data: Vec::new(),
        max_cm_retries: 1,
    };
    send_sidr_req(&pair.active, &params).unwrap();
    // Queued behind the SIDR_REQ: its new id is made before this runs, and
    // the new id's event waits behind it.
    gate.block(&blocker);
    gate.release(1);
    gate.wait_entered(2);
    assert_eq!(pair.b.id_count(), 3); // listener, blocker, new id

    destroy_id(&pair.listener, 0);
    gate.release(2);
    let got = pair.rec.wait(Some(&pair.active), IB_CM_SIDR_REP_RECEIVED);
    assert_eq!(got.sidr_status, Some(IB_SIDR_UNSUPPORTED as u8));
    assert_eq!(pair.rec.count(IB_CM_SIDR_REQ_RECEIVED), 0);
    wait_until("the refused id is gone", || pair.b.id_count() == 1);
    destroy_id(&blocker, 0);
    pair.finish(&[]);
}
