//! How the switch is set up: its comm ID slices, timewait and each user's quotas.

use std::time::Duration;

/// How the switch is set up.
#[derive(Debug, Clone, Copy)]
pub struct SwitchConfig {
    /// The low bits of a comm ID that a process picks: 20 gives each process
    /// a million IDs and the host 4095 slices (slice 0 is never handed out).
    pub slice_bits: u8,
    /// How long the slice of a process that went away stays reserved.
    pub timewait: Duration,
    /// What one user (uid) may make the daemon hold.
    pub quotas: Quotas,
    /// How long after its accept a connection may stay unregistered: a
    /// fixed deadline that no message extends.
    pub register_deadline: Duration,
    /// The host's path cache (`path_cache`): its TTL, 0 for none.
    pub path_cache: crate::sa::cache::Config,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        Self {
            slice_bits: 20,
            timewait: Duration::from_secs(60),
            quotas: Quotas::default(),
            register_deadline: Duration::from_secs(10),
            path_cache: crate::sa::cache::Config::default(),
        }
    }
}

/// Per-user bounds on what tenants make the daemon hold: whoever may open
/// the socket is a tenant, and tenants do not trust each other. Each is
/// counted per uid (`SO_PEERCRED`), root included, and `ibcmd --quota
/// NAME=N` changes it (docs/ibcmd.md, "Quotas").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Connections to the socket at once, registered or not (each holds a
    /// descriptor and a thread of the daemon's). Beyond: closed at accept.
    pub connections: usize,
    /// Registered processes (device openings) at once. Beyond: `Register`
    /// answered `-EAGAIN`.
    pub registrations: usize,
    /// Comm ID slices owned or in timewait; `0` means a quarter of them
    /// (1023 of 4095). Beyond: `Register` answered `-EAGAIN`.
    pub slices: usize,
    /// Service IDs listened on, over all the user's processes (each of
    /// which may hold 4,096). Beyond: `Listen` answered `-ENOMEM` (the
    /// kernel's `cm_init_listen` errno).
    pub listens: usize,
    /// Requests (REQs and SIDR_REQs) routed to the user's processes that
    /// they may still answer, about 140 bytes each; beyond, a process's
    /// oldest is forgotten (its requester retransmits it).
    pub requests: usize,
}

impl Default for Quotas {
    fn default() -> Self {
        Self {
            connections: 512,
            registrations: 256,
            slices: 0,
            listens: 16384,
            requests: 32768,
        }
    }
}
