//! The agent's HTTP endpoint: `/metrics`, `/healthz`, `/readyz` and a small JSON API, GET and
//! HEAD only, hardened against slow and garbage clients.
//!
//! A small HTTP/1.1 server on tokio rather than hyper: it serves a handful of GET routes with
//! no bodies, one request per connection (`Connection: close`), and the hardening is the whole
//! point — a deadline for the request head, a deadline for the response, a byte and a
//! header-count bound, and an admission policy decided at acceptance. hyper's
//! `header_read_timeout` has changed meaning across 1.x releases (first byte vs. connection
//! start, keep-alive idle not covered) and it has no response timeout, so it would need the
//! same wrapping; the request head is parsed by `httparse`, hyper's own parser.
//!
//! Admission never waits: the accept loop decides at once and goes back to accepting. At most
//! [`HttpLimits::max_connections`] general slots. When they are all taken, a new connection
//! takes the slot of the oldest idle connection (answered, its client not yet closed), else of
//! the oldest one still reading its head: an honest client sends its head at once, so it
//! loses its slot only to as many newer connections as there are slots, while a slow one is
//! pushed out by the next newcomer. When every connection is being answered (the renders are
//! queued), [`HttpLimits::reserve`] more slots answer only `/healthz` and `/readyz`, with a
//! short head deadline; past them a connection is refused with a `503` written without
//! waiting. Each of these, and every deadline missed, is counted ([`Dropped`]).
//!
//! `/healthz` and `/readyz` are answered on the connection's task: they read no lock. The
//! other routes read the agent's state behind locks the event path holds, so they are made on
//! the blocking pool, a few at a time ([`HttpLimits::renders`]), inside the response deadline.
//!
//! Access: `/api` names the node's processes, paths and pods, so by default it answers only
//! clients on loopback ([`ApiAccess`]); `/metrics` and the health routes answer every client
//! that reaches the listen address (Prometheus and the kubelet come from the node's IP).
pub mod client;
mod gate;
mod request;
mod response;
mod routes;

use std::{
    io,
    net::{IpAddr, SocketAddr},
    os::fd::AsRawFd as _,
    sync::Arc,
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
    time::{Instant, timeout_at},
};

use gate::{Gate, Phase, Pool, Slot, Ticket};
use request::{HeadError, Request, parse_head, read_head, too_large};
use response::{Status, response};
use routes::{handle, reads_state};

/// What the endpoint serves. Implemented by the agent's runtime state.
pub trait Api: Send + Sync + 'static {
    /// The Prometheus text exposition (the implementation refreshes scrape-time values first).
    fn metrics(&self) -> String;
    /// Probes attached and the start-up scan done. Called on the server's own task: it must
    /// not wait for a lock the event path holds.
    fn ready(&self) -> bool;
    /// Current sockets, all or those at `path` (for `sockwatch explain PATH`).
    fn sockets(&self, path: Option<&str>) -> serde_json::Value;
    /// The latest verdicts, at most `limit`, newest first.
    fn verdicts(&self, limit: usize) -> serde_json::Value;
    /// A connection the endpoint dropped or refused, and why (the default counts nothing).
    fn dropped(&self, _why: Dropped) {}
}

/// Why the endpoint dropped a connection before or instead of a normal close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// Every slot, the reserve's too, was busy: a `503` written without waiting, then closed.
    Refused,
    /// An answered connection whose client had not closed, for a new connection.
    EvictedIdle,
    /// The oldest connection still reading its head, for a new one.
    EvictedReading,
    /// The request head did not arrive within its deadline (`408`).
    HeaderTimeout,
    /// The response was not made and taken within [`HttpLimits::write_timeout`].
    ResponseTimeout,
    /// An answered client that neither closed nor sent within [`HttpLimits::idle_timeout`].
    IdleTimeout,
}

