//! What the workload (`sockwatch-bench`) and xtask's bench share.
pub mod http;
