//! Alternate path messages: `cm_lap_handler`, `cm_apr_handler`, the LAP
//! branches of `ib_prepare_cm_mra` / `cm_mra_handler` / `cm_rej_handler`.
//!
//! Nothing sends LAPs or APRs since the kernel removed `ib_send_cm_lap()` /
//! `ib_send_cm_apr()`, so the peer's messages are built with the codec and
//! sent from the peer's device (or from a raw endpoint, to see the answer).
//! lap_state LAP_SENT / MRA_LAP_RCVD cannot be reached through the API;
//! tests of the branches behind them set it by hand and say so.

use std::sync::Arc;

use super::*;
use crate::abi::ib_cm_event_type::*;
use crate::abi::ib_cm_lap_state::{self, *};
use crate::abi::ib_cm_rej_reason::IB_CM_REJ_CONSUMER_DEFINED;
use crate::abi::ib_event_type::IB_EVENT_PATH_MIG;
use crate::cm::counters::{Snapshot, attr_index};
use crate::cm::path::REC_TYPE_IB;
use crate::cm::qp_attr::{MIG_REARM, QPS_RTR, QPS_RTS, mask};
use crate::cm::{init_qp_attr, notify, pd_array, prepare_mra, send_drep, send_dreq};
use crate::errno::EINVAL;
use crate::transport::loopback::LoopIdentity;
use crate::wire::apr::CM_APR_ADDITIONAL_INFORMATION_LENGTH;
use crate::wire::{Apr, Lap, Mra, MsgResponse, Rej, ReqPath, attr};

const LAP_TID: u64 = 0x0000_0001_0000_4c41;

fn snapshot(device: &Device) -> Snapshot {
    device.counters(1).unwrap().snapshot()
}

fn at(counts: &[u64; 11], attr_id: u16) -> u64 {
    counts[attr_index(attr_id).unwrap()]
}

fn lap_state(id: &Arc<CmIdPriv>) -> i32 {
    id.lock().lap_state()
}

/// Sets a lap_state nothing in the API reaches (LAP_SENT, MRA_LAP_RCVD).
fn force_lap_state(id: &Arc<CmIdPriv>, lap: ib_cm_lap_state) {
    id.lock().set_lap_state(lap);
}

/// The comm IDs of `passive`'s connection as the peer (A) writes them:
/// (A's, B's).
fn comm_ids(passive: &Arc<CmIdPriv>) -> (u32, u32) {
    let l = passive.lock();
    (l.inner.remote_id, l.inner.local_id)
}

/// The LAP A would send B for `passive`'s connection: a path from A's port
/// to B's with SL 2, flow label 0x4242, ACK timeout 14, and 168 bytes of
/// private data.
pub(super) fn lap_for(pair: &Pair, passive: &Arc<CmIdPriv>) -> Lap {
    let (a, b) = (&pair.a.ports[0], &pair.b.ports[0]);
    let (local_comm_id, remote_comm_id) = comm_ids(passive);
    Lap {
        local_comm_id,
        remote_comm_id,
        remote_qpn: PASSIVE_QPN,
        remote_cm_response_timeout: 16,
        alternate_path: ReqPath {
            local_lid: a.lid,
            remote_lid: b.lid,
            local_gid: a.gids[0].gid,
            remote_gid: b.gids[0].gid,
            flow_label: 0x4242,
            packet_rate: 3,
            sl: 2,
            subnet_local: true,
            local_ack_timeout: 14,
            ..ReqPath::default()
        },
        private_data: pd_array(&pattern(168, 9)),
    }
}

/// The APR A would send B: status 5 (IS_CURRENT), 4 bytes of information.
fn apr_for(passive: &Arc<CmIdPriv>) -> Apr {
    let (local_comm_id, remote_comm_id) = comm_ids(passive);
    Apr {
        local_comm_id,
        remote_comm_id,
        info_length: 4,
        ap_status: 5,
        info: pd_array(&[0xde, 0xad, 0xbe, 0xef]),
        private_data: pd_array(&pattern(148, 3)),
    }
}

/// Waits until B has received `n` MADs of `attr_id` and dropped `unmatched`.
fn wait_dropped(pair: &Pair, attr_id: u16, n: u64, unmatched: u64) {
    wait_until("B counted the drop", || {
        let b = snapshot(&pair.b);
        at(&b.rx_msgs, attr_id) == n && b.rx_unmatched == unmatched
    });
}

