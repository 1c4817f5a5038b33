//! Delivering an engine event to a C `ib_cm_handler`.

use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::path;
use crate::abi::{
    CIntAprStatus, CIntRejReason, CIntSidrStatus, ib_cm_apr_event_param, ib_cm_event,
    ib_cm_event_param, ib_cm_id, ib_cm_lap_event_param, ib_cm_rej_event_param,
    ib_cm_rep_event_param, ib_cm_req_event_param, ib_cm_sidr_rep_event_param,
    ib_cm_sidr_req_event_param, rdma_ucm_ece, sa_path_rec,
};
use crate::cm::event::{CmEvent, EventParam, RepRcvd, ReqRcvd};
use crate::cm::id::CmIdPriv;
use crate::wire::{MAD_SIZE, Mad};

type CHandler = unsafe extern "C" fn(*mut ib_cm_id, *const ib_cm_event) -> c_int;

/// Packs `responder_resources`, `initiator_depth` and the REQ event's
/// bitfields into their `unsigned int` units, where gcc puts them.
fn req_units(r: &ReqRcvd) -> (u32, u32) {
    let unit0 = u32::from(r.responder_resources)
        | u32::from(r.initiator_depth) << 8
        | u32::from(r.local_cm_response_timeout & 0x1f) << 16
        | u32::from(r.flow_control) << 21
        | u32::from(r.remote_cm_response_timeout & 0x1f) << 22
        | u32::from(r.retry_count & 0x7) << 27;
    let unit1 = u32::from(r.rnr_retry_count & 0x7) | u32::from(r.srq) << 3;
    (unit0, unit1)
}

/// The REP event's unit: `responder_resources`, `initiator_depth`, then
/// `target_ack_delay:5`, `failover_accepted:2`, `flow_control:1`,
/// `rnr_retry_count:3`, `srq:1`.
fn rep_unit(r: &RepRcvd) -> u32 {
    u32::from(r.responder_resources)
        | u32::from(r.initiator_depth) << 8
        | u32::from(r.target_ack_delay & 0x1f) << 16
        | u32::from(r.failover_accepted & 0x3) << 21
        | u32::from(r.flow_control) << 23
        | u32::from(r.rnr_retry_count & 0x7) << 24
        | u32::from(r.srq) << 27
}

fn ece((vendor_id, attr_mod): (u32, u32)) -> rdma_ucm_ece {
    rdma_ucm_ece {
        vendor_id,
        attr_mod,
    }
}

/// The engine's handler for every id created through the C API: converts the
/// event and calls the id's `cm_handler` as C set it (read at delivery time,
/// since kernel users may change `cm_id->cm_handler`).
pub fn call_c_handler(id: &Arc<CmIdPriv>, ev: &CmEvent) -> i32 {
    let handler = id.public.cm_handler.load(Ordering::Acquire);
    if handler == 0 {
        return discarded(ev);
    }
    // SAFETY: `cm_handler` holds either 0 or a function pointer C stored there
    // as an `ib_cm_handler` (via `ib_create_cm_id` or `cm_id->cm_handler`).
    let handler: CHandler = unsafe { std::mem::transmute::<usize, CHandler>(handler) };
    let mut storage = EventStorage::new(ev);
    let event = build_event(ev, &mut storage);
    let cm_id = id.addr() as *mut ib_cm_id;
    // SAFETY: `handler` is the caller's `ib_cm_handler`; `cm_id` is live (the
    // worker holds a reference) and `event`, the paths and the MAD copy it
    // points to (`storage`, untouched until the call returns) outlive the call.
    unsafe { handler(cm_id, &event) }
}

/// What a discarded event (NULL `cm_handler`) returns. A new id's
/// REQ_RECEIVED or SIDR_REQ_RECEIVED is the only way its user could learn of
/// it: discarded, nobody could ever answer or destroy the id. It is refused
/// as a handler returning non-zero refuses it (`cm_destroy_id`: REJ
/// CONSUMER_DEFINED, SIDR_REP REJECT). Any other event is dropped.
fn discarded(ev: &CmEvent) -> i32 {
    match ev.param {
        EventParam::ReqRcvd(_) | EventParam::SidrReqRcvd(_) => -libc::ECONNREFUSED,
        _ => 0,
    }
}

/// What an event's pointers point to, alive for the handler's call.
struct EventStorage {
    /// The handler may write through `private_data` (it is `void *`): it gets
    /// a copy of the MAD.
    mad: Mad,
    primary: Option<sa_path_rec>,
    alternate: Option<sa_path_rec>,
}

