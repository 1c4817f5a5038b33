//! Subnet administration as values: the PathRecord codec ([`pathrec`]).

pub mod pathrec;
