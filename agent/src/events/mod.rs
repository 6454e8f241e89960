//! A kernel record's way to a written line: decoded ([`decode`]), completed with what only
//! userspace knows ([`complete`]), and written and replayed as an [`EventLine`].
pub mod complete;
pub mod decode;
pub mod dirs;
pub mod json;
pub mod line;
pub mod mntns;

pub use decode::{DecodeError, EventFlags, KernelEvent, decode};
pub use line::EventLine;