/// Bounds that keep slow and garbage clients from holding the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Request line and headers together.
    pub max_head_bytes: usize,
    pub max_headers: usize,
    /// The whole request head must arrive within this, from the connection's acceptance.
    pub header_timeout: Duration,
    /// The same on a reserve slot: a probe sends its head at once.
    pub reserve_header_timeout: Duration,
    /// The whole response must be made and taken within this.
    pub write_timeout: Duration,
    /// After the response, how long the server reads what the client still sends before it
    /// closes (a lingering close, so the client reads the response rather than a reset).
    pub idle_timeout: Duration,
    /// General connection slots.
    pub max_connections: usize,
    /// Slots kept for probes once every general one is being answered.
    pub reserve: usize,
    /// Responses that read the agent's state (`/metrics`, `/api`) made at once.
    pub renders: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_head_bytes: 8 * 1024,
            max_headers: 32,
            header_timeout: Duration::from_secs(3),
            reserve_header_timeout: Duration::from_secs(1),
            write_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(1),
            max_connections: 512,
            reserve: 16,
            renders: 2,
        }
    }
}

/// Connections the kernel queues before the agent accepts them (capped by
/// `net.core.somaxconn`): std and tokio listen with 128, which a burst of clients overflows.
pub const LISTEN_BACKLOG: u32 = 4096;

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

