//! The agent's HTTP endpoint: `/metrics`, `/healthz`, `/readyz` and a small JSON API, GET and
//! HEAD only, hardened against slow and garbage clients.
//!
//! A small HTTP/1.1 server on tokio rather than hyper: it serves a handful of GET routes with
//! no bodies, one request per connection (`Connection: close`), and the hardening is the whole
//! point — a single deadline for the request head, a deadline for the response, a byte and a
//! header-count bound, and an admission policy that prefers a new client over one that has
//! spent a second not finishing its request. hyper's `header_read_timeout` has changed meaning
//! across 1.x releases (first byte vs. connection start, keep-alive idle not covered) and it
//! has no response timeout, so it would need the same wrapping; the request head is parsed by
//! `httparse`, hyper's own parser.
//!
//! Admission: at most [`HttpLimits::max_connections`] connections at once. When all are
//! taken, a new connection evicts the oldest connection that is still reading its request head
//! after [`HttpLimits::evict_after`]; if none qualifies it waits for a free slot (honest
//! requests finish in milliseconds) at most until one does, and is refused with `503` after
//! twice that. Connections are never queued behind slow ones: a slow client holds a slot for
//! at most `evict_after` once the slots run out, and `read_timeout` in any case.
//!
//! Access: `/api` names the node's processes, paths and pods, so by default it answers only
//! clients on loopback ([`ApiAccess`]); `/metrics` and the health routes answer every client
//! that reaches the listen address (Prometheus and the kubelet come from the node's IP).
pub mod client;
mod gate;
mod request;
mod response;
mod routes;

use std::{io, net::IpAddr, sync::Arc, time::Duration};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::Notify,
    time::{Instant, timeout},
};

use gate::{Gate, ReadingGuard};
use request::{HeadError, Request, parse_head, read_head, too_large};
use response::{Status, response};
use routes::handle;

/// What the endpoint serves. Implemented by the agent's runtime state.
pub trait Api: Send + Sync + 'static {
    /// The Prometheus text exposition (the implementation refreshes scrape-time values first).
    fn metrics(&self) -> String;
    /// Probes attached and the start-up scan done.
    fn ready(&self) -> bool;
    /// Current sockets, all or those at `path` (for `sockwatch explain PATH`).
    fn sockets(&self, path: Option<&str>) -> serde_json::Value;
    /// The latest verdicts, at most `limit`, newest first.
    fn verdicts(&self, limit: usize) -> serde_json::Value;
}

/// Bounds that keep slow and garbage clients from holding the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Request line and headers together.
    pub max_head_bytes: usize,
    pub max_headers: usize,
    /// The whole request head must arrive within this, from the connection's acceptance.
    pub read_timeout: Duration,
    /// The whole response must be taken within this.
    pub write_timeout: Duration,
    pub max_connections: usize,
    /// At the connection cap, a connection still reading its head after this gives way.
    pub evict_after: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_head_bytes: 8 * 1024,
            max_headers: 32,
            read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            max_connections: 64,
            evict_after: Duration::from_secs(1),
        }
    }
}

/// Who may read `/api`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ApiAccess {
    /// Clients on loopback only; any other gets `403 Forbidden`.
    #[default]
    Loopback,
    /// Every client that reaches the listen address (`api_remote = true`).
    Everyone,
}

impl ApiAccess {
    /// Whether a client at `peer` may read `/api` (`::ffff:127.0.0.1`, a v4 client of a v6
    /// listener, is on loopback too).
    pub fn admits(self, peer: IpAddr) -> bool {
        self == ApiAccess::Everyone || peer.to_canonical().is_loopback()
    }
}

/// `limit` of `/api/verdicts` when not given, and its bound.
pub const DEFAULT_VERDICT_LIMIT: usize = 100;
pub const MAX_VERDICT_LIMIT: usize = 10_000;

