//! What the bench prints while it runs: progress lines, and the notes the report keeps.
use std::{io::Write as _, time::Instant};

/// `bench [elapsed] what`, flushed at once.
pub fn progress(started: Instant, what: &str) {
    println!("bench [{:>5.0?}] {what}", started.elapsed());
    let _ = std::io::stdout().flush();
}

/// Remarks for the report's "Not measured here" list (a comparison left out, a figure not
/// taken), each printed as it is taken.
#[derive(Debug, Default)]
pub struct Notes(Vec<String>);

impl Notes {
    pub fn push(&mut self, note: String) {
        println!("bench: {note}");
        self.0.push(note);
    }

    pub fn iter(&self) -> impl Iterator<Item = &String> {
        self.0.iter()
    }
}
