//! The contract between sockwatch's kernel programs and its agent: the vocabulary both sides
//! speak (ids, event kinds, tiers, counters, map names) and the records they exchange.
//!
//! Everything exchanged is `#[repr(C)]` with explicit padding, so the byte layout is the same
//! on both sides; compile-time asserts in `event.rs` pin it. The `user` feature adds what only
//! the agent needs (serde, aya's `Pod`).
#![no_std]
#![deny(missing_docs)]

#[macro_use]
mod named;

pub mod counters;
pub mod event;
pub mod guard;
pub mod hash;
pub mod ids;
pub mod maps;
pub mod tier;
#[cfg(feature = "user")]
mod user;

pub use counters::{Counter, slots};
pub use event::{
    COMM_LEN, Event, EventKind, Fidelity, PATH_CAP, RENAME_FROM_AT, SUN_PATH_LEN, flags,
};
pub use guard::{GuardPolicy, GuardSwitch};
pub use hash::{NAME_HASH_TAIL, name_hash};
pub use ids::{FileId, Owner, kernel_dev_to_user};
pub use maps::{FD_SCAN_BOUNDED, FD_SCAN_MAX, LiveSock, WATCH_DEPTH, WatchedName, globals};
pub use tier::{Flavor, Tier};
