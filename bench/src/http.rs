//! The bench's one HTTP client, a plain GET: the workload and xtask scrape the agent's /metrics
//! with it.
use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use anyhow::{Context as _, bail};

/// GET `path` over HTTP/1.1 with `Connection: close` (5 s to connect, each read waiting at
/// most `read_timeout`); the body of a 200 answer.
pub fn get(addr: SocketAddr, path: &str, read_timeout: Duration) -> anyhow::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .with_context(|| format!("connect {addr}"))?;
    s.set_read_timeout(Some(read_timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut r = String::new();
    s.read_to_string(&mut r)?;
    match r.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_string()),
        _ => bail!("GET {path}: {}", r.lines().next().unwrap_or("no answer")),
    }
}
