//! One process, two devices of the in-process fabric (loop0, loop1): A
//! connects to B (REQ, REP, RTU), then disconnects with 220 bytes of DREQ
//! private data, which B answers with 224 bytes of DREP private data. Each
//! side prints what it sees; every private data is checked.
//!
//! `cargo run --example connect`

use std::time::Duration;

use ib_cm::{ConnectRequest, Device, Event, Reply};

const SERVICE_ID: u64 = 0x1234;
const QPN_A: u32 = 0x11;
const QPN_B: u32 = 0x22;
/// A bound on every wait: nothing here should take more than milliseconds.
const WAIT: Duration = Duration::from_secs(10);

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// `len` bytes, each different from its neighbours.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

/// Fails with `what` unless `got == want`.
fn check(what: &str, got: &[u8], want: &[u8]) -> Result {
    if got != want {
        return Err(format!(
            "{what}: got {} bytes {got:02x?}, want {want:02x?}",
            got.len()
        )
        .into());
    }
    println!("    {what}: {} bytes, as sent", got.len());
    Ok(())
}

fn main() -> Result {
    let a = Device::open("loop0")?;
    let b = Device::open("loop1")?;
    let listener = b.listen(SERVICE_ID)?;
    println!("B: listening on service {SERVICE_ID:#x}");

    // REQ: A asks, with 92 bytes of private data.
    let req_data = pattern(92, 0xa1);
    let path = a.path_to(1, b.gid(1, 0)?)?;
    let request = ConnectRequest::builder(path, SERVICE_ID, QPN_A)
        .private_data(&req_data)
        .build();
    let pending = a.request(request)?;
    println!("A: REQ sent ({:?})", pending.state());

    let incoming = listener.accept_timeout(WAIT)?;
    let req = incoming.req();
    println!(
        "B: REQ received ({:?}): service {:#x}, QPN {:#x}, PSN {:#x}",
        incoming.state(),
        req.service_id,
        req.remote_qpn,
        req.starting_psn
    );
    check("REQ private data", incoming.private_data(), &req_data)?;

    // REP: B accepts, with 196 bytes.
    let rep_data = pattern(196, 0xb1);
    let reply = Reply {
        private_data: rep_data.clone(),
        ..Reply::new(QPN_B)
    };
    let sent = incoming.reply(reply)?;
    println!("B: REP sent ({:?})", sent.state());

    let replied = pending.wait_reply()?;
    let rep = replied.rep();
    println!(
        "A: REP received: QPN {:#x}, PSN {:#x}",
        rep.remote_qpn, rep.starting_psn
    );
    check("REP private data", &rep.private_data, &rep_data)?;

    // RTU: A confirms, with 224 bytes.
    let rtu_data = pattern(224, 0xc1);
    let mut a_conn = replied.confirm(&rtu_data)?;
    println!("A: RTU sent ({:?})", a_conn.state());
    let mut b_conn = sent.wait_established()?;
    println!("B: RTU received ({:?})", b_conn.state());
    check(
        "RTU private data",
        b_conn.rtu_private_data().unwrap_or_default(),
        &rtu_data,
    )?;

    // DREQ: one byte too many is refused, as the C API refuses it.
    match a_conn.send_disconnect(&[0; 221]) {
        Err(e) => println!("A: a DREQ with 221 bytes is refused: {e}"),
        Ok(()) => return Err("a DREQ with 221 bytes was sent".into()),
    }
    let dreq_data = pattern(220, 0xd1);
    a_conn.send_disconnect(&dreq_data)?;
    println!("A: DREQ sent with 220 bytes ({:?})", a_conn.state());

    let event = b_conn.next_event_timeout(WAIT)?;
    println!("B: event {}", event.kernel_name());
    let Event::DreqReceived { private_data } = event else {
        return Err(format!("B: expected a DREQ, got {event:?}").into());
    };
    check("DREQ private data", &private_data, &dreq_data)?;

    // DREP: B answers with 224 bytes.
    let drep_data = pattern(224, 0xe1);
    b_conn.reply_disconnect(&drep_data)?;
    println!("B: DREP sent with 224 bytes ({:?})", b_conn.state());

    let event = a_conn.next_event_timeout(WAIT)?;
    println!("A: event {}", event.kernel_name());
    let Event::DrepReceived { private_data } = event else {
        return Err(format!("A: expected a DREP, got {event:?}").into());
    };
    check("DREP private data", &private_data, &drep_data)?;

    // Timewait ends on both sides: the connections' last events.
    for (side, conn) in [("A", &mut a_conn), ("B", &mut b_conn)] {
        let event = conn.next_event_timeout(WAIT)?;
        println!("{side}: event {} ({:?})", event.kernel_name(), conn.state());
        if event != Event::TimewaitExit {
            return Err(format!("{side}: expected the end of timewait, got {event:?}").into());
        }
    }
    println!("connected and disconnected: OK");
    Ok(())
}
