//! What a person reads: a verdict as one sentence (`run --format text`, [`verdict`]) and a
//! socket path's timeline (`explain`, [`timeline`]). Pure: data in, strings out. Every
//! string that comes from outside the agent (a path, a command name, a pod's name) is written
//! through [`crate::quote`], so that a line stays one line and cannot drive the reader's terminal;
//! none of it is sliced by byte index (a name may be any UTF-8).
#![deny(clippy::string_slice, clippy::indexing_slicing)]
#[cfg(test)]
mod proptests;
pub mod timeline;
pub mod verdict;
mod words;

pub use words::who;

/// `TIME NODE what`, as `run --format text` writes a line (no node when the agent knows
/// none): `2026-12-02T17:20:01.123Z node-1 FOREIGN UNLINK: …`.
pub fn line(wall_ns: u64, node: &str, what: &str) -> String {
    match node {
        "" => format!("{} {what}", words::wall_ms(wall_ns)),
        node => format!(
            "{} {} {what}",
            words::wall_ms(wall_ns),
            crate::quote::quote(node)
        ),
    }
}

/// How `run` writes verdicts and `explain` its answer: for machines or for people.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// JSON: `run` a line per event and verdict, `explain` the agent's answer as it is.
    #[default]
    Json,
    /// Sentences: `run` a line per verdict (no event lines), `explain` a timeline.
    Text,
}
