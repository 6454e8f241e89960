//! The bounded set of `watch` label values.
use std::{collections::BTreeSet, sync::Mutex};

use crate::config::{NO_WATCH, OTHER_WATCH, WATCH_LABELS};

/// The `watch` label values seen so far: at most [`WATCH_LABELS`], then [`OTHER_WATCH`].
#[derive(Default)]
pub struct WatchLabels {
    seen: Mutex<BTreeSet<String>>,
}

impl WatchLabels {
    /// The label of `watch` ("" for none: [`NO_WATCH`]), and whether it was seen first now.
    pub fn admit(&self, watch: &str) -> (String, bool) {
        let watch = if watch.is_empty() { NO_WATCH } else { watch };
        let mut seen = self.seen.lock().expect("watch labels");
        if seen.contains(watch) {
            return (watch.to_string(), false);
        }
        let label = if seen.len() < WATCH_LABELS {
            watch
        } else {
            OTHER_WATCH
        };
        (label.to_string(), seen.insert(label.to_string()))
    }

    /// The label `watch` was admitted under; one never admitted counts as [`OTHER_WATCH`].
    pub fn admitted(&self, watch: &str) -> String {
        let watch = if watch.is_empty() { NO_WATCH } else { watch };
        let seen = self.seen.lock().expect("watch labels");
        let label = if seen.contains(watch) {
            watch
        } else {
            OTHER_WATCH
        };
        label.to_string()
    }

    /// Every label admitted so far.
    pub fn all(&self) -> Vec<String> {
        self.seen
            .lock()
            .expect("watch labels")
            .iter()
            .cloned()
            .collect()
    }
}
