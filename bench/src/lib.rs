//! What the workload (`sockwatch-bench`) and xtask's bench share.
#![deny(missing_docs)]
pub mod http;
pub mod prom;