#[test]
fn cm_lap_handler_established_delivers_lap_received_with_alternate_path() {
    let pair = Pair::new();
    let passive = pair.connect();
    let (a, b) = (&pair.a.ports[0], &pair.b.ports[0]);
    pair.send_from(&pair.a, &pair.b, &lap_for(&pair, &passive).encode(LAP_TID));
    let got = pair.rec.wait(Some(&passive), IB_CM_LAP_RECEIVED);
    assert_eq!(got.state, IB_CM_ESTABLISHED);
    assert_eq!(got.private_data.unwrap(), pattern(168, 9));
    assert_eq!(lap_state(&passive), IB_CM_LAP_RCVD as i32);
    assert_eq!(passive.lock().inner.tid, LAP_TID); // kept for the MRA
    // `cm_format_path_from_lap`: the peer as destination, the connection's
    // partition and MTU, the packet lifetime one below the ACK timeout.
    let alt = got.alternate_path.expect("lap_rcvd.alternate_path");
    assert_eq!((alt.dgid, alt.sgid), (a.gids[0].gid, b.gids[0].gid));
    assert_eq!((alt.dlid, alt.slid), (a.lid, b.lid));
    assert_eq!((alt.sl, alt.flow_label, alt.rate), (2, 0x4242, 3));
    assert_eq!((alt.packet_life_time, alt.pkey, alt.mtu), (13, 0xffff, 5));
    assert_eq!((alt.reversible, alt.numb_path, alt.service_id), (1, 0, 0));
    assert_eq!(alt.rec_type, REC_TYPE_IB);

    // The proposed path goes into the QP at RTR and as RTS-to-RTS.
    let rtr = init_qp_attr(&passive, QPS_RTR).unwrap();
    assert_ne!(rtr.mask & mask::ALT_PATH, 0);
    assert_eq!((rtr.alt_ah_attr.dlid, rtr.alt_ah_attr.sl), (a.lid, 2));
    assert_eq!((rtr.alt_timeout, rtr.alt_port_num), (14, 1));
    let rts = init_qp_attr(&passive, QPS_RTS).unwrap();
    assert_eq!(rts.mask, mask::ALT_PATH | mask::PATH_MIG_STATE);
    assert_eq!((rts.alt_ah_attr.sl, rts.path_mig_state), (2, MIG_REARM));
    let b_counts = snapshot(&pair.b);
    assert_eq!(at(&b_counts.rx_msgs, attr::LAP), 1);
    assert_eq!(at(&b_counts.rx_duplicates, attr::LAP), 0);
    assert_eq!(b_counts.rx_unmatched, 0);

    // The connection still disconnects normally.
    send_dreq(&pair.active, None).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_DREQ_RECEIVED);
    pair.finish(&[&passive]);
}

#[test]
fn cm_lap_handler_roce_port_drops_lap() {
    let pair = Pair::with_roce_b();
    let passive = pair.connect();
    pair.send_from(&pair.a, &pair.b, &lap_for(&pair, &passive).encode(LAP_TID));
    wait_dropped(&pair, attr::LAP, 1, 1);
    assert_eq!(pair.rec.count(IB_CM_LAP_RECEIVED), 0);
    assert_eq!(lap_state(&passive), IB_CM_LAP_UNINIT as i32);
    assert_eq!(passive.lock().inner.alt_av.addr.dlid, 0); // nothing taken
    pair.finish(&[&passive]);
}

#[test]
fn cm_apr_handler_roce_port_drops_apr() {
    let pair = Pair::with_roce_b();
    let passive = pair.connect();
    // Even in the one lap_state that takes an APR: the port decides first.
    force_lap_state(&passive, IB_CM_LAP_SENT);
    pair.send_from(&pair.a, &pair.b, &apr_for(&passive).encode(LAP_TID));
    wait_dropped(&pair, attr::APR, 1, 1);
    assert_eq!(pair.rec.count(IB_CM_APR_RECEIVED), 0);
    assert_eq!(lap_state(&passive), IB_CM_LAP_SENT as i32);
    pair.finish(&[&passive]);
}

