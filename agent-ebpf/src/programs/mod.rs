//! One module per hook family; each program's name says hook and tier.
pub mod bind;
