//! The user half: what only the agent needs of the contract (aya's map access).
use crate::{
    Event, FileId, LiveSock, WatchedName,
    guard::{GuardAllowKey, Orphan, OrphanKey},
    maps::{Pending, PendingKey},
};

// SAFETY: each type is `#[repr(C)]`, `Copy`, made only of integers and integer arrays with
// explicit padding fields (the layout pins in `event.rs` and `maps.rs` check the sizes), so
// every byte pattern is a valid value and no padding byte is left uninitialised.
unsafe impl aya::Pod for Event {}
// SAFETY: as above.
unsafe impl aya::Pod for FileId {}
// SAFETY: as above.
unsafe impl aya::Pod for LiveSock {}
// SAFETY: as above.
unsafe impl aya::Pod for WatchedName {}
// SAFETY: as above.
unsafe impl aya::Pod for PendingKey {}
// SAFETY: as above.
unsafe impl aya::Pod for Pending {}
// SAFETY: as above.
unsafe impl aya::Pod for GuardAllowKey {}
// SAFETY: as above.
unsafe impl aya::Pod for OrphanKey {}
// SAFETY: as above.
unsafe impl aya::Pod for Orphan {}