impl EventStorage {
    fn new(ev: &CmEvent) -> Self {
        Self {
            mad: ev.mad.as_deref().copied().unwrap_or([0; MAD_SIZE]),
            primary: None,
            alternate: None,
        }
    }
}

/// The C event for `ev`; its pointers point into `storage`.
fn build_event(ev: &CmEvent, storage: &mut EventStorage) -> ib_cm_event {
    let EventStorage {
        mad,
        primary,
        alternate,
    } = storage;
    // Every pointer into the copy comes from this one raw pointer: a fresh
    // `&mut` reborrow of `mad` per pointer would invalidate the pointers made
    // before it (REJ: ARI and private data; SIDR_REP and APR: info and
    // private data), under Rust's aliasing rules.
    let base: *mut u8 = mad.as_mut_ptr();
    let mad_at = |range: &std::ops::Range<usize>| -> *mut c_void {
        // Decoded ranges lie inside the MAD; `min` keeps the pointer in (or one
        // past) the copy whatever happens.
        base.wrapping_add(range.start.min(MAD_SIZE)).cast()
    };
    let private_data = match &ev.private_data {
        Some(range) => mad_at(range),
        None => ptr::null_mut(),
    };

    let param = match &ev.param {
        EventParam::None => ib_cm_event_param {
            // Zeroed, unlike the kernel's uninitialised memory.
            req_rcvd: zeroed_req_param(),
        },
        EventParam::SendStatus(status) => {
            let mut p = ib_cm_event_param {
                req_rcvd: zeroed_req_param(),
            };
            p.send_status = *status;
            p
        }
        EventParam::ReqRcvd(r) => {
            let path = primary.insert(path::to_c(&r.primary_path));
            let alternate_path = match &r.alternate_path {
                Some(alt) => alternate.insert(path::to_c(alt)) as *mut sa_path_rec,
                None => ptr::null_mut(),
            };
            let (unit0, unit1) = req_units(r);
            ib_cm_event_param {
                req_rcvd: ib_cm_req_event_param {
                    listen_id: r.listen_id.addr() as *mut ib_cm_id,
                    bth_pkey: r.bth_pkey,
                    port: r.port,
                    primary_path: path,
                    alternate_path,
                    ppath_sgid_attr: ptr::null(),
                    remote_ca_guid: r.remote_ca_guid.to_be(),
                    remote_qkey: r.remote_qkey,
                    remote_qpn: r.remote_qpn,
                    qp_type: r.qp_type,
                    starting_psn: r.starting_psn,
                    unit0,
                    unit1,
                    ece: ece(r.ece),
                },
            }
        }
        EventParam::RepRcvd(r) => {
            let mut p = ib_cm_event_param {
                req_rcvd: zeroed_req_param(),
            };
            p.rep_rcvd = ib_cm_rep_event_param {
                remote_ca_guid: r.remote_ca_guid.to_be(),
                remote_qkey: r.remote_qkey,
                remote_qpn: r.remote_qpn,
                starting_psn: r.starting_psn,
                unit0: rep_unit(r),
                ece: ece(r.ece),
            };
            p
        }
        EventParam::RejRcvd(r) => {
            let mut p = ib_cm_event_param {
                req_rcvd: zeroed_req_param(),
            };
            p.rej_rcvd = ib_cm_rej_event_param {
                reason: CIntRejReason(i32::from(r.reason)),
                ari: mad_at(&r.ari),
                ari_length: r.ari.len() as u8,
            };
            p
        }
        EventParam::SidrReqRcvd(r) => {
            let mut p = ib_cm_event_param {
                req_rcvd: zeroed_req_param(),
            };
            p.sidr_req_rcvd = ib_cm_sidr_req_event_param {
                listen_id: r.listen_id.addr() as *mut ib_cm_id,
                service_id: r.service_id.to_be(),
                sgid_attr: ptr::null(),
                bth_pkey: r.bth_pkey,
                port: r.port,
                pkey: r.pkey,
            };
            p
        }
        EventParam::SidrRepRcvd(r) => {
            let mut p = ib_cm_event_param {
                req_rcvd: zeroed_req_param(),
            };
            p.sidr_rep_rcvd = ib_cm_sidr_rep_event_param {
                status: CIntSidrStatus(i32::from(r.status)),
                qkey: r.qkey,
                qpn: r.qpn,
                info: mad_at(&r.info),
                sgid_attr: ptr::null(),
                info_len: r.info.len() as u8,
            };
            p
        }
        EventParam::LapRcvd(alt) => {
            let mut p = ib_cm_event_param {
                req_rcvd: zeroed_req_param(),
            };
            p.lap_rcvd = ib_cm_lap_event_param {
                alternate_path: alternate.insert(path::to_c(alt)),
            };
            p
        }
        EventParam::AprRcvd { ap_status, info } => {
            let mut p = ib_cm_event_param {
                req_rcvd: zeroed_req_param(),
            };
            p.apr_rcvd = ib_cm_apr_event_param {
                ap_status: CIntAprStatus(i32::from(*ap_status)),
                apr_info: mad_at(info),
                info_len: info.len() as u8,
            };
            p
        }
        EventParam::MraRcvd { service_timeout } => {
            let mut p = ib_cm_event_param {
                req_rcvd: zeroed_req_param(),
            };
            p.mra_rcvd.service_timeout = *service_timeout;
            p
        }
    };
    ib_cm_event {
        event: ev.event,
        param,
        private_data,
    }
}

