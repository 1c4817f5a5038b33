//! Subnet administration as values: the PathRecord codec ([`pathrec`]) and
//! the path cache's table ([`cache`]), which the root crate's blocking
//! `sa::cache::PathCache` holds behind its lock.

pub mod cache;
pub mod pathrec;