#[test]
fn cm_lap_handler_duplicate_in_mra_lap_sent_resends_mra() {
    let pair = Pair::new();
    pair.rec.on(
        IB_CM_LAP_RECEIVED,
        Arc::new(|id, _| {
            prepare_mra(id).unwrap(); // ESTABLISHED + LAP_RCVD -> MRA_LAP_SENT
            0
        }),
    );
    let passive = pair.connect();
    // The LAP comes from a raw endpoint so that the MRA can be read.
    let raw = Raw::open();
    let lap = lap_for(&pair, &passive).encode(LAP_TID);
    raw.send_to(&pair.b, &lap);
    pair.rec.wait(Some(&passive), IB_CM_LAP_RECEIVED);
    assert_eq!(lap_state(&passive), IB_CM_MRA_LAP_SENT as i32);
    assert_eq!(prepare_mra(&passive), Err(EINVAL)); // no longer LAP_RCVD
    assert_eq!(raw.received_after(Duration::from_millis(20)), 0); // no MRA yet

    // The peer repeats its LAP: now it gets an MRA for it.
    raw.send_to(&pair.b, &lap);
    let mra_mad = raw.wait_for(1);
    let mra = Mra::decode(&mra_mad).unwrap();
    let (a_id, b_id) = comm_ids(&passive);
    assert_eq!(mra.message_mraed, MsgResponse::Other);
    assert_eq!(mra.service_timeout, crate::cm::mra::CM_MRA_SETTING);
    assert_eq!((mra.local_comm_id, mra.remote_comm_id), (b_id, a_id));
    assert_eq!(mra.private_data, [0; 222]); // ib_prepare_cm_mra keeps none
    let tid = u64::from_be_bytes(mra_mad[8..16].try_into().unwrap());
    assert_eq!(tid, LAP_TID);
    raw.send_to(&pair.b, &lap);
    raw.wait_for(2);

    // Booked as a message plus a retry each, as the kernel's
    // CM_DIRECT_RETRY_CTX replies (counted just after the MAD left).
    wait_until("both MRAs are counted", || {
        let b = snapshot(&pair.b);
        at(&b.tx_msgs, attr::MRA) == 4 && at(&b.tx_retries, attr::MRA) == 2
    });
    assert_eq!(at(&snapshot(&pair.b).rx_duplicates, attr::LAP), 2);
    assert_eq!(pair.rec.count(IB_CM_LAP_RECEIVED), 1);
    pair.finish(&[&passive]);
}

#[test]
fn cm_lap_handler_duplicate_in_lap_rcvd_is_counted_and_dropped() {
    let pair = Pair::new();
    let passive = pair.connect();
    let lap = lap_for(&pair, &passive).encode(LAP_TID);
    pair.send_from(&pair.a, &pair.b, &lap);
    pair.rec.wait(Some(&passive), IB_CM_LAP_RECEIVED);
    pair.send_from(&pair.a, &pair.b, &lap);
    wait_until("the duplicate is counted", || {
        at(&snapshot(&pair.b).rx_duplicates, attr::LAP) == 1
    });
    assert_eq!(pair.rec.count(IB_CM_LAP_RECEIVED), 1);
    assert_eq!(pair.loop_b().sent(attr::MRA), 0); // nobody asked for time
    assert_eq!(lap_state(&passive), IB_CM_LAP_RCVD as i32);
    pair.finish(&[&passive]);
}

#[test]
fn cm_lap_handler_not_established_is_dropped_but_takes_the_addresses() {
    let pair = Pair::new();
    let passive = pair.connect();
    send_dreq(&pair.active, None).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_DREQ_RECEIVED); // DREQ_RCVD, held
    pair.send_from(&pair.a, &pair.b, &lap_for(&pair, &passive).encode(LAP_TID));
    wait_dropped(&pair, attr::LAP, 1, 1);
    assert_eq!(pair.rec.count(IB_CM_LAP_RECEIVED), 0);
    assert_eq!(lap_state(&passive), IB_CM_LAP_UNINIT as i32);
    // The kernel sets av and alt_av before it checks the state.
    assert_eq!(passive.lock().inner.alt_av.addr.sl, 2);
    send_drep(&passive, None).unwrap();
    pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    pair.finish(&[&passive]);
}