/// Listens on `addr` with a backlog of [`LISTEN_BACKLOG`], outside any runtime (the agent
/// binds before it loads the probes, so a taken port fails at once); non-blocking, for
/// `tokio::net::TcpListener::from_std`.
pub fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    // std listens with a backlog of 128; listen(2) again on a listening socket sets it anew.
    // SAFETY: a valid socket descriptor owned by `listener`, no pointers.
    if unsafe { libc::listen(listener.as_raw_fd(), LISTEN_BACKLOG as i32) } != 0 {
        return Err(io::Error::last_os_error());
    }
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves until the future is dropped; returns only on an accept error that is not transient.
pub async fn serve(
    listener: TcpListener,
    api: Arc<dyn Api>,
    limits: HttpLimits,
    access: ApiAccess,
) -> io::Result<()> {
    let server = Arc::new(Server {
        gate: Gate::new(limits.max_connections, limits.reserve),
        renders: Arc::new(Semaphore::new(limits.renders.max(1))),
        api,
        limits,
    });
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => server.admit(stream, access.admits(peer.ip())),
            Err(e) if is_transient(&e) => {
                log::warn!("http: accept: {e}");
                // Out of descriptors or memory: give the other connections time to finish.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The state every connection shares.
struct Server {
    gate: Gate,
    renders: Arc<Semaphore>,
    api: Arc<dyn Api>,
    limits: HttpLimits,
}

impl Server {
    /// Gives the connection a slot and its task, or refuses it, without waiting.
    fn admit(self: &Arc<Self>, stream: TcpStream, api_open: bool) {
        let Some(ticket) = self.gate.admit(Instant::now()) else {
            log::debug!("http: refusing a connection: every slot is busy");
            self.api.dropped(Dropped::Refused);
            refuse(&stream);
            return;
        };
        if let Some(why) = ticket.displaced {
            self.api.dropped(why);
        }
        let _ = stream.set_nodelay(true);
        let server = self.clone();
        tokio::spawn(async move { server.connection(stream, ticket, api_open).await });
    }

    async fn connection(&self, mut stream: TcpStream, ticket: Ticket, api_open: bool) {
        let _slot = Slot {
            gate: &self.gate,
            id: ticket.id,
        };
        let Some(head) = self.read_request(&mut stream, &ticket).await else {
            return;
        };
        let deadline = Instant::now() + self.limits.write_timeout;
        let Some(reply) = self.reply(head, ticket.pool, api_open, deadline).await else {
            return;
        };
        if self.send(&mut stream, &reply, deadline).await && self.gate.enter(ticket.id, Phase::Idle)
        {
            self.close_lingering(&mut stream, &ticket).await;
        }
    }

    /// The request head, a missed deadline as a `408`; `None` once evicted.
    async fn read_request(
        &self,
        stream: &mut TcpStream,
        ticket: &Ticket,
    ) -> Option<Result<Request, HeadError>> {
        let deadline = Instant::now()
            + match ticket.pool {
                Pool::Main => self.limits.header_timeout,
                Pool::Reserve => self.limits.reserve_header_timeout,
            };
        let head = tokio::select! {
            r = timeout_at(deadline, read_head(stream, &self.limits)) => r,
            _ = ticket.evict.notified() => return None,
        };
        if !self.gate.enter(ticket.id, Phase::Answering) {
            return None; // evicted as the head completed: the slot is someone else's
        }
        Some(head.unwrap_or_else(|_elapsed| {
            self.api.dropped(Dropped::HeaderTimeout);
            Err(HeadError::Reject(Status::Timeout, "request timeout"))
        }))
    }

    /// Writes the whole reply by `deadline`; `true` if the client took it.
    async fn send(&self, stream: &mut TcpStream, reply: &[u8], deadline: Instant) -> bool {
        let sent = timeout_at(deadline, async {
            stream.write_all(reply).await?;
            stream.shutdown().await
        })
        .await;
        if sent.is_err() {
            self.api.dropped(Dropped::ResponseTimeout);
        }
        matches!(sent, Ok(Ok(())))
    }

    /// Reads what the answered client still sends until it closes, the idle deadline, or its
    /// eviction: closing with unread input would reset the connection before the client has
    /// read the response.
    async fn close_lingering(&self, stream: &mut TcpStream, ticket: &Ticket) {
        let deadline = Instant::now() + self.limits.idle_timeout;
        tokio::select! {
            closed = linger(stream, deadline) => if !closed {
                self.api.dropped(Dropped::IdleTimeout);
            },
            _ = ticket.evict.notified() => {}
        }
    }

    /// The response to a head; `None`: close without answering.
    async fn reply(
        &self,
        head: Result<Request, HeadError>,
        pool: Pool,
        api_open: bool,
        deadline: Instant,
    ) -> Option<Vec<u8>> {
        let served = Served {
            api: self.api.as_ref(),
            api_open,
        };
        match head {
            Ok(req) if !reads_state(&req) => Some(handle(&req, served)),
            Ok(_) if pool == Pool::Reserve => Some(response(
                Status::Busy,
                "text/plain",
                b"busy: only /healthz and /readyz are answered\n",
                false,
            )),
            Ok(req) => self.render(req, api_open, deadline).await,
            Err(e) => reply_to(Err(e), served),
        }
    }

    /// A response that reads the agent's state, made on the blocking pool: the event path
    /// holds those locks, and this task must not wait for them.
    async fn render(&self, req: Request, api_open: bool, deadline: Instant) -> Option<Vec<u8>> {
        let made = timeout_at(deadline, async {
            let permit = self.renders.clone().acquire_owned().await;
            let permit = permit.expect("the render semaphore is never closed");
            let api = self.api.clone();
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                let served = Served {
                    api: api.as_ref(),
                    api_open,
                };
                handle(&req, served)
            })
            .await
        })
        .await;
        match made {
            Ok(Ok(reply)) => Some(reply),
            Ok(Err(e)) => {
                log::warn!("http: making a response: {e}");
                None
            }
            Err(_elapsed) => {
                self.api.dropped(Dropped::ResponseTimeout);
                None
            }
        }
    }
}

/// Best effort, without waiting: the client is told why, what it already sent is read (a
/// close with unread input would reset the connection and lose the answer), then closed.
fn refuse(stream: &TcpStream) {
    let _ = stream.try_write(&response(Status::Busy, "text/plain", b"busy\n", false));
    let _ = stream.try_read(&mut [0u8; 1024]);
}

/// Reads what the client still sends (a body, a pipelined request, at most 64 KiB) until it
/// closes or `deadline`; `true` if it closed.
async fn linger(stream: &mut TcpStream, deadline: Instant) -> bool {
    let mut sink = [0u8; 1024];
    let mut left = 64 * 1024usize;
    while left > 0 {
        match timeout_at(deadline, stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => left = left.saturating_sub(n),
            Ok(_) => return true,
            Err(_elapsed) => return false,
        }
    }
    false
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

#[cfg(test)]
mod tests;
