//! A kernel record's way to a written line: decoded ([`decode`]), completed with what only
//! userspace knows ([`complete`]), and written and replayed as an [`EventLine`]; every line
//! `run` writes carries the stream's own fields too ([`Stamped`]: schema, wall time, node).
pub mod complete;
pub mod decode;
pub mod dirs;
pub mod json;
pub mod line;
pub mod mntns;
#[cfg(test)]
mod tests;

pub use decode::{DecodeError, EventFlags, KernelEvent, decode};
pub use line::{EventLine, SCHEMA, SeenIn, Stamped};
