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
pub mod client;

use std::{
    collections::BTreeMap,
    io,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::{Notify, OwnedSemaphorePermit, Semaphore},
    time::{Instant, sleep_until, timeout},
};

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

/// `limit` of `/api/verdicts` when not given, and its bound.
pub const DEFAULT_VERDICT_LIMIT: usize = 100;
pub const MAX_VERDICT_LIMIT: usize = 10_000;

/// Serves until the future is dropped; returns only on an accept error that is not transient.
pub async fn serve(listener: TcpListener, api: Arc<dyn Api>, limits: HttpLimits) -> io::Result<()> {
    let gate = Arc::new(Gate::new(limits.max_connections.max(1)));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
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
            connection(stream, &guard, &evicted, api.as_ref(), limits).await;
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

/// Connection slots, and the connections still reading their head (evictable), oldest first.
struct Gate {
    slots: Arc<Semaphore>,
    reading: Mutex<Reading>,
}

#[derive(Default)]
struct Reading {
    next_id: u64,
    /// By id, which grows with acceptance: the first entry is the oldest.
    conns: BTreeMap<u64, ReadingConn>,
}

struct ReadingConn {
    since: Instant,
    /// The slot moves to the connection's task once its head is read, or to the newcomer
    /// that evicts it.
    permit: OwnedSemaphorePermit,
    evict: Arc<Notify>,
}

impl Gate {
    fn new(max: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max)),
            reading: Mutex::new(Reading::default()),
        }
    }

    /// A slot for a new connection (its id and eviction signal), or `None` to refuse it.
    async fn admit(&self, evict_after: Duration) -> Option<(u64, Arc<Notify>)> {
        let give_up = Instant::now() + 2 * evict_after;
        loop {
            if let Ok(permit) = self.slots.clone().try_acquire_owned() {
                return Some(self.register(permit));
            }
            let oldest = self.lock().conns.first_key_value().map(|(_, c)| c.since);
            let now = Instant::now();
            let wake = match oldest {
                Some(since) if now >= since + evict_after => {
                    if let Some(permit) = self.evict_oldest() {
                        return Some(self.register(permit));
                    }
                    continue;
                }
                Some(since) => (since + evict_after).min(give_up),
                None => give_up,
            };
            if now >= give_up {
                return None;
            }
            tokio::select! {
                p = self.slots.clone().acquire_owned() => {
                    return Some(self.register(p.expect("the semaphore is never closed")));
                }
                _ = sleep_until(wake) => {}
            }
        }
    }

    fn register(&self, permit: OwnedSemaphorePermit) -> (u64, Arc<Notify>) {
        let evict = Arc::new(Notify::new());
        let mut r = self.lock();
        let id = r.next_id;
        r.next_id += 1;
        r.conns.insert(
            id,
            ReadingConn {
                since: Instant::now(),
                permit,
                evict: evict.clone(),
            },
        );
        (id, evict)
    }

    /// Tells the oldest reading connection to go, and takes its slot.
    fn evict_oldest(&self) -> Option<OwnedSemaphorePermit> {
        let (_, c) = self.lock().conns.pop_first()?;
        log::debug!(
            "http: evicting a connection that has not sent its request in {:?}",
            c.since.elapsed()
        );
        c.evict.notify_one();
        Some(c.permit)
    }

    /// The connection's slot once its head is read; `None` if it was evicted meanwhile.
    fn finish_reading(&self, id: u64) -> Option<OwnedSemaphorePermit> {
        self.lock().conns.remove(&id).map(|c| c.permit)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Reading> {
        self.reading.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Frees a reading connection's slot however its task ends.
struct ReadingGuard<'a> {
    gate: &'a Gate,
    id: u64,
}

impl Drop for ReadingGuard<'_> {
    fn drop(&mut self) {
        self.gate.finish_reading(self.id);
    }
}

async fn connection(
    mut stream: TcpStream,
    guard: &ReadingGuard<'_>,
    evicted: &Notify,
    api: &dyn Api,
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
        Ok(Err(HeadError::Closed)) => return,
        Ok(Err(HeadError::Io(e))) => {
            log::debug!("http: reading a request: {e}");
            return;
        }
        Ok(Err(HeadError::Reject(status, why))) => {
            response(status, "text/plain", format!("{why}\n").as_bytes(), false)
        }
        Ok(Ok(req)) => handle(&req, api),
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

/// A parsed request head: what routing needs.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    method: String,
    target: String,
}