/// A REQ event parameter block of zeros: the largest union member, so zeroing
/// it zeroes the whole union.
fn zeroed_req_param() -> ib_cm_req_event_param {
    ib_cm_req_event_param {
        listen_id: ptr::null_mut(),
        bth_pkey: 0,
        port: 0,
        primary_path: ptr::null_mut(),
        alternate_path: ptr::null_mut(),
        ppath_sgid_attr: ptr::null(),
        remote_ca_guid: 0,
        remote_qkey: 0,
        remote_qpn: 0,
        qp_type: crate::abi::ib_qp_type::IB_QPT_SMI,
        starting_psn: 0,
        unit0: 0,
        unit1: 0,
        ece: rdma_ucm_ece::default(),
    }
}

#[cfg(test)]
mod tests {
    //! The LAP and APR events as a C handler sees them (no C test can make a
    //! peer send those: the kernel API has no sender for them).

    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use parking_lot::Mutex;

    use super::*;
    use crate::abi::ib_cm_event_type::{self, *};
    use crate::cm::event::{CmEvent, EventParam};
    use crate::cm::path::Path;
    use crate::wire::{Apr, Lap};

    /// What the C handler saw: event, then the fields each test checks.
    static SEEN: Mutex<Vec<(ib_cm_event_type, Vec<u8>)>> = Mutex::new(Vec::new());

    unsafe extern "C" fn handler(_id: *mut ib_cm_id, ev: *const ib_cm_event) -> c_int {
        // SAFETY: `call_c_handler` passes an event that lives for the call.
        let ev = unsafe { &*ev };
        let mut got = Vec::new();
        match ev.event {
            IB_CM_LAP_RECEIVED => {
                // SAFETY: a LAP event's param is `lap_rcvd`, whose path lives
                // for the call.
                let p = unsafe { &*ev.param.lap_rcvd.alternate_path };
                got.extend([p.sl, p.packet_life_time, p.mtu]);
                // SAFETY: IB record: `ib` is the union member written.
                got.extend(u16::from_be(unsafe { p.link.ib.dlid }).to_be_bytes());
            }
            IB_CM_APR_RECEIVED => {
                // SAFETY: an APR event's param is `apr_rcvd`; `apr_info` points
                // to `info_len` bytes of the MAD copy for the call.
                let (status, info) = unsafe {
                    let a = &ev.param.apr_rcvd;
                    let info =
                        std::slice::from_raw_parts(a.apr_info.cast::<u8>(), a.info_len.into());
                    (a.ap_status.0, info)
                };
                got.push(status as u8);
                got.extend_from_slice(info);
            }
            _ => {}
        }
        // SAFETY: every received event carries its private data for the call.
        got.push(unsafe { *ev.private_data.cast::<u8>() });
        SEEN.lock().push((ev.event, got));
        0
    }

    /// A MAD whose byte i is i (mod 256), so each pointer's bytes are known.
    fn numbered_mad() -> Arc<Mad> {
        Arc::new(std::array::from_fn(|i| i as u8))
    }

    /// Reads `len` bytes at `p` as the C handler would.
    ///
    /// # Safety
    /// `p` points to `len` readable bytes.
    unsafe fn c_reads(p: *const c_void, len: usize) -> Vec<u8> {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec()
    }

