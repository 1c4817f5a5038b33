//! The lookup tables of one engine (the kernel's `cm.lock`-protected trees
//! and the local-id xarray), and the process-wide registry of the addresses
//! C knows ids by. Lock order: an id lock may be held while taking the table
//! lock, never the reverse.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock, Weak};

use parking_lot::{Mutex, MutexGuard};

use super::device::Device;
use super::id::CmIdPriv;
use crate::transport::IdSlice;

/// First service ID handed out for `IB_CM_ASSIGN_SERVICE_ID`.
const FIRST_ASSIGNED_SERVICE_ID: u64 = 0x0200_0000_0000_0000;

/// Hashes keys the library picks itself (local comm IDs, addresses): one
/// multiply and a fold instead of SipHash, on the tables every MAD and
/// every C call looks in. A peer chooses only what is looked up in them, never
/// what is stored, so it cannot make the tables collide. Tables keyed by what
/// peers send keep the std hasher and its random key.
#[derive(Default)]
pub struct OwnKeyHasher(u64);

impl Hasher for OwnKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing; the fold brings the well-mixed high half down to
        // the low bits that pick the bucket (addresses end in zero bits).
        let h = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 32);
    }
}

type OwnKeyMap<K, V> = HashMap<K, V, BuildHasherDefault<OwnKeyHasher>>;

pub struct Tables {
    /// local comm ID → id (`cm.local_id_table`).
    pub local: OwnKeyMap<u32, Arc<CmIdPriv>>,
    /// (device address, service ID) → listener (`cm.listen_service_table`).
    pub listen: HashMap<(usize, u64), Arc<CmIdPriv>>,
    /// (remote comm ID, remote CA GUID) → id (`cm.remote_id_table`).
    pub remote_id: HashMap<(u32, u64), Weak<CmIdPriv>>,
    /// (remote QPN, remote CA GUID) → id (`cm.remote_qp_table`).
    pub remote_qpn: HashMap<(u32, u64), Weak<CmIdPriv>>,
    /// (request ID, sender GID, sender LID) → the id answering that SIDR
    /// request (`cm.remote_sidr_table`).
    pub remote_sidr: HashMap<(u32, [u8; 16], u16), Weak<CmIdPriv>>,
    /// Open devices by the address C knows them by (the library's own keys:
    /// looked up for every id created and every MAD received).
    pub devices: OwnKeyMap<usize, Arc<Device>>,
    next_index: u32,
    pub listen_service_id: u64,
    /// XORed into every local comm ID (`cm.random_id_operand`).
    random_id_operand: u32,
}

const ADDRESS_SHARDS: usize = 16;

type Addresses = OwnKeyMap<usize, Arc<CmIdPriv>>;

/// The address C knows an id by → id: how a C pointer is checked before use.
/// Apart from `Tables`, and split by address, because every C call looks
/// here: the application's threads and the handlers on the worker then rarely
/// wait for each other, or for the worker's MAD lookups. Leaf locks: taken
/// under the table lock or none.
static ADDRESSES: LazyLock<[Mutex<Addresses>; ADDRESS_SHARDS]> =
    LazyLock::new(|| std::array::from_fn(|_| Mutex::default()));

/// The shard of the address table that holds `addr`.
pub fn addresses(addr: usize) -> MutexGuard<'static, Addresses> {
    // Ids are allocations of a few hundred bytes: bits above the lowest few
    // differ between neighbours.
    ADDRESSES[(addr >> 8) % ADDRESS_SHARDS].lock()
}

/// The names of the devices open in any engine of the process: a device is
/// open once per process (the kernel refuses a second CM agent on a port,
/// and a loop device is one port of the process's fabric).
static OPEN_NAMES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Marks `name` open; false if it is open already.
pub fn claim_name(name: &str) -> bool {
    let mut names = OPEN_NAMES.lock();
    if names.iter().any(|n| n == name) {
        return false;
    }
    names.push(name.to_owned());
    true
}

/// `name` is closed (or its open failed).
pub fn release_name(name: &str) {
    OPEN_NAMES.lock().retain(|n| n != name);
}

/// Calls `f` on every id C can see (refusal lines count them).
pub fn for_each_id(mut f: impl FnMut(&Arc<CmIdPriv>)) {
    for shard in ADDRESSES.iter() {
        shard.lock().values().for_each(&mut f);
    }
}

impl Tables {
    /// Empty tables whose local comm IDs start at a random point
    /// (`cm.local_id_next`, `cm.random_id_operand`).
    pub fn new() -> Tables {
        let random = RandomState::new().build_hasher().finish();
        Tables {
            local: OwnKeyMap::default(),
            listen: HashMap::new(),
            remote_id: HashMap::new(),
            remote_qpn: HashMap::new(),
            remote_sidr: HashMap::new(),
            devices: OwnKeyMap::default(),
            next_index: (random >> 32) as u32,
            listen_service_id: FIRST_ASSIGNED_SERVICE_ID,
            random_id_operand: random as u32,
        }
    }

