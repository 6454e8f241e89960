//! sockwatch's agent: loads the kernel probes, reads their events and reports them.
pub mod adapter;
pub mod attribution;
pub mod cli;
pub mod engine;
pub mod enrich;
pub mod event;
pub mod loader;
pub mod output;
pub mod pipeline;
pub mod preflight;
pub mod probes;
pub mod pump;
pub mod reconcile;
pub mod replay;
pub mod scan;
pub mod watch;
