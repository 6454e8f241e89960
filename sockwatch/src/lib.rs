//! sockwatch's agent: loads the kernel probes, reads their events and reports them.
//!
//! Layers, top to bottom; a module imports only from the layers below it:
//! `commands` → `pipeline` → `metrics`, `cli` → `text`, `kernel` → `events`, `scan` →
//! `attribution` → `config` → `engine`, `http`, `host`, `quote`, `logging`, `sockwatch_common`
//! (the bottom layer imports none of the agent's modules). docs/ARCHITECTURE.md draws the map.
pub mod attribution;
pub mod cli;
pub mod commands;
pub mod config;
pub mod engine;
pub mod events;
pub mod host;
pub mod http;
pub mod kernel;
pub mod logging;
pub mod metrics;
pub mod pipeline;
pub mod quote;
pub mod scan;
pub mod text;
