//! The devices the switch serves: added, their ports read again, closed.

use std::sync::{Arc, Weak};
#[cfg(test)]
use std::time::Duration;

use super::{Switch, SwitchCounter};
use crate::errno::CmResult;
use crate::ibcm_log;
use crate::switch::path_cache::FormerSms;
use crate::switch::proto::DeviceInfo;
use crate::switch::qp_owner::QpOwners;
use crate::transport::port_watch::{self, Change, LivePorts, PortPoller};
use crate::transport::sysfs::PortState;
use crate::transport::{MadTransport, RecvFn};

/// One device the switch serves.
pub(super) struct SwitchDevice {
    /// As it opened; its ports' LID and SM as they are now are `live`.
    pub(super) info: DeviceInfo,
    pub(super) live: LivePorts,
    /// The SM LIDs its ports had before the ones `live` says.
    pub(super) former_sms: FormerSms,
    /// What the port watcher holds of it while it is served.
    _poller: Option<Arc<dyn PortPoller>>,
    pub(super) transport: Arc<dyn MadTransport>,
    /// Who owns its QPs (None: nobody can tell, a simulated device's).
    pub(super) qp_owners: Option<Arc<dyn QpOwners>>,
}

impl SwitchDevice {
    /// What a process registering now learns of the device: its ports'
    /// LID and SM as last read, so that its SA queries go to the SM there is.
    pub(super) fn info_now(&self) -> DeviceInfo {
        let mut info = self.info.clone();
        for p in &mut info.ports {
            if let Some(now) = self.live.state(p.port_num) {
                (p.lid, p.sm_lid, p.sm_sl) = (now.lid, now.sm_lid, now.sm_sl);
            }
        }
        info
    }
}

/// The port watcher's handle on one served device (held by it while it is
/// served).
struct DevicePoller {
    switch: Weak<Switch>,
    device: String,
}

impl PortPoller for DevicePoller {
    fn poll_ports(&self) -> bool {
        self.switch
            .upgrade()
            .is_some_and(|s| s.poll_ports_of(&self.device))
    }
}

impl Switch {
    /// Serves `name` through the transport `open` makes (with what the
    /// processes need to know of the device); its received MADs come back to
    /// this switch.
    pub fn add_device(
        self: &Arc<Self>,
        name: &str,
        open: impl FnOnce(RecvFn) -> CmResult<(DeviceInfo, Arc<dyn MadTransport>)>,
    ) -> CmResult {
        self.add_device_with_qp_owners(name, None, open)
    }

    /// [`Switch::add_device`], with who owns the device's QPs: a tenant's
    /// REQ, REP or SIDR_REP must then name a QP of a process of its user
    /// (`rules::check_qp`).
    pub fn add_device_with_qp_owners(
        self: &Arc<Self>,
        name: &str,
        qp_owners: Option<Arc<dyn QpOwners>>,
        open: impl FnOnce(RecvFn) -> CmResult<(DeviceInfo, Arc<dyn MadTransport>)>,
    ) -> CmResult {
        self.add_watched_device(name, qp_owners, None, open)
    }

    /// [`Switch::add_device_with_qp_owners`], reading the device's ports
    /// again under `watch_root` (sysfs) every `IBCM_PORT_POLL_MS`.
    pub fn add_watched_device(
        self: &Arc<Self>,
        name: &str,
        qp_owners: Option<Arc<dyn QpOwners>>,
        watch_root: Option<&str>,
        open: impl FnOnce(RecvFn) -> CmResult<(DeviceInfo, Arc<dyn MadTransport>)>,
    ) -> CmResult {
        let me = Arc::downgrade(self);
        let device = name.to_owned();
        let recv: RecvFn = Arc::new(move |port, addr, mad| {
            if let Some(switch) = Weak::upgrade(&me) {
                switch.inbound(&device, port, addr, &mad);
            }
        });
        let (info, transport) = open(recv)?;
        let live = LivePorts::new(info.ports.iter().map(|p| {
            let state = PortState {
                lid: p.lid,
                sm_lid: p.sm_lid,
                sm_sl: p.sm_sl,
                active: true,
            };
            (p.port_num, state)
        }));
        let poller = watch_root.map(|root| {
            let poller: Arc<dyn PortPoller> = Arc::new(DevicePoller {
                switch: Arc::downgrade(self),
                device: name.to_owned(),
            });
            (root, poller)
        });
        let device = Arc::new(SwitchDevice {
            info,
            live,
            former_sms: FormerSms::default(),
            _poller: poller.as_ref().map(|(_, p)| p.clone()),
            transport,
            qp_owners,
        });
        self.devices.write().insert(name.to_owned(), device.clone());
        // Served first: a poll that found no such device would forget it.
        if let (Some((root, poller)), Some(interval)) = (poller, port_watch::poll_interval()) {
            device.live.read_from(root, name, interval);
            port_watch::watch(Arc::downgrade(&poller));
        }
        Ok(())
    }

    /// Reads the ports of `device` again: each that changed drops the
    /// host's cached paths of that port, counted and logged. False when the
    /// device is no longer served.
    fn poll_ports_of(&self, device: &str) -> bool {
        let Some(served) = self.devices.read().get(device).cloned() else {
            return false;
        };
        for change in served.live.refresh_all() {
            served.former_sms.port_changed(&change);
            self.port_did_change(device, served.info.node_guid, change);
        }
        true
    }

    fn port_did_change(&self, device: &str, node_guid: u64, change: Change) {
        let port = crate::sa::cache::PortId {
            node_guid,
            port_num: change.port_num,
        };
        self.state.lock().sa.invalidate_port(port);
        self.count(SwitchCounter::PortChanges);
        ibcm_log!(
            Info,
            "ibcmd: {device} {change}; the host's cached paths dropped"
        );
    }

    /// Makes the ports of `device` read from the files of a test under
    /// `root` (as `root/<device>/ports/N/…`); the test reads them with
    /// [`Switch::poll_ports_now`].
    #[cfg(test)]
    pub(in crate::switch) fn read_ports_from(&self, device: &str, root: &std::path::Path) {
        if let Some(d) = self.devices.read().get(device) {
            d.live.read_from(root, device, Duration::from_secs(3600));
        }
    }

    /// Reads the ports of `device` again now (tests).
    #[cfg(test)]
    pub(in crate::switch) fn poll_ports_now(&self, device: &str) -> bool {
        self.poll_ports_of(device)
    }

    /// Stops every device's transport and ends every process's connection:
    /// each sees the daemon gone.
    pub fn close(&self) {
        // Out of the lock first: a transport's close waits for its reader,
        // which may be answering a MAD itself under the devices' read lock.
        let devices: Vec<_> = self.devices.write().drain().collect();
        for (_, d) in devices {
            d.transport.close();
        }
        let conns: Vec<_> = self
            .state
            .lock()
            .clients
            .values()
            .map(|c| c.conn.clone())
            .collect();
        for conn in conns {
            conn.shutdown();
        }
    }

    /// Whether the switch serves `device`.
    pub fn has_device(&self, device: &str) -> bool {
        self.devices.read().contains_key(device)
    }
}
