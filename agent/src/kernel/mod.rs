//! Everything that touches the kernel through aya: the probe table, loading and attaching,
//! the ring reader, the live-socket table, kernel counters, watched directories, preflight.
pub mod attach;
pub mod features;
pub mod live;
pub mod loader;
pub mod preflight;
pub mod probes;
pub mod watch;