#[derive(Debug)]
enum HeadError {
    /// The client closed before sending anything.
    Closed,
    Io(io::Error),
    /// Answer with this status and reason, then close.
    Reject(Status, &'static str),
}

async fn read_head(stream: &mut TcpStream, limits: &HttpLimits) -> Result<Request, HeadError> {
    let mut buf = Vec::with_capacity(1024);
    const CHUNK: usize = 4096;
    let mut chunk = [0u8; CHUNK];
    loop {
        let room = limits.max_head_bytes.saturating_sub(buf.len());
        if room == 0 {
            return Err(too_large(&buf));
        }
        let n = stream
            .read(&mut chunk[..room.min(CHUNK)])
            .await
            .map_err(HeadError::Io)?;
        if n == 0 {
            return Err(if buf.is_empty() {
                HeadError::Closed
            } else {
                HeadError::Reject(Status::BadRequest, "incomplete request")
            });
        }
        buf.extend_from_slice(&chunk[..n]);
        // A head ends with a line feed: parse only when one arrived.
        if chunk[..n].contains(&b'\n')
            && let Some(req) = parse_head(&buf, limits.max_headers)?
        {
            return Ok(req);
        }
    }
}

/// `Some` when `buf` holds a complete head.
fn parse_head(buf: &[u8], max_headers: usize) -> Result<Option<Request>, HeadError> {
    let mut headers = vec![httparse::EMPTY_HEADER; max_headers];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(_)) => Ok(Some(Request {
            method: req.method.unwrap_or_default().to_string(),
            target: req.path.unwrap_or_default().to_string(),
        })),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::Reject(
            Status::HeadersTooLarge,
            "too many header fields",
        )),
        Err(httparse::Error::Version) => Err(HeadError::Reject(
            Status::BadRequest,
            "malformed request: HTTP/1.0 or HTTP/1.1 expected",
        )),
        Err(_) => Err(HeadError::Reject(Status::BadRequest, "malformed request")),
    }
}

/// Past the byte bound: 414 if even the request line did not fit, 431 otherwise.
fn too_large(buf: &[u8]) -> HeadError {
    if buf.contains(&b'\n') {
        HeadError::Reject(Status::HeadersTooLarge, "request header fields too large")
    } else {
        HeadError::Reject(Status::UriTooLong, "request line too long")
    }
}

fn handle(req: &Request, api: &dyn Api) -> Vec<u8> {
    let head = match req.method.as_str() {
        "GET" => false,
        "HEAD" => true,
        _ => {
            return response(
                Status::MethodNotAllowed,
                "text/plain",
                b"only GET and HEAD\n",
                false,
            );
        }
    };
    let (path, query) = req
        .target
        .split_once('?')
        .unwrap_or((req.target.as_str(), ""));
    let query = match parse_query(query) {
        Ok(q) => q,
        Err(why) => {
            return response(
                Status::BadRequest,
                "text/plain",
                format!("{why}\n").as_bytes(),
                head,
            );
        }
    };
    let param = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    const JSON: &str = "application/json";
    match path {
        "/metrics" => response(
            Status::Ok,
            "text/plain; version=0.0.4; charset=utf-8",
            api.metrics().as_bytes(),
            head,
        ),
        "/healthz" => response(Status::Ok, "text/plain", b"ok\n", head),
        "/readyz" if api.ready() => response(Status::Ok, "text/plain", b"ready\n", head),
        "/readyz" => response(Status::Unavailable, "text/plain", b"not ready\n", head),
        "/api/sockets" => {
            let body = api.sockets(param("path").filter(|p| !p.is_empty()));
            response(Status::Ok, JSON, &json_bytes(&body), head)
        }
        "/api/verdicts" => {
            let limit = match param("limit") {
                None => DEFAULT_VERDICT_LIMIT,
                Some(v) => match v.parse::<usize>() {
                    Ok(n) if (1..=MAX_VERDICT_LIMIT).contains(&n) => n,
                    _ => {
                        let why =
                            format!("limit: must be an integer from 1 to {MAX_VERDICT_LIMIT}\n");
                        return response(Status::BadRequest, "text/plain", why.as_bytes(), head);
                    }
                },
            };
            response(Status::Ok, JSON, &json_bytes(&api.verdicts(limit)), head)
        }
        "/" => response(
            Status::Ok,
            "text/plain",
            b"sockwatch: /metrics /healthz /readyz /api/sockets?path=PATH /api/verdicts?limit=N\n",
            head,
        ),
        _ => response(Status::NotFound, "text/plain", b"not found\n", head),
    }
}

fn json_bytes(v: &serde_json::Value) -> Vec<u8> {
    let mut body = serde_json::to_vec(v).unwrap_or_else(|_| b"null".to_vec());
    body.push(b'\n');
    body
}

/// `a=b&c=d` with `+` and `%XX` decoded; pairs without `=` have an empty value.
fn parse_query(q: &str) -> Result<Vec<(String, String)>, &'static str> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((percent_decode(k)?, percent_decode(v)?))
        })
        .collect()
}

fn percent_decode(s: &str) -> Result<String, &'static str> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or("malformed percent-encoding in the query")?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| "the query is not UTF-8")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Ok,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    Timeout,
    UriTooLong,
    HeadersTooLarge,
    Unavailable,
    Busy,
}

impl Status {
    fn line(self) -> &'static str {
        match self {
            Status::Ok => "200 OK",
            Status::BadRequest => "400 Bad Request",
            Status::NotFound => "404 Not Found",
            Status::MethodNotAllowed => "405 Method Not Allowed",
            Status::Timeout => "408 Request Timeout",
            Status::UriTooLong => "414 URI Too Long",
            Status::HeadersTooLarge => "431 Request Header Fields Too Large",
            Status::Unavailable | Status::Busy => "503 Service Unavailable",
        }
    }
}

