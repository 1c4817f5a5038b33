//! SA clients (`struct ib_sa_client`): what a query counts against, so that
//! `ib_sa_unregister_client` can wait until the client's queries are over.
//!
//! The kernel keeps a user count and a completion inside the caller's
//! struct. Here the caller's struct is only storage: the library keeps the
//! count in a table keyed by the struct's address, so a client that was never
//! registered (or already unregistered) is recognised and refused with
//! `-EINVAL` instead of being read as garbage.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use parking_lot::{Condvar, Mutex};

/// One registered client: how many of its queries are not over yet (sent,
/// or their callback not yet returned).
#[derive(Default)]
pub struct ClientState {
    users: Mutex<usize>,
    idle: Condvar,
}

/// A query's hold on its client; dropped once its callback has returned
/// (`ib_sa_client_put` in the kernel's query release).
pub struct ClientRef(Arc<ClientState>);

impl Drop for ClientRef {
    fn drop(&mut self) {
        let mut users = self.0.users.lock();
        *users -= 1;
        if *users == 0 {
            self.0.idle.notify_all();
        }
    }
}

static CLIENTS: LazyLock<Mutex<HashMap<usize, Arc<ClientState>>>> = LazyLock::new(Default::default);

/// `ib_sa_register_client()`: the client at `addr` may start queries.
/// Registering it again starts afresh: queries of before no longer count.
pub fn register(addr: usize) {
    CLIENTS.lock().insert(addr, Arc::default());
}

/// A hold on the registered client at `addr`, for one query; `None` if it is
/// not registered.
pub fn hold(addr: usize) -> Option<ClientRef> {
    // Counted under the table's lock: an `unregister` that removes the
    // client meanwhile then sees this query (and waits), or it is refused.
    let clients = CLIENTS.lock();
    let state = clients.get(&addr)?.clone();
    *state.users.lock() += 1;
    Some(ClientRef(state))
}

/// `ib_sa_unregister_client()`: no new query may use the client, and the
/// call returns once every query it has is over, callbacks included, as the
/// kernel's `wait_for_completion(&client->comp)`. Nothing to wait for if it
/// was not registered.
///
/// On the worker (from an SA callback or a CM handler) it cannot wait: the
/// callbacks it would wait for run on that very thread. It then returns at
/// once, with an error logged; the queries still end as they would.
pub fn unregister(addr: usize) {
    let Some(state) = CLIENTS.lock().remove(&addr) else {
        return;
    };
    let mut users = state.users.lock();
    if *users != 0 && crate::cm::worker::on_worker() {
        drop(users);
        crate::ibcm_log!(
            Error,
            "ib_sa_unregister_client from a callback: not waiting for its queries"
        );
        return;
    }
    while *users != 0 {
        state.idle.wait(&mut users);
    }
}
