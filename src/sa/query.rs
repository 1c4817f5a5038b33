//! Outstanding SA queries: the kernel's query table (`queries`, an xarray of
//! ids) and its MAD agent's send timeouts, in one table.
//!
//! A query is a record: its id (also the low 32 bits of its TID), the MAD,
//! how to send it again, its retry timer on the engine's wheel and what to do
//! with the outcome. Whoever takes it out of the table owns the outcome: the
//! answer (`deliver`), the last timeout (`retry_handler`), a cancel, a failed
//! resend or the device's close. Taking is atomic under the table's lock, so
//! every query completes exactly once and no thread waits per query.
//!
//! Lock order: the table, then the worker's queue (arming or cancelling a
//! timer). Nothing is sent under the table's lock: a send takes the device's
//! close lock, and a closing device flushes this table.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{RecvTimeoutError, SyncSender, sync_channel};
use std::time::Duration;

use super::client::ClientRef;
use super::{EINTR, ETIMEDOUT, pathrec};
use crate::cm::engine::Cm;
use crate::cm::path::Path;
use crate::cm::worker::{self, TimerWork};
use crate::errno::{CmResult, EIO};
use crate::timer::TimerId;
use crate::wire::Mad;

/// How a query goes to the SA again: sends one encoded MAD.
pub type Sender = Arc<dyn Fn(&Mad) -> CmResult + Send + Sync>;

/// What becomes of a query's outcome.
pub enum Completion {
    /// An `ib_sa_path_rec_get` callback: queued to the worker, like a CM
    /// event, and run there with no library lock held.
    Callback(Box<dyn FnOnce(CmResult<Path>) + Send>),
    /// A caller blocked in `ibcm_init_path`: told at once by whichever thread
    /// completes the query (the blocked thread may be the worker itself).
    Waiter(SyncSender<CmResult<Path>>),
}

/// How long each send waits for its answer, and how many times a query is
/// sent again after the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub per_try: Duration,
    pub retries: u32,
}

/// The kernel's `nmbr_sa_query_retries`.
const KERNEL_RETRIES: u64 = 10;
/// The longest wait of one try: 2^40 ms (35 years) is "never" to any caller
/// and keeps a deadline far from `Instant`'s overflow.
const MAX_PER_TRY_MS: u64 = 1 << 40;

impl Timing {
    /// The kernel's `send_mad()`: `timeout_ms` split over its 10 resends
    /// (each try waits a tenth, so the query ends after 1.1 × `timeout_ms`);
    /// below 10 ms, tries of 1 ms, `timeout_ms` of them after the first.
    pub fn kernel(timeout_ms: u64) -> Self {
        let per_try = timeout_ms / KERNEL_RETRIES;
        let (per_try, retries) = if per_try == 0 {
            (1, timeout_ms as u32)
        } else {
            (per_try.min(MAX_PER_TRY_MS), KERNEL_RETRIES as u32)
        };
        Timing {
            per_try: Duration::from_millis(per_try),
            retries,
        }
    }

    /// `timeout_ms` over the first try and `retries` more (`ibcm_init_path`'s
    /// documented 4 tries of 500 ms).
    pub fn split(timeout_ms: u32, retries: u32) -> Self {
        Timing {
            per_try: Duration::from_millis(u64::from((timeout_ms / (retries + 1)).max(1))),
            retries,
        }
    }
}

/// A new query: where it goes and what to do with its answer.
pub struct NewQuery {
    /// The device it is sent on (its address): only that device's answers
    /// and close concern it.
    pub owner: usize,
    /// The LID the query goes to (the SM's): only an answer from there
    /// completes it, as the MAD layer's `rcv_has_same_gid`.
    pub sa_lid: u16,
    pub query: pathrec::PathQuery,
    pub send: Sender,
    pub timing: Timing,
    pub done: Completion,
    pub client: Option<ClientRef>,
}

struct Query {
    owner: usize,
    sa_lid: u16,
    mad: Box<Mad>,
    send: Sender,
    per_try: Duration,
    retries_left: u32,
    timer: Option<TimerId>,
    /// The `struct ib_sa_query *` the caller got: a live allocation of ours
    /// that only identifies the query (never read through the C pointer).
    handle: Box<u32>,
    done: Completion,
    client: Option<ClientRef>,
}

