//! Reading apt's error messages.

/// Whether apt's error says the mirror answered the download with HTTP 403, 404 or 410 (apt
/// prints `Failed to fetch <url>  404  Not Found [IP: ...]`).
pub(super) fn not_served(why: &str) -> bool {
    why.contains("Failed to fetch")
        && why
            .split_whitespace()
            .any(|w| matches!(w, "403" | "404" | "410"))
}

/// The `E:` lines of a failed apt command's message, on one line (the whole message if it has
/// none).
pub(super) fn apt_error(message: &str) -> String {
    let errors: Vec<_> = message
        .lines()
        .filter_map(|l| {
            l.find("E: ")
                .map(|i| l[i + 3..].trim().trim_end_matches('.'))
        })
        .filter(|l| !l.is_empty())
        .collect();
    if errors.is_empty() {
        one_line(message)
    } else {
        errors.join("; ")
    }
}

/// A (possibly multi-line) message as one line.
pub(super) fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}
