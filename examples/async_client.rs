//! The client side of the async examples, alone in its process: `-n`
//! connections at once to the server whose port has GID `-g`, each one's
//! private data checked both ways (REQ 92 bytes, REP 196, RTU 224, DREQ
//! 220, DREP 224), then disconnected.
//!
//! ```text
//! cargo run --features tokio --example async_client -- -d rxe0 -g ::ffff:10.77.0.2 -n 10
//! ```
//!
//! Options (or environment variables): `-d DEVICE` (`IBCM_DEVICE`, default
//! rxe0), `-g GID` (`IBCM_PEER_GID`, required: one the server printed),
//! `-s SERVICE_ID` (`IBCM_SERVICE_ID`, default 0x1bc0de), `-n COUNT`
//! (`IBCM_COUNT`, default 10).

#[path = "async_common/mod.rs"]
mod common;

use common::{Result, number, option};
use ib_cm::aio::Device;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result {
    let name = option("-d", "IBCM_DEVICE", "rxe0");
    let peer = option("-g", "IBCM_PEER_GID", "");
    if peer.is_empty() {
        return Err("-g GID (or IBCM_PEER_GID): the GID of the server's port".into());
    }
    let peer = common::gid(&peer)?;
    let service_id = number("-s", &option("-s", "IBCM_SERVICE_ID", "0x1bc0de"))?;
    let count = number("-n", &option("-n", "IBCM_COUNT", "10"))? as usize;

    let device = Device::open_tokio(&name)?;
    println!("async_client: {count} connections from {name} to {peer}, service {service_id:#x}");
    common::connect_all(&device, peer, service_id, count).await?;
    println!("async_client: {count} connections, every private data as sent: OK");
    Ok(())
}
