//! The engine behind the MAD switch: device B's port is owned by an
//! in-process `ibcmd` (a `Switch` serving a loop port on a real socket), and
//! B's engine reaches it through the switch transport, as a process does.

use std::path::PathBuf;
use std::sync::Arc;

use super::*;
use crate::cm::{send_drep, send_dreq};
use crate::errno::{EBUSY, ENODEV};
use crate::switch::proto::DeviceInfo;
use crate::switch::{SeqPacket, Switch, SwitchConfig};
use crate::transport::switch::TEST_SOCKETS;

/// An in-process daemon serving loop device `index`'s port as `ibswN`.
struct Daemon {
    switch: Arc<Switch>,
    name: String,
    socket: PathBuf,
}

impl Daemon {
    fn start(index: u32) -> Self {
        let me = LoopIdentity::from_name(&format!("loop{index}")).unwrap();
        let name = format!("ibsw{index}");
        let switch = Switch::new(SwitchConfig::default());
        switch
            .add_device(&name, |recv| {
                let info = DeviceInfo::of_loop(me);
                Ok((
                    info,
                    LoopTransport::open(me, recv)? as Arc<dyn MadTransport>,
                ))
            })
            .unwrap();
        let socket =
            std::env::temp_dir().join(format!("ibcm-test-{}-{name}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let listener = SeqPacket::listen(&socket).unwrap();
        let s = switch.clone();
        std::thread::spawn(move || s.accept_loop(&listener));
        TEST_SOCKETS.lock().push((name.clone(), socket.clone()));
        Self {
            switch,
            name,
            socket,
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.switch.close();
        TEST_SOCKETS.lock().retain(|(d, _)| *d != self.name);
        let _ = std::fs::remove_file(&self.socket);
    }
}

#[test]
fn a_connection_through_the_switch_uses_the_slice_and_disconnects_with_private_data() {
    let daemon = Daemon::start(3200);
    let b = super::super::open_device(&daemon.name).unwrap();
    let slice = b.id_slice().expect("a slice from the switch");
    let pair = Pair::open(b);
    let passive = pair.connect();
    let passive_id = passive.lock().inner.local_id;
    assert!(
        slice.contains(passive_id),
        "{passive_id:#x} outside {slice:?}"
    );
    // The listen is the daemon's too: no other process gets the service ID.
    let other = super::super::create_id(&pair.b, pair.rec.handler()).unwrap();
    assert_eq!(super::super::listen(&other, SERVICE_ID), Err(EBUSY));

    let (dreq_pd, drep_pd) = (pattern(220, 3), pattern(224, 4));
    let answer = drep_pd.clone();
    pair.rec.on(
        IB_CM_DREQ_RECEIVED,
        Arc::new(move |id, _| {
            send_drep(id, Some(&answer)).unwrap();
            0
        }),
    );
    send_dreq(&pair.active, Some(&dreq_pd)).unwrap();
    let got = pair.rec.wait(Some(&passive), IB_CM_DREQ_RECEIVED);
    assert_eq!(got.private_data.unwrap(), dreq_pd);
    let got = pair.rec.wait(Some(&pair.active), IB_CM_DREP_RECEIVED);
    assert_eq!(got.private_data.unwrap(), drep_pd);
    pair.rec.wait(Some(&passive), IB_CM_TIMEWAIT_EXIT);

    // The daemon goes away: the device's calls fail with -ENODEV.
    drop(daemon);
    wait_until("the switch transport sees the daemon gone", || {
        super::super::listen(&other, SERVICE_ID + 1) == Err(ENODEV)
    });
    pair.finish(&[&passive, &other]);
}
