//! A cm_id: the C-visible `struct ib_cm_id` followed by the engine's private
//! state (the kernel's `struct cm_id_private`).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, MutexGuard};

use super::device::Device;
use super::event::CmEvent;
use super::listen::BacklogSlot;
use crate::abi::{ib_cm_lap_state, ib_cm_state};
use crate::errno::{CmResult, EINVAL};
use crate::refusal::{Rule, refuse};
use crate::timer::TimerId;
use crate::transport::MadAddr;
use crate::wire::Mad;

/// Runs an event's handler; returns what the handler returned.
pub type Handler = Arc<dyn Fn(&Arc<CmIdPriv>, &CmEvent) -> i32 + Send + Sync>;

/// `struct ib_cm_id` as the engine sees it: the same 56 bytes, with atomics so
/// that C may read `state` or write `context` while the engine works. The C
/// pointer handed out is the address of this struct.
#[repr(C)]
#[derive(Default)]
pub struct PublicId {
    /// `ib_cm_handler cm_handler` (a function pointer; 0 = NULL).
    pub cm_handler: AtomicUsize,
    /// `void *context`.
    pub context: AtomicUsize,
    /// `struct ib_device *device`.
    pub device: AtomicUsize,
    /// `__be64 service_id`.
    pub service_id: AtomicU64,
    /// `enum ib_cm_state state`.
    pub state: AtomicI32,
    /// `enum ib_cm_lap_state lap_state`.
    pub lap_state: AtomicI32,
    /// `__be32 local_id`.
    pub local_id: AtomicU32,
    /// `__be32 remote_id`.
    pub remote_id: AtomicU32,
    /// `u32 remote_cm_qpn`.
    pub remote_cm_qpn: AtomicU32,
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<PublicId>() == size_of::<crate::abi::ib_cm_id>());
    assert!(offset_of!(PublicId, service_id) == 24);
    assert!(offset_of!(PublicId, state) == 32);
    assert!(offset_of!(PublicId, local_id) == 40);
    assert!(offset_of!(PublicId, remote_cm_qpn) == 48);
};

/// The address a connection's MADs go to (the kernel's `struct cm_av`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Av {
    pub port_num: u8,
    pub addr: MadAddr,
    /// The 5-bit IBA local ACK timeout exponent; timewait lasts
    /// `convert_to_ms(timeout)`.
    pub timeout: u8,
    /// The path's static rate (`enum ib_rate`), for the QP's address.
    pub rate: u8,
}

/// The one tracked, retransmitted MAD of an id (`cm_id_priv->msg`). Boxed in
/// `CmIdInner`: one pointer in an id that has none outstanding (most live
/// ids). The MAD is shared with the copy in flight on the in-process fabric.
pub struct TrackedMsg {
    pub mad: Arc<Mad>,
    pub av: Av,
    /// The state the id was in when this MAD was sent; it is retransmitted and
    /// its timeout reported only while the id stays there.
    pub sent_in: ib_cm_state,
    pub retries_left: u8,
    pub timeout_ms: u32,
    pub timer: TimerId,
}