/// Serves until the future is dropped; returns only on an accept error that is not transient.
pub async fn serve(
    listener: TcpListener,
    api: Arc<dyn Api>,
    limits: HttpLimits,
    access: ApiAccess,
) -> io::Result<()> {
    let gate = Arc::new(Gate::new(limits.max_connections.max(1)));
    loop {
        let (stream, api_open) = match listener.accept().await {
            Ok((stream, peer)) => (stream, access.admits(peer.ip())),
            Err(e) if is_transient(&e) => {
                log::warn!("http: accept: {e}");
                // Out of descriptors or memory: give the other connections time to finish.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let Some((id, evicted)) = gate.admit(limits.evict_after).await else {
            log::debug!("http: refusing a connection: every slot is busy answering");
            // Best effort, without waiting: the client is told why, then closed.
            let _ = stream.try_write(&response(Status::Busy, "text/plain", b"busy\n", false));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let gate = gate.clone();
        let api = api.clone();
        tokio::spawn(async move {
            let guard = ReadingGuard { gate: &gate, id };
            let api = Served {
                api: api.as_ref(),
                api_open,
            };
            connection(stream, &guard, &evicted, api, limits).await;
        });
    }
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
            | io::ErrorKind::TimedOut
            | io::ErrorKind::OutOfMemory
    ) || matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::EPROTO)
    )
}

/// What one client is served: the API, and whether it may read `/api`.
#[derive(Clone, Copy)]
pub struct Served<'a> {
    pub api: &'a dyn Api,
    /// [`ApiAccess::admits`] this client.
    pub api_open: bool,
}

/// The response to a head as read from a client; `None`: close without answering.
fn reply_to(head: Result<Request, HeadError>, api: Served<'_>) -> Option<Vec<u8>> {
    match head {
        Err(HeadError::Closed) => None,
        Err(HeadError::Io(e)) => {
            log::debug!("http: reading a request: {e}");
            None
        }
        Err(HeadError::Reject(status, why)) => Some(response(
            status,
            "text/plain",
            format!("{why}\n").as_bytes(),
            false,
        )),
        Ok(req) => Some(handle(&req, api)),
    }
}

/// What the server answers to these bytes once the client stops sending: parsing, bounds and
/// routing without a socket (the fuzz target's entry). `None`: nothing (no bytes at all).
pub fn respond(buf: &[u8], limits: &HttpLimits, api: Served<'_>) -> Option<Vec<u8>> {
    let head = match parse_head(buf, limits.max_headers) {
        _ if buf.len() > limits.max_head_bytes => Err(too_large(buf)),
        Ok(Some(req)) => Ok(req),
        Ok(None) if buf.is_empty() => Err(HeadError::Closed),
        Ok(None) => Err(HeadError::Reject(Status::BadRequest, "incomplete request")),
        Err(e) => Err(e),
    };
    reply_to(head, api)
}

async fn connection(
    mut stream: TcpStream,
    guard: &ReadingGuard<'_>,
    evicted: &Notify,
    api: Served<'_>,
    limits: HttpLimits,
) {
    let head = tokio::select! {
        r = timeout(limits.read_timeout, read_head(&mut stream, &limits)) => r,
        _ = evicted.notified() => return,
    };
    let Some(_slot) = guard.gate.finish_reading(guard.id) else {
        return; // evicted as the head completed
    };
    let reply = match head {
        Err(_elapsed) => response(Status::Timeout, "text/plain", b"request timeout\n", false),
        Ok(head) => match reply_to(head, api) {
            Some(reply) => reply,
            None => return,
        },
    };
    let deadline = Instant::now() + limits.write_timeout;
    let _ = tokio::time::timeout_at(deadline, async {
        stream.write_all(&reply).await?;
        stream.shutdown().await?;
        // Lingering close: read what the client still sends (a body, a pipelined request)
        // so closing does not reset the connection before it has read the response.
        let mut sink = [0u8; 4096];
        let linger = (Instant::now() + Duration::from_secs(1)).min(deadline);
        let mut left = 64 * 1024usize;
        while left > 0 {
            match tokio::time::timeout_at(linger, stream.read(&mut sink)).await {
                Ok(Ok(n)) if n > 0 => left = left.saturating_sub(n),
                _ => break,
            }
        }
        io::Result::Ok(())
    })
    .await;
}

#[cfg(test)]
mod tests;
