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

/// `ib_cm_insert_listen` racing itself through the switch: both callers ask
/// the daemon, one inserts the listener and the other shares it, so the
/// loser's grant must be given back. The daemon counts a process's listens
/// per service ID: a grant never given back keeps the service ID from every
/// other process after the shared listener's last user destroyed it.
#[test]
fn insert_listen_racing_itself_gives_back_the_losers_listen() {
    use crate::cm::insert_listen;
    use crate::switch::PeerCred;
    const SHARED: u64 = 0x5ea2;
    let daemon = Daemon::start(3201);
    let b = super::super::open_device(&daemon.name).unwrap();
    let pair = Pair::open(b);
    let h = pair.rec.handler();
    let (conn, _) = SeqPacket::pair().unwrap();
    let cred = PeerCred {
        pid: 4343,
        uid: 4343,
        gid: 4343,
    };
    let (other, _, _) = daemon
        .switch
        .register(Arc::new(conn), cred, &daemon.name)
        .unwrap();
    for round in 0..40 {
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let racers: Vec<_> = (0..2)
            .map(|_| {
                let (device, h, barrier) = (pair.b.clone(), h.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    insert_listen(&device, h, 0x1111, SHARED).unwrap()
                })
            })
            .collect();
        let ids: Vec<_> = racers.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(ids[0].addr(), ids[1].addr(), "round {round}: one listener");
        for id in &ids {
            super::super::destroy_id(id, 0);
        }
        assert_eq!(
            daemon.switch.listen(other, SHARED, u64::MAX, 0),
            Ok(SHARED),
            "round {round}: the destroyed shared listener's service ID is still held in the daemon"
        );
        daemon.switch.unlisten(other, SHARED);
    }
    daemon.switch.unregister(other);
    pair.finish(&[]);
}
