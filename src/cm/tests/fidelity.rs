//! Issue 10, kernel fidelity: branches of cm.c where this library used to
//! differ (stored REP data, `cm_establish_handler`'s state check, a failed
//! SIDR_REP, `cm_req_handler`'s INVALID_GID reject, the 6.x MRA call).

use std::sync::Arc;

use super::*;
use crate::cm::send_dreq;
use crate::wire::attr;

// ---- point 11 ------------------------------------------------------------

/// `cm_dreq_handler()`, TIMEWAIT: the DREP re-sent for a DREQ that finds the
/// passive side in timewait carries what `ib_send_cm_drep` stored, and
/// nothing else: `ib_send_cm_rep` stores no private data, so a passive side
/// whose own DREQ timed out answers with a zeroed DREP, not the REP's bytes.
#[test]
fn hardening_11_cm_dreq_handler_timewait_drep_carries_no_rep_private_data() {
    let pair = Pair::new();
    let rep_pd = pattern(196, 11);
    let pd = rep_pd.clone();
    pair.rec.on(
        IB_CM_REQ_RECEIVED,
        Arc::new(move |id, _| {
            crate::cm::send_rep(id, &rep_params(&pd)).unwrap();
            0
        }),
    );
    let passive = pair.connect();
    // The passive side's DREQ is lost every time: DREQ_ERROR, timewait.
    crate::cm::set_disconnect_timeout(&passive, 5, 1).unwrap();
    pair.loop_b().drop_next(attr::DREQ, 100).unwrap();
    send_dreq(&passive, None).unwrap();
    pair.rec.wait(Some(&passive), IB_CM_DREQ_ERROR);
    assert_eq!(passive.state(), IB_CM_TIMEWAIT);
    // The active side, still ESTABLISHED, disconnects; timewait answers.
    send_dreq(&pair.active, None).unwrap();
    let got = pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    assert_eq!(got.private_data.unwrap(), vec![0u8; 224]);
    pair.finish(&[&passive]);
}