#[test]
fn cm_lap_handler_unknown_comm_id_is_dropped() {
    let pair = Pair::new();
    let passive = pair.connect();
    let mut lap = lap_for(&pair, &passive);
    lap.local_comm_id ^= 1; // not the peer of this connection
    pair.send_from(&pair.a, &pair.b, &lap.encode(LAP_TID));
    wait_dropped(&pair, attr::LAP, 1, 1);
    assert_eq!(pair.rec.count(IB_CM_LAP_RECEIVED), 0);
    assert_eq!(lap_state(&passive), IB_CM_LAP_UNINIT as i32);
    pair.finish(&[&passive]);
}

#[test]
fn cm_lap_handler_alternate_gid_not_ours_is_dropped() {
    let pair = Pair::new();
    let passive = pair.connect();
    let mut lap = lap_for(&pair, &passive);
    let nowhere = LoopIdentity::from_name("loop4001").unwrap();
    lap.alternate_path.remote_gid = nowhere.gid; // our end of the path
    pair.send_from(&pair.a, &pair.b, &lap.encode(LAP_TID));
    wait_dropped(&pair, attr::LAP, 1, 1);
    assert_eq!(pair.rec.count(IB_CM_LAP_RECEIVED), 0);
    assert_eq!(lap_state(&passive), IB_CM_LAP_UNINIT as i32);
    assert_eq!(passive.lock().inner.alt_av.addr.dlid, 0);
    pair.finish(&[&passive]);
}

#[test]
fn ib_cm_notify_path_mig_in_lap_rcvd_is_einval() {
    let pair = Pair::new();
    let passive = pair.connect();
    pair.send_from(&pair.a, &pair.b, &lap_for(&pair, &passive).encode(LAP_TID));
    pair.rec.wait(Some(&passive), IB_CM_LAP_RECEIVED);
    // A LAP waits for an answer (which the kernel can no longer send).
    assert_eq!(notify(&passive, IB_EVENT_PATH_MIG as i32), Err(EINVAL));
    prepare_mra(&passive).unwrap();
    assert_eq!(notify(&passive, IB_EVENT_PATH_MIG as i32), Err(EINVAL));
    assert_eq!(lap_state(&passive), IB_CM_MRA_LAP_SENT as i32);
    pair.finish(&[&passive]);
}

#[test]
fn cm_rej_handler_established_with_lap_rcvd_is_dropped() {
    let pair = Pair::new();
    let passive = pair.connect();
    pair.send_from(&pair.a, &pair.b, &lap_for(&pair, &passive).encode(LAP_TID));
    pair.rec.wait(Some(&passive), IB_CM_LAP_RECEIVED);
    let (a_id, b_id) = comm_ids(&passive);
    let rej = Rej {
        local_comm_id: a_id,
        remote_comm_id: b_id,
        message_rejected: MsgResponse::Other,
        reason: IB_CM_REJ_CONSUMER_DEFINED as u16,
        ..Rej::default()
    };
    pair.send_from(&pair.a, &pair.b, &rej.encode(LAP_TID));
    wait_dropped(&pair, attr::REJ, 1, 1);
    assert_eq!(pair.rec.count(IB_CM_REJ_RECEIVED), 0);
    assert_eq!(passive.state(), IB_CM_ESTABLISHED);
    pair.finish(&[&passive]);
}

#[test]
fn cm_apr_handler_wrong_lap_state_is_dropped() {
    let pair = Pair::new();
    let passive = pair.connect();
    let apr = apr_for(&passive).encode(LAP_TID);
    // lap_state UNINIT.
    pair.send_from(&pair.a, &pair.b, &apr);
    wait_dropped(&pair, attr::APR, 1, 1);
    // LAP_RCVD, then MRA_LAP_SENT: a LAP of the peer's is pending, not ours.
    pair.send_from(&pair.a, &pair.b, &lap_for(&pair, &passive).encode(LAP_TID));
    pair.rec.wait(Some(&passive), IB_CM_LAP_RECEIVED);
    pair.send_from(&pair.a, &pair.b, &apr);
    wait_dropped(&pair, attr::APR, 2, 2);
    prepare_mra(&passive).unwrap();
    pair.send_from(&pair.a, &pair.b, &apr);
    wait_dropped(&pair, attr::APR, 3, 3);
    // Unknown comm IDs: an unmatched reply.
    let mut stray = apr_for(&passive);
    stray.remote_comm_id ^= 1;
    pair.send_from(&pair.a, &pair.b, &stray.encode(LAP_TID));
    wait_dropped(&pair, attr::APR, 4, 4);
    assert_eq!(pair.rec.count(IB_CM_APR_RECEIVED), 0);
    assert_eq!(lap_state(&passive), IB_CM_MRA_LAP_SENT as i32);
    pair.finish(&[&passive]);
}

