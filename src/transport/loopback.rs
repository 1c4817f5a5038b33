//! The in-process fabric: devices `loop0`, `loop1`, … of one process exchange
//! encoded 256-byte MADs, exactly as they would cross a wire, with fault
//! injection (drop the next N MADs of an attribute).
//!
//! Addressing: `loopN` has one port whose GID is `fe80::` + its node GUID and
//! whose LID is N + 1. A MAD goes to the device that owns its destination GID;
//! one for a device that is not open is lost, as on a wire.

use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::{MadAddr, MadTransport, RecvFn};
use crate::errno::{CmResult, EBUSY, EINVAL, ENETDOWN};
use crate::wire::Mad;

/// The node GUIDs of loop devices: a fixed OUI-like prefix plus N + 1.
const LOOP_GUID_BASE: u64 = 0x0002_c903_00ab_0000;
/// The highest loop device index (LIDs stay in the unicast range).
pub const MAX_LOOP_INDEX: u32 = 0xfff;

/// The identity of one loop device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopIdentity {
    pub index: u32,
    pub node_guid: u64,
    pub gid: [u8; 16],
    pub lid: u16,
}

impl LoopIdentity {
    /// `loopN` for N ≤ [`MAX_LOOP_INDEX`]; `None` for any other name.
    pub fn from_name(name: &str) -> Option<Self> {
        let digits = name.strip_prefix("loop")?;
        if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
            return None;
        }
        let index: u32 = digits.parse().ok()?;
        (index <= MAX_LOOP_INDEX).then(|| Self::from_index(index))
    }

    fn from_index(index: u32) -> Self {
        let node_guid = LOOP_GUID_BASE + u64::from(index) + 1;
        let mut gid = [0u8; 16];
        gid[0] = 0xfe;
        gid[1] = 0x80;
        gid[8..].copy_from_slice(&node_guid.to_be_bytes());
        Self {
            index,
            node_guid,
            gid,
            lid: (index + 1) as u16,
        }
    }

    /// Where loop ports' SA queries go: the LID of the last loop device,
    /// which only a test's fake SA opens (unanswered otherwise, as with an
    /// SM that is gone).
    pub const SM_LID: u16 = MAX_LOOP_INDEX as u16 + 1;

    /// The loop device with LID `lid`, whether or not it is open.
    pub fn from_lid(lid: u16) -> Option<Self> {
        let index = u32::from(lid).checked_sub(1)?;
        (index <= MAX_LOOP_INDEX).then(|| Self::from_index(index))
    }

    /// The loop device that owns `gid`, whether or not it is open.
    pub fn from_gid(gid: &[u8; 16]) -> Option<Self> {
        if gid[..8] != [0xfe, 0x80, 0, 0, 0, 0, 0, 0] {
            return None;
        }
        let guid = u64::from_be_bytes(gid[8..].try_into().ok()?);
        let index = guid.checked_sub(LOOP_GUID_BASE + 1)?;
        (index <= u64::from(MAX_LOOP_INDEX)).then(|| Self::from_index(index as u32))
    }
}

/// What each open loop device receives with, indexed by its index (at most
/// `MAX_LOOP_INDEX` + 1 slots): every MAD looks its destination up here.
fn fabric() -> &'static Mutex<Vec<Option<RecvFn>>> {
    static FABRIC: OnceLock<Mutex<Vec<Option<RecvFn>>>> = OnceLock::new();
    FABRIC.get_or_init(Default::default)
}

/// One open loop device's transport.
pub struct LoopTransport {
    me: LoopIdentity,
    /// Behind one lock: every MAD sent consults all of it.
    faults: Mutex<Faults>,
}