/// One engine's outstanding queries (`Cm::sa_queries`).
#[derive(Default)]
pub struct Table {
    queries: HashMap<u32, Query>,
    last_id: u32,
}

impl Table {
    /// A free id in 1..=i32::MAX, cyclic as the kernel's `__xa_alloc_cyclic`
    /// would be: a finished query's id is not reused soon.
    fn new_id(&mut self) -> u32 {
        loop {
            self.last_id = if self.last_id >= i32::MAX as u32 {
                1
            } else {
                self.last_id + 1
            };
            if !self.queries.contains_key(&self.last_id) {
                return self.last_id;
            }
        }
    }
}

/// Sends a new query and returns its id and handle. A failed first send is
/// the caller's error, with no completion (as the kernel's `send_mad`).
pub fn submit(cm: &Cm, new: NewQuery) -> CmResult<(i32, usize)> {
    submit_announced(cm, new, |_, _| {})
}

/// `submit`, telling `announce` the query's id and handle before its first
/// send, as the kernel sets `*sa_query` before `send_mad`: the answer (and
/// the callback) may come before this returns, and a callback that clears
/// or frees where the caller keeps the handle must find it written already.
pub fn submit_announced(
    cm: &Cm,
    new: NewQuery,
    announce: impl FnOnce(i32, usize),
) -> CmResult<(i32, usize)> {
    let mut table = cm.sa_queries.lock();
    let id = table.new_id();
    let mad = Box::new(new.query.encode(id));
    let handle = Box::new(id);
    let token = &*handle as *const u32 as usize;
    let first = (mad.clone(), new.send.clone());
    table.queries.insert(
        id,
        Query {
            owner: new.owner,
            sa_lid: new.sa_lid,
            mad,
            send: new.send,
            per_try: new.timing.per_try,
            retries_left: new.timing.retries,
            timer: None,
            handle,
            done: new.done,
            client: new.client,
        },
    );
    drop(table);
    announce(id as i32, token);
    if let Err(e) = (first.1)(&first.0) {
        // Still there: the caller's error, with no completion. Gone: a close
        // (or an answer) took it while it was being sent and its outcome is
        // on the way, so the call must succeed, or it would complete twice.
        if let Some(query) = take(cm, id, |_| true) {
            drop(query);
            return Err(e);
        }
    }
    arm_retry(cm, id);
    Ok((id as i32, token))
}

/// Arms the retry timer of query `id`, unless it completed meanwhile.
fn arm_retry(cm: &Cm, id: u32) {
    let mut table = cm.sa_queries.lock();
    if let Some(query) = table.queries.get_mut(&id) {
        query.timer = Some(worker::arm_timer(cm, query.per_try, TimerWork::SaRetry(id)));
    }
}

/// Takes query `id` out of the table if `which` says it is the one meant.
fn take(cm: &Cm, id: u32, which: impl FnOnce(&Query) -> bool) -> Option<Query> {
    let mut table = cm.sa_queries.lock();
    if !which(table.queries.get(&id)?) {
        return None;
    }
    table.queries.remove(&id)
}

/// A received SA MAD of device `owner`, from LID `from`: a GetResp completes
/// the query of its TID (the record, or `-EINVAL` for an error status) if it
/// comes from where the query went; anything else (a late or duplicate
/// answer, another node's guess of a TID) is dropped.
pub fn deliver(cm: &Cm, owner: usize, from: u16, mad: &Mad) {
    if mad[1] != super::MGMT_CLASS_SA || mad[3] != super::METHOD_GET_RESP {
        return;
    }
    let ours = |q: &Query| q.owner == owner && q.sa_lid == from;
    if let Some(query) = take(cm, super::tid_low(mad), ours) {
        finish(cm, query, pathrec::decode_response(mad));
    }
}