#[test]
fn cm_apr_handler_not_established_is_dropped() {
    let pair = Pair::new();
    let passive = pair.connect();
    send_dreq(&pair.active, None).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_DREQ_RECEIVED);
    force_lap_state(&passive, IB_CM_LAP_SENT); // unreachable otherwise
    pair.send_from(&pair.a, &pair.b, &apr_for(&passive).encode(LAP_TID));
    wait_dropped(&pair, attr::APR, 1, 1);
    assert_eq!(pair.rec.count(IB_CM_APR_RECEIVED), 0);
    assert_eq!(lap_state(&passive), IB_CM_LAP_SENT as i32);
    send_drep(&passive, None).unwrap();
    pair.finish(&[&passive]);
}

#[test]
fn cm_apr_handler_lap_sent_or_mra_lap_rcvd_delivers_apr_received() {
    let pair = Pair::new();
    let passive = pair.connect();
    // The states a LAP of ours would have left; set by hand, since nothing
    // sends LAPs (so this is the kernel's code, unreachable in practice).
    for (n, lap) in [IB_CM_LAP_SENT, IB_CM_MRA_LAP_RCVD].into_iter().enumerate() {
        force_lap_state(&passive, lap);
        pair.send_from(&pair.a, &pair.b, &apr_for(&passive).encode(LAP_TID));
        wait_until("APR_RECEIVED", || {
            pair.rec.count(IB_CM_APR_RECEIVED) == n + 1
        });
        assert_eq!(lap_state(&passive), IB_CM_LAP_IDLE as i32);
    }
    let got = pair.rec.wait(Some(&passive), IB_CM_APR_RECEIVED);
    assert_eq!(got.apr, Some((5, vec![0xde, 0xad, 0xbe, 0xef])));
    assert_eq!(got.private_data.unwrap(), pattern(148, 3));
    assert_eq!(passive.state(), IB_CM_ESTABLISHED);
    pair.finish(&[&passive]);
}

#[test]
fn cm_apr_handler_information_length_over_72_is_malformed() {
    let pair = Pair::new();
    let passive = pair.connect();
    let mut apr = apr_for(&passive).encode(LAP_TID);
    CM_APR_ADDITIONAL_INFORMATION_LENGTH.set(&mut apr, 73);
    pair.send_from(&pair.a, &pair.b, &apr);
    wait_until("the APR is counted malformed", || {
        snapshot(&pair.b).rx_malformed == 1
    });
    assert_eq!(pair.rec.count(IB_CM_APR_RECEIVED), 0);
    pair.finish(&[&passive]);
}

#[test]
fn cm_mra_handler_established_mra_for_a_lap_we_did_not_send_is_dropped() {
    let pair = Pair::new();
    let passive = pair.connect();
    let (a_id, b_id) = comm_ids(&passive);
    let mra = Mra {
        local_comm_id: a_id,
        remote_comm_id: b_id,
        message_mraed: MsgResponse::Other,
        service_timeout: 24,
        ..Mra::default()
    }
    .encode(LAP_TID);
    pair.send_from(&pair.a, &pair.b, &mra);
    wait_dropped(&pair, attr::MRA, 1, 1);
    // Had a LAP of ours been stretched already (MRA_LAP_RCVD, unreachable),
    // a repeated MRA would be a duplicate.
    force_lap_state(&passive, IB_CM_MRA_LAP_RCVD);
    pair.send_from(&pair.a, &pair.b, &mra);
    wait_until("the duplicate MRA is counted", || {
        at(&snapshot(&pair.b).rx_duplicates, attr::MRA) == 1
    });
    assert_eq!(pair.rec.count(IB_CM_MRA_RECEIVED), 0);
    assert_eq!(snapshot(&pair.b).rx_unmatched, 1);
    pair.finish(&[&passive]);
}