/// Fault injection and counts of one loop device.
struct Faults {
    /// attribute ID → how many more MADs of it to drop.
    drops: AttrCounts,
    /// attribute ID → how many more sends of it fail with `-ENETDOWN` (tests
    /// of the kernel's send-failure branches).
    failures: AttrCounts,
    /// attribute ID → MADs handed to the fabric (dropped ones included).
    sent: AttrCounts,
    /// Random loss: percentages of MADs dropped and duplicated.
    drop_percent: u32,
    dup_percent: u32,
    /// xorshift64* state: deterministic per device for reproducible soaks.
    rng: u64,
    /// Tests: how long a send waits after handing its MAD over, so that the
    /// receiving worker surely runs first (tests of the log's order).
    #[cfg(test)]
    linger: std::time::Duration,
}

impl Faults {
    /// What becomes of the next MAD of `attr_id`: `-ENETDOWN`, or how many
    /// copies of it reach the wire (0, 1 or 2).
    fn next(&mut self, attr_id: u16) -> CmResult<u32> {
        if self.failures.take_one(attr_id) {
            return Err(ENETDOWN);
        }
        *self.sent.entry(attr_id) += 1;
        if self.drops.take_one(attr_id) {
            return Ok(0);
        }
        Ok(self.copies())
    }

    fn copies(&mut self) -> u32 {
        let (drop, dup) = (self.drop_percent, self.dup_percent);
        if drop == 0 && dup == 0 {
            return 1;
        }
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        let roll = (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) % 100;
        if roll < u64::from(drop) {
            0
        } else if roll < u64::from(drop + dup).min(100) {
            2
        } else {
            1
        }
    }
}

impl LoopTransport {
    /// Attaches `me` to the fabric; `-EBUSY` if it is already open.
    pub fn open(me: LoopIdentity, recv: RecvFn) -> CmResult<Arc<Self>> {
        let mut fabric = fabric().lock();
        let index = me.index as usize;
        if fabric.len() <= index {
            fabric.resize(index + 1, None);
        }
        if fabric[index].is_some() {
            return Err(EBUSY);
        }
        fabric[index] = Some(recv);
        Ok(Arc::new(Self {
            me,
            faults: Mutex::new(Faults {
                drops: AttrCounts::default(),
                failures: AttrCounts::default(),
                sent: AttrCounts::default(),
                drop_percent: 0,
                dup_percent: 0,
                rng: 0x9e37_79b9_7f4a_7c15 ^ u64::from(me.index),
                #[cfg(test)]
                linger: std::time::Duration::ZERO,
            }),
        }))
    }

    /// Drops `drop_percent` % and duplicates `dup_percent` % of the MADs this
    /// device sends, at random; `-EINVAL` above 100.
    pub fn set_loss(&self, drop_percent: u32, dup_percent: u32) -> CmResult {
        if drop_percent > 100 {
            return Err(crate::refusal::above(
                "drop_percent",
                drop_percent as usize,
                100,
            ));
        }
        if dup_percent > 100 {
            return Err(crate::refusal::above(
                "dup_percent",
                dup_percent as usize,
                100,
            ));
        }
        let mut faults = self.faults.lock();
        faults.drop_percent = drop_percent;
        faults.dup_percent = dup_percent;
        Ok(())
    }

    /// The next `count` sends of `attr_id` fail with `-ENETDOWN`.
    pub fn fail_next(&self, attr_id: u16, count: u32) {
        self.faults.lock().failures.set(attr_id, count.into());
    }

    /// Each MAD this device delivers keeps its sender `linger` longer in the
    /// send (tests: the receiver's worker then handles it first).
    #[cfg(test)]
    pub fn linger_after_send(&self, linger: std::time::Duration) {
        self.faults.lock().linger = linger;
    }

    /// How many MADs of `attr_id` this device has sent, dropped ones included.
    pub fn sent(&self, attr_id: u16) -> u64 {
        self.faults.lock().sent.get(attr_id)
    }
}

/// Counts by attribute ID: a short list searched in order (a dozen CM
/// attributes at most), cheaper per MAD than hashing into a map.
#[derive(Default)]
struct AttrCounts(Vec<(u16, u64)>);

