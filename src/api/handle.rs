//! An id the API owns, and how the engine's events reach its queue.
//!
//! Every handler here only converts and queues: it never waits on user code,
//! so the engine's worker (or, in event-fd mode, the thread that runs the
//! device's events) is never held up by a caller that is slow to look.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::device::DeviceShared;
use super::event::{Event, ReqInfo};
use super::listener::IncomingRequest;
use super::queue::Queue;
use super::sidr::IncomingSidrRequest;
use crate::abi::ib_cm_event_type::IB_CM_TIMEWAIT_EXIT;
use crate::cm;
use crate::cm::LISTEN_BACKLOG;
use crate::cm::event::{CmEvent, EventParam, SidrReqRcvd};
use crate::cm::id::{CmIdPriv, Handler};
use crate::errno::CmResult;

/// A cm_id owned by a value of the API, with its event queue. Dropping it
/// destroys the id as `ib_destroy_cm_id` does in its state (REJ from the
/// setup states, DREQ from ESTABLISHED, DREP from DREQ_RCVD). That waits
/// only for a handler of the id that is running, and those only queue.
pub(super) struct IdHandle {
    pub(super) id: Arc<CmIdPriv>,
    pub(super) events: Arc<Queue<Event>>,
    /// Where a listener's router finds this id's queue, for a passive id.
    _route: Option<ChildRoute>,
    /// Keeps the device open while the id lives (dropped after it).
    _device: Arc<DeviceShared>,
}

impl Drop for IdHandle {
    fn drop(&mut self) {
        super::error::destroy(&self.id);
        // `_route` goes next: no handler of the id runs any more.
    }
}

impl IdHandle {
    /// A new id of `device` whose events go to their own queue.
    pub(super) fn create(device: &Arc<DeviceShared>) -> CmResult<Self> {
        let events: Arc<Queue<Event>> = Arc::default();
        let sink = Arc::downgrade(&events);
        let handler: Handler = Arc::new(move |_, ev| {
            if let Some(queue) = sink.upgrade() {
                push_event(&queue, ev);
            }
            0
        });
        let id = cm::create_id(&device.engine, handler)?;
        Ok(Self {
            id,
            events,
            _route: None,
            _device: device.clone(),
        })
    }

    /// The id's state.
    pub(super) fn state(&self) -> super::State {
        self.id.state().into()
    }
}

/// Queues the connection event `ev` stands for; a connection's last event
/// ends its queue.
fn push_event(queue: &Queue<Event>, ev: &CmEvent) {
    if let Some(event) = Event::from_engine(ev) {
        queue.push(event, ev.event == IB_CM_TIMEWAIT_EXIT);
    }
}

/// A listener's handler: the REQs (or SIDR_REQs) for it, and the events
/// of the ids they made (a new id has its listener's handler, as in the
/// kernel).
pub(super) struct Router {
    /// A connection listener's queue (dangling for a SIDR listener).
    requests: Weak<Queue<IncomingRequest>>,
    /// A SIDR listener's queue (dangling for a connection listener).
    sidr_requests: Weak<Queue<IncomingSidrRequest>>,
    device: Weak<DeviceShared>,
    /// Each passive id's queue; an entry goes with the id's `IdHandle`.
    children: Mutex<Children>,
}

/// The queues of a listener's passive ids, in slots: a passive id's
/// `context` (the C API's field, which nothing else uses for an id of
/// this API) holds its slot's number plus one, so that its events find
/// their queue without a search.
#[derive(Default)]
struct Children {
    slots: Vec<Option<Weak<Queue<Event>>>>,
    free: Vec<usize>,
}

impl Children {
    fn insert(&mut self, queue: Weak<Queue<Event>>) -> usize {
        match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(queue);
                slot
            }
            None => {
                self.slots.push(Some(queue));
                self.slots.len() - 1
            }
        }
    }

    fn get(&self, slot: usize) -> Option<Arc<Queue<Event>>> {
        self.slots.get(slot)?.as_ref()?.upgrade()
    }

    fn remove(&mut self, slot: usize) {
        if let Some(entry) = self.slots.get_mut(slot)
            && entry.take().is_some()
        {
            self.free.push(slot);
        }
    }
}

/// The slot of the passive id `id` (`None`: it has none yet).
fn child_slot(id: &CmIdPriv) -> Option<usize> {
    id.public.context.load(Ordering::Acquire).checked_sub(1)
}