    /// A local comm ID not in use: a cyclic counter XOR a per-process random
    /// value (`cm_alloc_id_priv`), inside `slice` when the MAD switch gave
    /// this process one. Never 0, which means "unknown" on the wire; `None`
    /// when every ID of the slice is taken.
    pub fn alloc_local_id(&mut self, slice: Option<IdSlice>) -> Option<u32> {
        let tries = slice.map_or(u64::MAX, |s| u64::from(s.mask()) + 1);
        for _ in 0..tries {
            let index = self.next_index;
            self.next_index = self.next_index.wrapping_add(1);
            let mut local_id = index ^ self.random_id_operand;
            if let Some(s) = slice {
                local_id = s.base | (local_id & s.mask());
            }
            if local_id != 0 && !self.local.contains_key(&local_id) {
                return Some(local_id);
            }
        }
        None
    }

    /// Makes `id` findable by its local comm ID and by its C address.
    pub fn insert_id(&mut self, local_id: u32, id: &Arc<CmIdPriv>) {
        self.local.insert(local_id, id.clone());
        addresses(id.addr()).insert(id.addr(), id.clone());
    }

    /// `cm_acquire_id()`: the id with `local_id` whose remote comm ID is
    /// `remote_id` (0 while the peer's is unknown).
    pub fn acquire_id(&self, local_id: u32, remote_id: u32) -> Option<Arc<CmIdPriv>> {
        let id = self.local.get(&local_id)?;
        let current = u32::from_be(id.public.remote_id.load(Ordering::Relaxed));
        (current == remote_id).then(|| id.clone())
    }

    /// Frees the tables' memory once the last device is closed (no id can
    /// exist then). A hash table keeps a pointer into the middle of its
    /// allocation, which valgrind's leak check reports as "possibly lost"
    /// at exit: a program that destroys and closes everything leaves none.
    pub fn release_when_no_device(&mut self) {
        if !self.devices.is_empty() {
            return;
        }
        self.local.shrink_to_fit();
        self.listen.shrink_to_fit();
        self.remote_id.shrink_to_fit();
        self.remote_qpn.shrink_to_fit();
        self.remote_sidr.shrink_to_fit();
        self.devices.shrink_to_fit();
        for shard in ADDRESSES.iter() {
            shard.lock().shrink_to_fit();
        }
    }

    /// `cm_find_remote_id()`.
    pub fn find_remote_id(&self, remote_ca_guid: u64, remote_id: u32) -> Option<Arc<CmIdPriv>> {
        self.remote_id
            .get(&(remote_id, remote_ca_guid))
            .and_then(Weak::upgrade)
    }
}

/// How many destroyed ids keep their memory before it may be reused.
pub const ID_QUARANTINE: usize = 1024;

/// How many closed devices keep their memory before it may be reused.
pub const DEVICE_QUARANTINE: usize = 64;

/// The last `N` objects C must no longer use, oldest first. A weak reference
/// drops the object but keeps its allocation, so the allocator cannot hand
/// that address to a new one at once: a stale C pointer finds nothing in the
/// tables (`-EINVAL`) rather than someone else's new object.
struct Quarantine<T, const N: usize>(LazyLock<Mutex<VecDeque<Weak<T>>>>);

impl<T, const N: usize> Quarantine<T, N> {
    const fn new() -> Self {
        Self(LazyLock::new(|| Mutex::new(VecDeque::with_capacity(N + 1))))
    }

    fn keep(&self, gone: &Arc<T>) {
        let released = {
            let mut q = self.0.lock();
            q.push_back(Arc::downgrade(gone));
            if q.len() > N { q.pop_front() } else { None }
        };
        // Freeing the memory happens here, after the lock.
        drop(released);
    }
}

/// Destroyed ids: about 300 bytes each.
static ID_ADDRESSES: Quarantine<CmIdPriv, ID_QUARANTINE> = Quarantine::new();
/// Closed devices: their contents (transport, ports, counters) are freed at
/// close as before; only the `Device` allocation itself is kept.
static DEVICE_ADDRESSES: Quarantine<Device, DEVICE_QUARANTINE> = Quarantine::new();

/// Keeps the address of `id`, just destroyed, from being reused until
/// `ID_QUARANTINE` more ids were destroyed.
pub fn quarantine(id: &Arc<CmIdPriv>) {
    ID_ADDRESSES.keep(id);
}

/// Keeps the address of `device`, just closed, from being reused until
/// `DEVICE_QUARANTINE` more devices were closed.
pub fn quarantine_device(device: &Arc<Device>) {
    DEVICE_ADDRESSES.keep(device);
}
