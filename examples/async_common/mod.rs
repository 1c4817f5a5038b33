//! What the async examples share: the two sides of a connection with
//! private data in every message, each checked, and a small argument parser.
//!
//! Connection `i` carries seed `i as u8` (the first byte of its REQ data);
//! every message's private data is a pattern of that seed, its length the
//! most the message holds: REQ 92 bytes, REP 196, RTU 224, DREQ 220, DREP
//! 224.
#![allow(dead_code)] // each example uses its part

use ib_cm::aio::{Device, IncomingRequest, Listener};
use ib_cm::{ConnectRequest, Event, Gid, Reply};

pub type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub const SERVICE_ID: u64 = 0x1b_c0de;

/// The messages' seeds, from the connection's.
const REP: u8 = 0x55;
const RTU: u8 = 0x66;
const DREQ: u8 = 0x77;
const DREP: u8 = 0x88;

/// `len` bytes, the first one `seed`, each different from its neighbours.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

fn check(what: &str, conn: u8, got: &[u8], want: &[u8]) -> Result {
    if got != want {
        let n = got.len();
        return Err(format!("connection {conn}: {what}: got {n} bytes {got:02x?}").into());
    }
    Ok(())
}

/// The server: accepts `count` connections (0: until killed), each in a
/// task of its own, and answers each one's DREQ. Returns how many went
/// through with every private data as sent.
pub async fn serve(listener: Listener, count: usize) -> Result<usize> {
    let mut tasks = tokio::task::JoinSet::new();
    let mut accepted = 0;
    while count == 0 || accepted < count {
        let incoming = listener.accept().await?;
        accepted += 1;
        // A QPN of its own for each (the CM tells stale connections by it).
        tasks.spawn(serve_one(
            incoming,
            0x80_0000 | (accepted as u32 & 0x7f_ffff),
        ));
        // Reap the finished ones as we go (a server that runs for ever).
        while let Some(done) = tasks.try_join_next() {
            done??;
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(accepted)
}

/// One connection of the server: REP, RTU, then the client's DREQ and our
/// DREP.
async fn serve_one(incoming: IncomingRequest, qpn: u32) -> Result {
    let seed = incoming.private_data()[0];
    check(
        "REQ private data",
        seed,
        incoming.private_data(),
        &pattern(92, seed),
    )?;
    let reply = Reply {
        private_data: pattern(196, seed ^ REP),
        ..Reply::new(qpn)
    };
    let mut conn = incoming.accept(reply).await?;
    let rtu = conn.rtu_private_data().unwrap_or_default();
    check("RTU private data", seed, rtu, &pattern(224, seed ^ RTU))?;
    match conn.next_event().await? {
        Event::DreqReceived { private_data } => {
            check(
                "DREQ private data",
                seed,
                &private_data,
                &pattern(220, seed ^ DREQ),
            )?;
        }
        other => return Err(format!("connection {seed}: expected a DREQ, got {other:?}").into()),
    }
    conn.reply_disconnect(&pattern(224, seed ^ DREP))?;
    conn.wait_closed().await?;
    Ok(())
}

/// The client: `count` connections at once to the listener on `service_id`
/// of the port with GID `peer`, each connected, checked and disconnected in
/// a task of its own.
pub async fn connect_all(device: &Device, peer: Gid, service_id: u64, count: usize) -> Result {
    let path = device.path_to(1, peer)?;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..count {
        let seed = i as u8;
        let qpn = 0x1000 + (i as u32 & 0x7f_ffff);
        let request = ConnectRequest::builder(path, service_id, qpn)
            .private_data(&pattern(92, seed))
            .rtu_private_data(&pattern(224, seed ^ RTU))
            .build();
        let device = device.clone();
        tasks.spawn(async move {
            let mut conn = device.connect(request).await?;
            let rep = &conn.rep().ok_or("no REP")?.private_data;
            check("REP private data", seed, rep, &pattern(196, seed ^ REP))?;
            let drep = conn.disconnect(&pattern(220, seed ^ DREQ)).await?;
            check("DREP private data", seed, &drep, &pattern(224, seed ^ DREP))?;
            Result::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

/// The value of option `name` (`-d rxe0`), else of environment variable
/// `env`, else `default`.
pub fn option(name: &str, env: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .or_else(|| std::env::var(env).ok())
        .unwrap_or_else(|| default.to_owned())
}

/// A number in decimal or `0x` hexadecimal.
pub fn number(what: &str, text: &str) -> Result<u64> {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| format!("{what}: '{text}' is not a number").into())
}

/// A GID in IPv6 text (`fe80::2`, `::ffff:10.77.0.2`).
pub fn gid(text: &str) -> Result<Gid> {
    let addr: std::net::Ipv6Addr = text
        .parse()
        .map_err(|_| format!("'{text}' is not a GID in IPv6 text form"))?;
    Ok(Gid(addr.octets()))
}
