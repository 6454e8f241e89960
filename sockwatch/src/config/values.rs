//! The values flags and the configuration file share: listen addresses and durations, each
//! checked against its range.
use std::{net::SocketAddr, time::Duration};

use super::{DEFAULT_LISTEN, DRAIN_INTERVAL_RANGE, SCAN_INTERVAL_RANGE, TAKEOVER_WINDOW_MAX};

/// A listen address: `HOST:PORT` (an IP literal, `[::1]:PORT` for IPv6), `:PORT` or `PORT`
/// (both every interface).
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    let port_only = s.strip_prefix(':').unwrap_or(s);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::new(DEFAULT_LISTEN.ip(), port));
    }
    s.parse::<SocketAddr>().map_err(|_| {
        format!("`{s}` is not an address: expected HOST:PORT with an IP host, :PORT or PORT")
    })
}

/// A duration as Go and Kubernetes write them: one or more `<number><unit>` parts, units
/// `ms`, `s`, `m` and `h`, a decimal number allowed (`500ms`, `1.5s`, `1m30s`, `1h 30m`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let example = "write e.g. 500ms, 10s, 1m30s or 1h";
    if s.is_empty() {
        return Err(format!("an empty duration: {example}"));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let (part, tail) = duration_part(rest).map_err(|e| format!("`{s}`{e}: {example}"))?;
        total = total
            .checked_add(part)
            .ok_or_else(|| format!("`{s}` is out of range"))?;
        rest = tail.trim_start();
    }
    Ok(total)
}

/// The first `<number><unit>` of `s` and what follows it; the error completes "`s`…".
fn duration_part(s: &str) -> Result<(Duration, &str), String> {
    let digits = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, after) = s.split_at(digits);
    let n: f64 = num.parse().map_err(|_| " is not a duration".to_owned())?;
    let after = after.trim_start();
    let unit_len = after
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(after.len());
    let (unit, tail) = after.split_at(unit_len);
    let scale = match unit {
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "" => return Err(format!(" has no unit after `{num}`")),
        u => return Err(format!(": unknown unit `{u}` (ms, s, m or h)")),
    };
    let part = Duration::try_from_secs_f64(n * scale).map_err(|_| " is out of range".to_owned())?;
    Ok((part, tail))
}

/// A duration within `range`.
fn parse_interval(s: &str, range: (Duration, Duration)) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    check_range(d, range)?;
    Ok(d)
}

/// A scan interval: zero (`0s`, no periodic sweeps) or within [`SCAN_INTERVAL_RANGE`].
pub fn parse_scan_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if !d.is_zero() {
        check_range(d, SCAN_INTERVAL_RANGE)?;
    }
    Ok(d)
}

/// A takeover window: zero (every foreign removal reported at once) up to
/// [`TAKEOVER_WINDOW_MAX`].
pub fn parse_takeover_window(s: &str) -> Result<Duration, String> {
    parse_interval(s, (Duration::ZERO, TAKEOVER_WINDOW_MAX))
}

/// A drain interval within [`DRAIN_INTERVAL_RANGE`].
pub fn parse_drain_interval(s: &str) -> Result<Duration, String> {
    parse_interval(s, DRAIN_INTERVAL_RANGE)
}

/// `d` within `range`, or why not.
pub(super) fn check_range(d: Duration, (lo, hi): (Duration, Duration)) -> Result<(), String> {
    if d < lo || d > hi {
        return Err(format!(
            "{d:?} is out of range: must be between {lo:?} and {hi:?}"
        ));
    }
    Ok(())
}
