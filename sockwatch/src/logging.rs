//! The agent's own log lines on stderr (`SOCKWATCH_LOG` filters them): text, or one JSON
//! object a line (`--log-format json`, config key `log_format`, `SOCKWATCH_LOG_FORMAT`) with
//! `level`, `time`, `target` and `message`, for a log pipeline that parses JSON.
use std::{
    io::Write as _,
    sync::atomic::{AtomicBool, AtomicU8, Ordering},
};

use serde::Deserialize;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// `[TIME LEVEL target] message`.
    #[default]
    Text,
    /// `{"level":…,"time":…,"target":…,"message":…}`.
    Json,
}

/// The format every line is written in: set once the flags, and then the config file, are
/// read, after the logger is installed (a config error is logged too).
static FORMAT: AtomicU8 = AtomicU8::new(LogFormat::Text as u8);
/// The flag (or environment) chose the format: the config file's key does not replace it.
static FROM_FLAG: AtomicBool = AtomicBool::new(false);

/// Installs the logger; `flag`: `--log-format` or `SOCKWATCH_LOG_FORMAT`, when given.
pub fn init(flag: Option<LogFormat>) {
    if let Some(format) = flag {
        FORMAT.store(format as u8, Ordering::Relaxed);
        FROM_FLAG.store(true, Ordering::Relaxed);
    }
    let text = env_logger::fmt::ConfigurableFormat::default();
    env_logger::Builder::from_env(env_logger::Env::new().filter_or("SOCKWATCH_LOG", "info"))
        .format(move |buf, record| match current() {
            LogFormat::Json => {
                let time = buf.timestamp_millis().to_string();
                writeln!(buf, "{}", json_line(record, &time))
            }
            LogFormat::Text => text.format(buf, record),
        })
        .init();
}

/// The config file's `log_format`, unless a flag chose one.
pub fn set_from_config(format: LogFormat) {
    if !FROM_FLAG.load(Ordering::Relaxed) {
        FORMAT.store(format as u8, Ordering::Relaxed);
    }
}

fn current() -> LogFormat {
    if FORMAT.load(Ordering::Relaxed) == LogFormat::Json as u8 {
        LogFormat::Json
    } else {
        LogFormat::Text
    }
}

/// One record as a JSON object; serde_json escapes whatever the message quotes (paths and
/// comms are attacker-controlled).
fn json_line(record: &log::Record<'_>, time: &str) -> String {
    serde_json::json!({
        "level": record.level().as_str(),
        "time": time,
        "target": record.target(),
        "message": record.args().to_string(),
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_line_carries_level_time_target_and_message() {
        let args = format_args!("removed \"/run/a\nb.sock\"");
        let record = log::Record::builder()
            .level(log::Level::Warn)
            .target("sockwatch::engine")
            .args(args)
            .build();
        let line = json_line(&record, "2026-12-05T09:41:13.123Z");
        assert!(!line.contains('\n'), "{line}");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "level": "WARN",
                "time": "2026-12-05T09:41:13.123Z",
                "target": "sockwatch::engine",
                "message": "removed \"/run/a\nb.sock\"",
            })
        );
    }
}