/// The lock-protected state of a cm_id (`cm_id_priv` fields under its lock).
#[derive(Default)]
pub struct CmIdInner {
    /// Host-order comm IDs (the public struct holds them big-endian).
    pub local_id: u32,
    pub remote_id: u32,
    pub service_id: u64,
    pub av: Av,
    /// The alternate path's address (`cm_id_priv->alt_av`): from the REQ (either
    /// side) or a LAP; all zero (no LID, no port) when there is none.
    /// `IB_EVENT_PATH_MIG` copies it into `av`.
    pub alt_av: Av,
    pub tid: u64,
    pub timeout_ms: u32,
    pub max_cm_retries: u8,
    /// `ibcm_set_disconnect_timeout()`: the DREQ's retransmission interval
    /// and retries, instead of those from connection setup.
    pub disconnect_timeout: Option<(u32, u8)>,
    pub local_qpn: u32,
    pub remote_qpn: u32,
    pub remote_ca_guid: u64,
    pub qp_type: i32,
    pub initiator_depth: u8,
    pub responder_resources: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub path_mtu: u8,
    pub pkey: u16,
    pub sq_psn: u32,
    pub rq_psn: u32,
    pub target_ack_delay: u8,
    /// Connection setup created a `timewait_info`: the id is (or may be) in the
    /// remote-id / remote-QPN tables (`*_linked`) until timewait or idle.
    pub has_timewait_info: bool,
    /// Private data kept for re-sending an RTU, DREP or MRA.
    pub private_data: Box<[u8]>,
    /// `cm_id_priv->service_timeout`: what an MRA re-sent for a duplicate
    /// carries (`ib_send_cm_mra`'s, or `CM_MRA_SETTING`).
    pub mra_service_timeout: u8,
    /// How long the peer waits for our answer to its REQ or REP before it
    /// resends it (its response timeout exponent): what an automatic MRA
    /// (`mra::auto_mra`) is measured against.
    pub peer_response_timeout: u8,
    /// When and from where the peer's REQ (passive side) or REP (active
    /// side) came: only the peer's retransmission of it gets an automatic
    /// MRA (`mra::PeerMsg`).
    pub peer_msg: Option<super::mra::PeerMsg>,
    pub msg: Option<Box<TrackedMsg>>,
    pub remote_id_linked: bool,
    pub remote_qpn_linked: bool,
    /// The timer of the current timewait: a timewait timer fires only if it
    /// is still this one (not one of an earlier timewait).
    pub timewait_timer: Option<TimerId>,
    /// Listener sharing count (`listen_sharecount`).
    pub listen_sharecount: u32,
    /// A new id's place in its listener's backlog, until its request event
    /// has been handled (beyond the kernel).
    pub backlog_slot: Option<BacklogSlot>,
    /// The id sent a request (REQ or SIDR_REQ) or was made for one it
    /// received: its next one starts from a fresh identity
    /// (`renew_identity`).
    pub used: bool,
}

/// A cm_id. `#[repr(C)]` with `public` first: the C `struct ib_cm_id *` is the
/// address of this object.
#[repr(C)]
pub struct CmIdPriv {
    pub public: PublicId,
    /// This id itself, for timers and events armed from under its lock.
    pub me: Weak<CmIdPriv>,
    pub device: Arc<Device>,
    pub handler: Handler,
    inner: Mutex<CmIdInner>,
    /// Held while this id's handler runs, and while a handler of a new id
    /// this listener made runs (REQ_RECEIVED, SIDR_REQ_RECEIVED);
    /// `ib_destroy_cm_id` takes it to wait for them. Lock order: a
    /// listener's before its new id's.
    pub(super) callback: Mutex<()>,
    /// Set under the id lock when `ib_destroy_cm_id` starts: from then on
    /// every entry point refuses the id ([`CmIdPriv::lock_live`]) and no
    /// handler of it starts.
    pub(super) destroyed: AtomicBool,
    /// A listener's new ids waiting for its user's answer (their
    /// `BacklogSlot`s).
    pub(super) backlog: AtomicUsize,
    /// The Rust handler API's value for its user (`CmId::set_data`), the
    /// kernel's `cm_id->context` for a handler; C's `context` stays C's.
    pub api_data: AtomicU64,
}

impl CmIdPriv {
    pub(super) fn new(
        me: Weak<CmIdPriv>,
        device: Arc<Device>,
        handler: Handler,
        inner: CmIdInner,
    ) -> Self {
        let public = PublicId::default();
        public.remote_cm_qpn.store(1, Ordering::Relaxed);
        public
            .local_id
            .store(inner.local_id.to_be(), Ordering::Relaxed);
        public
            .device
            .store(Arc::as_ptr(&device) as usize, Ordering::Relaxed);
        Self {
            public,
            me,
            device,
            handler,
            inner: Mutex::new(inner),
            callback: Mutex::new(()),
            destroyed: AtomicBool::new(false),
            backlog: AtomicUsize::new(0),
            api_data: AtomicU64::new(0),
        }
    }

    /// The address C knows this id by.
    pub fn addr(self: &Arc<Self>) -> usize {
        Arc::as_ptr(self) as usize
    }

