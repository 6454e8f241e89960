//! The subcommands: each wires the layers below for one thing the operator asks.
pub mod check;
pub mod explain;
mod guard;
pub mod replay;
pub mod run;
pub mod scan;