impl AttrCounts {
    fn get(&self, attr_id: u16) -> u64 {
        self.0
            .iter()
            .find(|(a, _)| *a == attr_id)
            .map_or(0, |(_, n)| *n)
    }

    fn entry(&mut self, attr_id: u16) -> &mut u64 {
        let at = match self.0.iter().position(|(a, _)| *a == attr_id) {
            Some(at) => at,
            None => {
                self.0.push((attr_id, 0));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }

    fn set(&mut self, attr_id: u16, count: u64) {
        self.0.retain(|(a, _)| *a != attr_id);
        if count != 0 {
            self.0.push((attr_id, count));
        }
    }

    /// Consumes one pending count for `attr_id`, if any.
    fn take_one(&mut self, attr_id: u16) -> bool {
        let Some(at) = self.0.iter().position(|(a, n)| *a == attr_id && *n > 0) else {
            return false;
        };
        self.0[at].1 -= 1;
        if self.0[at].1 == 0 {
            self.0.swap_remove(at);
        }
        true
    }
}

impl LoopTransport {
    /// Puts `mad` on the fabric. A MAD crosses it unchanged, so the receiver
    /// gets `shared`, the sender's own buffer, when there is one.
    fn transmit(&self, addr: &MadAddr, mad: &Mad, shared: Option<&Arc<Mad>>) -> CmResult {
        let attr_id = u16::from_be_bytes([mad[16], mad[17]]);
        let copies = self.faults.lock().next(attr_id)?;
        let Some(dest) = LoopIdentity::from_gid(&addr.dgid) else {
            return Err(EINVAL);
        };
        let Some(recv) = fabric()
            .lock()
            .get(dest.index as usize)
            .and_then(Option::clone)
        else {
            return Ok(()); // nobody there: lost, as on a wire
        };
        if copies == 0 {
            return Ok(());
        }
        // What the receiver learns about the sender: the address to reply to.
        let reply = MadAddr {
            dlid: self.me.lid,
            sl: addr.sl,
            pkey_index: addr.pkey_index,
            grh: addr.grh,
            dgid: self.me.gid,
            sgid_index: 0,
            hop_limit: addr.hop_limit,
            traffic_class: addr.traffic_class,
            flow_label: addr.flow_label,
        };
        let mad = shared.cloned().unwrap_or_else(|| Arc::new(*mad));
        for _ in 0..copies {
            recv(1, reply, mad.clone());
        }
        #[cfg(test)]
        {
            let linger = self.faults.lock().linger;
            if !linger.is_zero() {
                std::thread::sleep(linger);
            }
        }
        Ok(())
    }
}

impl MadTransport for LoopTransport {
    fn send(&self, _port_num: u8, addr: &MadAddr, mad: &Mad) -> CmResult {
        self.transmit(addr, mad, None)
    }

    fn send_shared(&self, _port_num: u8, addr: &MadAddr, mad: &Arc<Mad>) -> CmResult {
        self.transmit(addr, mad, Some(mad))
    }

    fn drop_next(&self, attr_id: u16, count: u32) -> CmResult {
        self.faults.lock().drops.set(attr_id, count.into());
        Ok(())
    }

    fn as_loop(&self) -> Option<&LoopTransport> {
        Some(self)
    }

    fn close(&self) {
        if let Some(slot) = fabric().lock().get_mut(self.me.index as usize) {
            *slot = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_names_map_to_distinct_gids_and_lids() {
        let a = LoopIdentity::from_name("loop0").unwrap();
        let b = LoopIdentity::from_name("loop1").unwrap();
        assert_ne!(a.gid, b.gid);
        assert_eq!((a.lid, b.lid), (1, 2));
        assert_eq!(LoopIdentity::from_gid(&b.gid), Some(b));
        for bad in ["loop", "loop01", "loopx", "rxe0", "loop4096", "loop-1"] {
            assert_eq!(LoopIdentity::from_name(bad), None, "{bad}");
        }
    }
}