    /// Takes the id lock (the kernel's `cm_id_priv->lock`).
    pub fn lock(&self) -> Locked<'_> {
        Locked {
            id: self,
            inner: self.inner.lock(),
        }
    }

    /// Takes the id lock for an entry point of the API: `-EINVAL` once
    /// `ib_destroy_cm_id` has started, so a call that found the id just
    /// before it was destroyed cannot bring it back (listen, send a request).
    pub fn lock_live(&self) -> CmResult<Locked<'_>> {
        let l = self.lock();
        if self.is_destroyed() {
            return Err(refuse(EINVAL, Rule::Text("being destroyed")));
        }
        Ok(l)
    }

    /// The current state, read without the lock (for diagnostics and tests).
    pub fn state(&self) -> ib_cm_state {
        state_from_i32(self.public.state.load(Ordering::Acquire))
    }

    pub fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }
}

/// A locked cm_id: what the kernel's `*_locked` functions get.
pub struct Locked<'a> {
    pub id: &'a CmIdPriv,
    pub inner: MutexGuard<'a, CmIdInner>,
}

impl Locked<'_> {
    pub fn state(&self) -> ib_cm_state {
        self.id.state()
    }

    /// Moves the id to `state`; `why` (what happened: "REQ sent", "DREP
    /// received", "destroyed") is for the log line of the change.
    pub fn set_state(&mut self, state: ib_cm_state, why: &'static str) {
        let old = self.state();
        self.id.public.state.store(state as i32, Ordering::Release);
        if old != state {
            super::trace::state_change(self, old, state, why);
        }
    }

    pub fn lap_state(&self) -> i32 {
        self.id.public.lap_state.load(Ordering::Relaxed)
    }

    pub fn set_lap_state(&mut self, lap: ib_cm_lap_state) {
        self.id
            .public
            .lap_state
            .store(lap as i32, Ordering::Relaxed);
    }

    pub fn set_remote_id(&mut self, remote_id: u32) {
        self.inner.remote_id = remote_id;
        self.id
            .public
            .remote_id
            .store(remote_id.to_be(), Ordering::Relaxed);
    }

    pub fn set_service_id(&mut self, service_id: u64) {
        self.inner.service_id = service_id;
        self.id
            .public
            .service_id
            .store(service_id.to_be(), Ordering::Relaxed);
    }

    /// Copies the C-visible `cm_handler` and `context` of `from` (a listener
    /// handing a new id to its user).
    pub fn inherit_user_fields(&mut self, from: &CmIdPriv) {
        let p = &self.id.public;
        p.cm_handler.store(
            from.public.cm_handler.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        p.context.store(
            from.public.context.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
    }
}

/// The engine stores only valid states, so this is total.
pub(crate) fn state_from_i32(v: i32) -> ib_cm_state {
    use ib_cm_state::*;
    const ALL: [ib_cm_state; 16] = [
        IB_CM_IDLE,
        IB_CM_LISTEN,
        IB_CM_REQ_SENT,
        IB_CM_REQ_RCVD,
        IB_CM_MRA_REQ_SENT,
        IB_CM_MRA_REQ_RCVD,
        IB_CM_REP_SENT,
        IB_CM_REP_RCVD,
        IB_CM_MRA_REP_SENT,
        IB_CM_MRA_REP_RCVD,
        IB_CM_ESTABLISHED,
        IB_CM_DREQ_SENT,
        IB_CM_DREQ_RCVD,
        IB_CM_TIMEWAIT,
        IB_CM_SIDR_REQ_SENT,
        IB_CM_SIDR_REQ_RCVD,
    ];
    ALL.get(v as usize).copied().unwrap_or(IB_CM_IDLE)
}

impl std::fmt::Debug for CmIdPriv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmIdPriv")
            .field("device", &self.device.name)
            .field(
                "local_id",
                &format_args!(
                    "{:#x}",
                    u32::from_be(self.public.local_id.load(Ordering::Relaxed))
                ),
            )
            .field("state", &self.state())
            .finish()
    }
}