/// A passive id's entry in its listener's router.
struct ChildRoute {
    router: Arc<Router>,
    slot: usize,
}

impl Drop for ChildRoute {
    fn drop(&mut self) {
        if super::error::in_forked_child() {
            return;
        }
        self.router.children.lock().remove(self.slot);
    }
}

impl Router {
    /// The handler of a listener whose REQs go to `requests` and whose
    /// SIDR_REQs go to `sidr_requests` (a listener has one of them; a
    /// request for the other, dangling one is refused).
    pub(super) fn handler(
        requests: Weak<Queue<IncomingRequest>>,
        sidr_requests: Weak<Queue<IncomingSidrRequest>>,
        device: &Arc<DeviceShared>,
    ) -> Handler {
        let router = Arc::new(Router {
            requests,
            sidr_requests,
            device: Arc::downgrade(device),
            children: Mutex::default(),
        });
        Arc::new(move |id, ev| router.deliver(id, ev))
    }

    fn deliver(self: &Arc<Self>, id: &Arc<CmIdPriv>, ev: &CmEvent) -> i32 {
        match &ev.param {
            EventParam::ReqRcvd(r) => self.new_request(id, ev, r),
            EventParam::SidrReqRcvd(r) => self.new_sidr_request(id, ev, r),
            _ => {
                let queue = child_slot(id).and_then(|slot| self.children.lock().get(slot));
                if let Some(queue) = queue {
                    push_event(&queue, ev);
                }
                0
            }
        }
    }

    /// A REQ made `id`: it waits in the listener's queue as an
    /// [`IncomingRequest`]. Beyond [`LISTEN_BACKLOG`] unanswered ones the
    /// REQ is forgotten and counted as the engine's own overflow is (the
    /// peer's retransmission gets another chance); with the listener gone,
    /// or for a SIDR listener, it is rejected.
    fn new_request(
        self: &Arc<Self>,
        id: &Arc<CmIdPriv>,
        ev: &CmEvent,
        r: &crate::cm::event::ReqRcvd,
    ) -> i32 {
        let (Some(requests), Some(device)) = (self.requests.upgrade(), self.device.upgrade())
        else {
            return -libc::ECONNREFUSED;
        };
        if backlog_full(requests.len(), id, r.port) {
            return -libc::ENOMEM;
        }
        let events: Arc<Queue<Event>> = Arc::default();
        let slot = self.children.lock().insert(Arc::downgrade(&events));
        // Read by this id's next events, which run after this one.
        id.public.context.store(slot + 1, Ordering::Release);
        let service_id = u64::from_be(id.public.service_id.load(Ordering::Relaxed));
        let pd = ev.private_data().map(<[u8]>::to_vec).unwrap_or_default();
        let handle = IdHandle {
            id: id.clone(),
            events,
            _route: Some(ChildRoute {
                router: self.clone(),
                slot,
            }),
            _device: device,
        };
        let req = ReqInfo::new(service_id, r, pd);
        requests.push(IncomingRequest::new(handle, req), false);
        0
    }

    /// A SIDR_REQ made `id`: it waits in a SIDR listener's queue as an
    /// [`IncomingSidrRequest`]. For a connection listener, or with the
    /// listener gone, it is refused (a SIDR_REP `IB_SIDR_REJECT`, as for a
    /// C handler that refuses it); beyond [`LISTEN_BACKLOG`] unanswered
    /// ones too, counted as the engine's own overflow is.
    fn new_sidr_request(&self, id: &Arc<CmIdPriv>, ev: &CmEvent, r: &SidrReqRcvd) -> i32 {
        let (Some(requests), Some(device)) = (self.sidr_requests.upgrade(), self.device.upgrade())
        else {
            return -libc::ECONNREFUSED;
        };
        if backlog_full(requests.len(), id, r.port) {
            return -libc::ENOMEM;
        }
        let request = IncomingSidrRequest::new(id.clone(), device, ev, r);
        requests.push(request, false);
        0
    }
}

/// Whether a listener's queue already holds [`LISTEN_BACKLOG`] requests
/// nobody took: the caller then refuses the new one with `-ENOMEM`, and
/// it is counted as the engine's own listen overflow is.
fn backlog_full(queued: usize, id: &CmIdPriv, port: u8) -> bool {
    if queued < LISTEN_BACKLOG {
        return false;
    }
    if let Ok(counters) = id.device.counters(port) {
        counters.rx_listen_overflows.fetch_add(1, Ordering::Relaxed);
    }
    true
}