    /// Events with two pointers into the MAD copy (REJ: ARI and private data;
    /// SIDR_REP: info and private data): both must stay usable during the
    /// call. Run under Miri (`make miri`) this checks the pointers' borrow
    /// tags: one derived from a later `&mut` reborrow of the copy would make
    /// the earlier one invalid (Stacked Borrows).
    #[test]
    fn both_pointers_into_the_mad_stay_valid() {
        let expect = |range: std::ops::Range<usize>| range.map(|i| i as u8).collect::<Vec<u8>>();
        let rej = CmEvent::with_private_data(
            IB_CM_REJ_RECEIVED,
            EventParam::RejRcvd(crate::cm::event::RejRcvd {
                reason: 28,
                ari: 36..41,
            }),
            numbered_mad(),
            108..256,
        );
        let mut storage = EventStorage::new(&rej);
        let ev = build_event(&rej, &mut storage);
        // SAFETY: REJ's param is `rej_rcvd`; both pointers point into the
        // MAD copy in `storage`, which lives and is untouched until here.
        let (pd, ari) = unsafe {
            let r = &ev.param.rej_rcvd;
            assert_eq!(r.ari_length, 5);
            (c_reads(ev.private_data, 148), c_reads(r.ari, 5))
        };
        assert_eq!(pd, expect(108..256));
        assert_eq!(ari, expect(36..41));

        let sidr_rep = CmEvent::with_private_data(
            IB_CM_SIDR_REP_RECEIVED,
            EventParam::SidrRepRcvd(crate::cm::event::SidrRepRcvd {
                status: 0,
                qkey: 7,
                qpn: 9,
                info: 44..116,
            }),
            numbered_mad(),
            116..252,
        );
        let mut storage = EventStorage::new(&sidr_rep);
        let ev = build_event(&sidr_rep, &mut storage);
        // SAFETY: as above, for `sidr_rep_rcvd`.
        let (pd, info) = unsafe {
            let r = &ev.param.sidr_rep_rcvd;
            (
                c_reads(ev.private_data, 136),
                c_reads(r.info, r.info_len.into()),
            )
        };
        assert_eq!(pd, expect(116..252));
        assert_eq!(info, expect(44..116));
    }

    #[test]
    fn lap_and_apr_events_reach_c_with_their_params() {
        let device = crate::cm::open_device("loop3999").unwrap();
        let id = crate::cm::create_id(&device, Arc::new(call_c_handler)).unwrap();
        let f: CHandler = handler;
        id.public.cm_handler.store(f as usize, Ordering::Release);

        let path = Path {
            sl: 7,
            packet_life_time: 13,
            mtu: 5,
            dlid: 0x0102,
            ..Path::default()
        };
        let mut lap = Lap::default();
        lap.private_data[0] = 0x4c;
        let ev = CmEvent::with_private_data(
            IB_CM_LAP_RECEIVED,
            EventParam::LapRcvd(Box::new(path)),
            Arc::new(lap.encode(1)),
            crate::wire::lap::CM_LAP_PRIVATE_DATA.mad_range(),
        );
        assert_eq!(call_c_handler(&id, &ev), 0);

        let mut apr = Apr {
            info_length: 3,
            ap_status: 200, // not an enum value: passed on as sent
            ..Apr::default()
        };
        apr.info[..3].copy_from_slice(&[9, 8, 7]);
        apr.private_data[0] = 0x41;
        let start = crate::wire::apr::CM_APR_ADDITIONAL_INFORMATION
            .mad_range()
            .start;
        let ev = CmEvent::with_private_data(
            IB_CM_APR_RECEIVED,
            EventParam::AprRcvd {
                ap_status: apr.ap_status,
                info: start..start + 3,
            },
            Arc::new(apr.encode(1)),
            crate::wire::apr::CM_APR_PRIVATE_DATA.mad_range(),
        );
        assert_eq!(call_c_handler(&id, &ev), 0);

        let seen = std::mem::take(&mut *SEEN.lock());
        assert_eq!(
            seen,
            vec![
                (IB_CM_LAP_RECEIVED, vec![7, 13, 5, 0x01, 0x02, 0x4c]),
                (IB_CM_APR_RECEIVED, vec![200, 9, 8, 7, 0x41]),
            ]
        );
        crate::cm::destroy_id(&id, 0);
        crate::cm::close_device(&device).unwrap();
    }
}