/// A complete response; `head_only` (HEAD) leaves the body out but keeps its length.
fn response(status: Status, content_type: &str, body: &[u8], head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n",
        status.line(),
        body.len()
    );
    if status == Status::MethodNotAllowed {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    if status == Status::Busy {
        out.push_str("Retry-After: 1\r\n");
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;

    impl Api for Fixed {
        fn metrics(&self) -> String {
            "m 1\n".into()
        }
        fn ready(&self) -> bool {
            false
        }
        fn sockets(&self, path: Option<&str>) -> serde_json::Value {
            serde_json::json!({ "path": path })
        }
        fn verdicts(&self, limit: usize) -> serde_json::Value {
            serde_json::json!({ "limit": limit })
        }
    }

    fn get(target: &str) -> String {
        let req = Request {
            method: "GET".into(),
            target: target.into(),
        };
        String::from_utf8(handle(&req, &Fixed)).expect("utf-8")
    }

    #[test]
    fn routes() {
        assert!(get("/metrics").starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(get("/metrics").contains("version=0.0.4"));
        assert!(get("/metrics").ends_with("\r\n\r\nm 1\n"));
        assert!(get("/healthz").starts_with("HTTP/1.1 200 "));
        assert!(get("/readyz").starts_with("HTTP/1.1 503 "));
        assert!(get("/nope").starts_with("HTTP/1.1 404 "));
        assert!(get("/metrics/").starts_with("HTTP/1.1 404 "));
    }

    #[test]
    fn api_parameters() {
        assert!(
            get("/api/sockets?path=%2Frun%2Fmultus%2Fm.sock")
                .ends_with("{\"path\":\"/run/multus/m.sock\"}\n")
        );
        assert!(get("/api/sockets").ends_with("{\"path\":null}\n"));
        assert!(get("/api/sockets?path=").ends_with("{\"path\":null}\n"));
        assert!(get("/api/sockets?path=%zz").starts_with("HTTP/1.1 400 "));
        assert!(get("/api/verdicts").ends_with("{\"limit\":100}\n"));
        assert!(get("/api/verdicts?limit=5").ends_with("{\"limit\":5}\n"));
        for bad in ["0", "-1", "x", "10001"] {
            assert!(
                get(&format!("/api/verdicts?limit={bad}")).starts_with("HTTP/1.1 400 "),
                "{bad}"
            );
        }
    }

    #[test]
    fn head_has_no_body_and_other_methods_are_refused() {
        let req = Request {
            method: "HEAD".into(),
            target: "/healthz".into(),
        };
        let r = String::from_utf8(handle(&req, &Fixed)).expect("utf-8");
        assert!(
            r.starts_with("HTTP/1.1 200 ") && r.ends_with("\r\n\r\n"),
            "{r}"
        );
        assert!(r.contains("Content-Length: 3\r\n"), "{r}");
        for m in ["POST", "PUT", "DELETE", "OPTIONS", "get"] {
            let req = Request {
                method: m.into(),
                target: "/metrics".into(),
            };
            let r = String::from_utf8(handle(&req, &Fixed)).expect("utf-8");
            assert!(
                r.starts_with("HTTP/1.1 405 ") && r.contains("Allow: GET, HEAD"),
                "{m}: {r}"
            );
        }
    }

    #[test]
    fn head_parsing() {
        let ok = parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 4).expect("valid");
        assert_eq!(
            ok,
            Some(Request {
                method: "GET".into(),
                target: "/metrics".into()
            })
        );
        assert!(matches!(
            parse_head(b"GET /metrics HTTP/1.1\r\nHost:", 4),
            Ok(None)
        ));
        assert!(matches!(
            parse_head(b"GET / HTTP/1.1\r\na: 1\r\nb: 2\r\nc: 3\r\n\r\n", 2),
            Err(HeadError::Reject(Status::HeadersTooLarge, _))
        ));
        assert!(matches!(
            parse_head(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 4),
            Err(HeadError::Reject(Status::BadRequest, _))
        ));
        assert!(matches!(
            parse_head(b"GET / HTTP/2.0\r\n\r\n", 4),
            Err(HeadError::Reject(Status::BadRequest, _))
        ));
        assert!(matches!(
            too_large(b"GET /aaaa"),
            HeadError::Reject(Status::UriTooLong, _)
        ));
        assert!(matches!(
            too_large(b"GET / HTTP/1.1\r\nX: aaa"),
            HeadError::Reject(Status::HeadersTooLarge, _)
        ));
    }

    #[test]
    fn query_decoding() {
        assert_eq!(
            parse_query("a=1&b=x+y&c&&d=%41%42").expect("valid"),
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "x y".into()),
                ("c".into(), String::new()),
                ("d".into(), "AB".into())
            ]
        );
        assert!(parse_query("a=%4").is_err());
        assert!(parse_query("a=%ff").is_err());
    }
}
