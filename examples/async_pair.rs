//! Both sides of the async examples in one process and one thread: the
//! server on one device, the client on another (loop0 and loop1 of the
//! in-process fabric by default), `-n` connections at once, each one's
//! private data checked in every message.
//!
//! ```text
//! cargo run --features tokio --example async_pair -- -n 100
//! ```
//!
//! Options (or environment variables): `-d DEVICE` of the client
//! (`IBCM_DEVICE`, default loop0), `-D DEVICE` of the server
//! (`IBCM_SERVER_DEVICE`, default loop1), `-n COUNT` (`IBCM_COUNT`,
//! default 10). With `-d rxe0 -D rxe1` it runs on SoftRoCE.

#[path = "async_common/mod.rs"]
mod common;

use common::{Result, number, option};
use ib_cm::aio::Device;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result {
    let client_name = option("-d", "IBCM_DEVICE", "loop0");
    let server_name = option("-D", "IBCM_SERVER_DEVICE", "loop1");
    let count = number("-n", &option("-n", "IBCM_COUNT", "10"))? as usize;

    let client = Device::open_tokio(&client_name)?;
    let server = Device::open_tokio(&server_name)?;
    let listener = server.listen(common::SERVICE_ID)?;
    // RoCE: the GID with the server's IP address; loop devices have one.
    let peer = (0..16)
        .map_while(|index| server.gid(1, index).ok())
        .last()
        .ok_or("the server's port has no GID")?;
    println!("async_pair: {count} connections from {client_name} to {server_name} ({peer})");
    let (served, connected) = tokio::join!(
        common::serve(listener, count),
        common::connect_all(&client, peer, common::SERVICE_ID, count)
    );
    connected?;
    println!(
        "async_pair: {} connections, every private data as sent: OK",
        served?
    );
    Ok(())
}
