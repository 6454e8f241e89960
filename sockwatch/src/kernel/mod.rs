//! Everything that touches the kernel through aya: the probe table, loading and attaching,
//! the ring reader, the live-socket table, kernel counters, watched directories, guard mode's
//! maps, preflight.
pub mod attach;
pub mod btf;
pub mod counters;
pub mod features;
pub mod guard;
pub mod live;
pub mod loader;
pub mod preflight;
pub mod probes;
pub mod slot_filter;
pub mod watch;