/// Query `id`'s try timed out (`timer`: the wheel's timer that fired; `None`
/// when a blocked waiter on the worker stands in for it): resend, or complete
/// with `-ETIMEDOUT` after the last try, as the MAD layer's
/// `IB_WC_RESP_TIMEOUT_ERR`.
pub fn retry_handler(cm: &Cm, id: u32, timer: Option<TimerId>) {
    let mut table = cm.sa_queries.lock();
    let Some(query) = table.queries.get_mut(&id) else {
        return;
    };
    if timer.is_some() && query.timer != timer {
        return; // a timer of a try before: its query moved on
    }
    if let Some(old) = query.timer.take() {
        worker::cancel_timer(cm, old);
    }
    if query.retries_left == 0 {
        let query = table.queries.remove(&id);
        drop(table);
        query
            .into_iter()
            .for_each(|q| finish(cm, q, Err(ETIMEDOUT)));
        return;
    }
    query.retries_left -= 1;
    let (mad, send) = (query.mad.clone(), query.send.clone());
    drop(table);
    match send(&mad) {
        Ok(()) => arm_retry(cm, id),
        Err(e) => {
            crate::ibcm_log!(Debug, "SA query {id}: resend failed ({e:?})");
            if let Some(query) = take(cm, id, |_| true) {
                finish(cm, query, Err(EIO));
            }
        }
    }
}

/// `ib_sa_cancel_query(id, query)` on a query of `cm`: completes it with
/// `-EINTR`, as the MAD layer's flush; nothing if it is over (or `handle` is
/// not its).
pub fn cancel(cm: &Cm, id: i32, handle: usize) {
    let Ok(id) = u32::try_from(id) else {
        return;
    };
    if let Some(query) = take(cm, id, |q| &*q.handle as *const u32 as usize == handle) {
        finish(cm, query, Err(EINTR));
    }
}

/// Device `owner` closes: each of its queries completes with `-EINTR`, as
/// the kernel's flush of the SA agent when a device goes away.
pub fn flush(cm: &Cm, owner: usize) {
    let mut table = cm.sa_queries.lock();
    let ids: Vec<u32> = table
        .queries
        .iter()
        .filter(|(_, q)| q.owner == owner)
        .map(|(&id, _)| id)
        .collect();
    let gone: Vec<Query> = ids
        .iter()
        .filter_map(|id| table.queries.remove(id))
        .collect();
    drop(table);
    gone.into_iter().for_each(|q| finish(cm, q, Err(EINTR)));
}

/// Hands a taken query's outcome over: to its waiter at once, or to its
/// callback on the worker. The client's hold goes once the callback returned.
fn finish(cm: &Cm, mut query: Query, outcome: CmResult<Path>) {
    if let Some(timer) = query.timer.take() {
        worker::cancel_timer(cm, timer);
    }
    match query.done {
        Completion::Waiter(waiter) => {
            // `BUSY` as it is: the path cache backs off on it.
            // The waiter may have given up (its bound passed): nobody to tell.
            let _ = waiter.try_send(outcome);
        }
        Completion::Callback(callback) => {
            let client = query.client.take();
            let outcome = outcome.map_err(super::kernel_errno);
            worker::queue_sa_callback(
                cm,
                Box::new(move || {
                    callback(outcome);
                    drop(client);
                }),
            );
        }
    }
}

/// Sends the query `start` makes for a waiter, and waits for its outcome:
/// what `ibcm_init_path` does. Off `cm`'s worker, its wheel's timers drive
/// the retries and the wait is a safety bound (also on another engine's
/// worker: those timers still fire, on `cm`'s clock); on `cm`'s worker (a CM
/// handler calls it) none can fire meanwhile, so the waiter drives them
/// itself.
pub fn wait_for(cm: &Cm, start: impl FnOnce(Completion) -> CmResult<NewQuery>) -> CmResult<Path> {
    let (tx, rx) = sync_channel(1);
    let new = start(Completion::Waiter(tx))?;
    let per_try = new.timing.per_try;
    let total = per_try * (new.timing.retries + 1);
    let (id, _) = submit(cm, new)?;
    let id = id as u32;
    if cm.on_its_worker() {
        loop {
            match rx.recv_timeout(per_try) {
                Ok(outcome) => return outcome,
                Err(RecvTimeoutError::Timeout) => retry_handler(cm, id, None),
                Err(RecvTimeoutError::Disconnected) => return Err(EIO),
            }
        }
    }
    // The worker may be busy for a while: a generous bound over the timeout.
    const SLACK: Duration = Duration::from_secs(10);
    rx.recv_timeout(total + SLACK).unwrap_or_else(|_| {
        drop(take(cm, id, |_| true));
        Err(ETIMEDOUT)
    })
}

/// How many queries are outstanding (tests).
#[cfg(test)]
pub fn outstanding(cm: &Cm) -> usize {
    cm.sa_queries.lock().queries.len()
}
