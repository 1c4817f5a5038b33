//! The server side of the async examples, alone in its process: listens on
//! a device, accepts connections (REP with private data, each checked),
//! answers each client's DREQ with a DREP, and exits after `-n` of them.
//!
//! ```text
//! cargo run --features tokio --example async_server -- -d rxe1 -n 10
//! ```
//!
//! Options (or environment variables): `-d DEVICE` (`IBCM_DEVICE`, default
//! rxe1), `-s SERVICE_ID` (`IBCM_SERVICE_ID`, default 0x1bc0de), `-n COUNT`
//! (`IBCM_COUNT`, default 10; 0 runs until killed). It prints its port's
//! GIDs: give one to `async_client -g`.

#[path = "async_common/mod.rs"]
mod common;

use common::{Result, number, option};
use ib_cm::aio::Device;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result {
    let name = option("-d", "IBCM_DEVICE", "rxe1");
    let service_id = number("-s", &option("-s", "IBCM_SERVICE_ID", "0x1bc0de"))?;
    let count = number("-n", &option("-n", "IBCM_COUNT", "10"))? as usize;

    let device = Device::open_tokio(&name)?;
    for index in 0..16 {
        match device.gid(1, index) {
            Ok(gid) => println!("async_server: {name} port 1 GID index {index}: {gid}"),
            Err(_) => break,
        }
    }
    let listener = device.listen(service_id)?;
    println!("async_server: listening on {name}, service {service_id:#x}");
    let served = common::serve(listener, count).await?;
    println!("async_server: {served} connections, every private data as sent: OK");
    Ok(())
}
