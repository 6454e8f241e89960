//! The HTTP endpoint under abuse: oversized, malformed and slow requests, refused methods and
//! a crowd of scrapers. No root needed: the server runs on loopback with a canned API, on its
//! own current-thread runtime as in `sockwatch run`.
use std::{
    io::{Read as _, Write as _},
    net::{Shutdown, SocketAddr, TcpStream},
    sync::{
        Arc, Barrier,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use sockwatch::http::{Api, ApiAccess, HttpLimits, serve};

/// A /metrics body of realistic size (~40 KB).
fn body() -> String {
    (0..1000)
        .map(|i| format!("sockwatch_test_series{{n=\"{i:05}\"}} {i}\n"))
        .collect()
}

#[derive(Default)]
struct TestApi {
    ready: AtomicBool,
    scrapes: AtomicUsize,
    body: String,
}

impl Api for TestApi {
    fn metrics(&self) -> String {
        self.scrapes.fetch_add(1, Ordering::Relaxed);
        self.body.clone()
    }
    fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
    fn sockets(&self, path: Option<&str>) -> serde_json::Value {
        serde_json::json!({ "path": path })
    }
    fn verdicts(&self, limit: usize) -> serde_json::Value {
        serde_json::json!({ "limit": limit })
    }
}

/// The QEMU guests emulate the CPU (TCG): the timing bounds below would measure the emulator.
/// The server is userspace only, so the host layer covers it.
fn in_vm(test: &str) -> bool {
    let vm = std::env::var_os("SOCKWATCH_IN_VM").is_some();
    if vm {
        eprintln!("SKIP {test}: userspace HTTP server, timing-bound; runs on the host layer");
    }
    vm
}

/// A server on 127.0.0.1 with `limits`, serving until the test process ends.
fn start(limits: HttpLimits) -> (SocketAddr, Arc<TestApi>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    let api = Arc::new(TestApi {
        body: body(),
        ..TestApi::default()
    });
    let served = api.clone();
    thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
            serve(listener, served, limits, ApiAccess::Loopback)
                .await
                .expect("serve");
        });
    });
    (addr, api)
}

struct Response {
    status: u16,
    head: String,
    body: Vec<u8>,
}

/// Sends `raw`, reads the response to the end of the connection.
fn exchange(addr: SocketAddr, raw: &[u8]) -> Response {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    // The server may answer and close before taking everything (oversized requests).
    let _ = s.write_all(raw);
    read_response(&mut s)
}

fn read_response(s: &mut TcpStream) -> Response {
    let mut all = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => all.extend_from_slice(&buf[..n]),
            // A reset after the response was read (the server closes with unread input).
            Err(e) if !all.is_empty() && e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("reading the response: {e} (got {} bytes)", all.len()),
        }
    }
    let split = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(&all)));
    let head = String::from_utf8_lossy(&all[..split]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    Response {
        status,
        head,
        body: all[split + 4..].to_vec(),
    }
}

fn get(addr: SocketAddr, target: &str) -> Response {
    exchange(
        addr,
        format!("GET {target} HTTP/1.1\r\nHost: test\r\nUser-Agent: Prometheus/2.42.0\r\n\r\n")
            .as_bytes(),
    )
}

fn content_length(r: &Response) -> usize {
    r.head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("Content-Length")
}

#[test]
fn routes_over_the_wire() {
    if in_vm("routes_over_the_wire") {
        return;
    }
    let (addr, api) = start(HttpLimits::default());
    let r = get(addr, "/metrics");
    assert_eq!(r.status, 200);
    assert!(r.head.contains("text/plain; version=0.0.4"), "{}", r.head);
    assert!(r.head.contains("Connection: close"), "{}", r.head);
    assert_eq!(r.body, api.body.as_bytes());
    assert_eq!(content_length(&r), api.body.len());
    assert_eq!(get(addr, "/healthz").status, 200);
    assert_eq!(get(addr, "/readyz").status, 503);
    api.ready.store(true, Ordering::Relaxed);
    assert_eq!(get(addr, "/readyz").status, 200);
    assert_eq!(get(addr, "/nope").status, 404);
    let r = get(addr, "/api/sockets?path=%2Frun%2Fmultus%2Fmultus.sock");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"{\"path\":\"/run/multus/multus.sock\"}\n");
    assert_eq!(get(addr, "/api/verdicts?limit=3").body, b"{\"limit\":3}\n");
    assert_eq!(get(addr, "/api/verdicts?limit=many").status, 400);
    let r = exchange(addr, b"HEAD /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!((r.status, r.body.len()), (200, 0));
    assert_eq!(content_length(&r), api.body.len());
    // HTTP/1.0 clients are served too.
    assert_eq!(exchange(addr, b"GET /healthz HTTP/1.0\r\n\r\n").status, 200);
}

#[test]
fn oversized_request_line_is_refused_and_closed() {
    if in_vm("oversized_request_line_is_refused_and_closed") {
        return;
    }
    let (addr, _) = start(HttpLimits::default());
    let long = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(16 * 1024));
    let r = exchange(addr, long.as_bytes());
    assert_eq!(r.status, 414, "{}", r.head);
    assert!(r.head.contains("Connection: close"));
    // Still serving.
    assert_eq!(get(addr, "/metrics").status, 200);
}

#[test]
fn oversized_or_too_many_headers_are_refused() {
    if in_vm("oversized_or_too_many_headers_are_refused") {
        return;
    }
    let (addr, _) = start(HttpLimits::default());
    let big = format!(
        "GET /metrics HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n",
        "b".repeat(9000)
    );
    assert_eq!(exchange(addr, big.as_bytes()).status, 431);
    let many: String = (0..40).map(|i| format!("X-H{i}: v\r\n")).collect();
    let req = format!("GET /metrics HTTP/1.1\r\n{many}\r\n");
    assert_eq!(exchange(addr, req.as_bytes()).status, 431);
    // Just under both bounds is fine.
    let ok: String = (0..30).map(|i| format!("X-H{i}: v\r\n")).collect();
    let req = format!("GET /metrics HTTP/1.1\r\n{ok}\r\n");
    assert_eq!(exchange(addr, req.as_bytes()).status, 200);
}

#[test]
fn malformed_requests_get_400() {
    if in_vm("malformed_requests_get_400") {
        return;
    }
    let (addr, _) = start(HttpLimits::default());
    for raw in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET /metrics HTTP/9.9\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nNo colon here\r\n\r\n",
        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\n\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: t\r\n", // then EOF: incomplete
    ] {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.write_all(raw).expect("send");
        s.shutdown(Shutdown::Write).expect("half-close");
        let r = read_response(&mut s);
        assert_eq!(
            r.status,
            400,
            "{:?}: {}",
            String::from_utf8_lossy(raw),
            r.head
        );
    }
    assert_eq!(get(addr, "/metrics").status, 200);
}

#[test]
fn other_methods_get_405() {
    if in_vm("other_methods_get_405") {
        return;
    }
    let (addr, _) = start(HttpLimits::default());
    for m in [
        "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT",
    ] {
        let req =
            format!("{m} /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\nhello world");
        let r = exchange(addr, req.as_bytes());
        assert_eq!(r.status, 405, "{m}");
        assert!(r.head.contains("Allow: GET, HEAD"), "{m}: {}", r.head);
    }
}

#[test]
fn a_hundred_concurrent_scrapes_all_succeed() {
    if in_vm("a_hundred_concurrent_scrapes_all_succeed") {
        return;
    }
    let (addr, api) = start(HttpLimits::default());
    let n = 100;
    let barrier = Arc::new(Barrier::new(n));
    let started = Instant::now();
    let clients: Vec<_> = (0..n)
        .map(|_| {
            let barrier = barrier.clone();
            thread::spawn(move || {
                barrier.wait();
                get(addr, "/metrics")
            })
        })
        .collect();
    for c in clients {
        let r = c.join().expect("client");
        assert_eq!(r.status, 200, "{}", r.head);
        assert_eq!(r.body.len(), content_length(&r));
    }
    assert_eq!(api.scrapes.load(Ordering::Relaxed), n);
    eprintln!("{n} concurrent scrapes in {:?}", started.elapsed());
}

/// A slow client: sends a request one byte a second, reconnecting whenever it is dropped,
/// until `stop`. Returns how many connections the server dropped.
fn slow_client(addr: SocketAddr, stop: Arc<AtomicBool>) -> usize {
    let req = b"GET /metrics HTTP/1.1\r\nHost: slow\r\nX-Padding: aaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut dropped = 0;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect(addr) else {
            thread::sleep(Duration::from_millis(50));
            continue;
        };
        s.set_read_timeout(Some(Duration::from_millis(1)))
            .expect("timeout");
        for b in req {
            if stop.load(Ordering::Relaxed) {
                return dropped;
            }
            let mut probe = [0u8; 256];
            // The server closed (or answered 408): this connection is over.
            let closed = match s.read(&mut probe) {
                Ok(_) => true,
                Err(e) => !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
            };
            if closed || s.write_all(&[*b]).is_err() {
                dropped += 1;
                break;
            }
            thread::sleep(Duration::from_secs(1));
        }
    }
    dropped
}

#[test]
fn slow_clients_past_the_cap_never_block_a_scrape() {
    if in_vm("slow_clients_past_the_cap_never_block_a_scrape") {
        return;
    }
    let limits = HttpLimits::default();
    let (addr, _) = start(limits);
    let stop = Arc::new(AtomicBool::new(false));
    let n = limits.max_connections + 24;
    let slow: Vec<_> = (0..n)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || slow_client(addr, stop))
        })
        .collect();
    // Let them take every slot.
    thread::sleep(Duration::from_millis(300));
    let bound = limits.evict_after * 2 + Duration::from_millis(500);
    let mut worst = Duration::ZERO;
    let until = Instant::now() + Duration::from_secs(6);
    let mut scrapes = 0;
    while Instant::now() < until {
        let t = Instant::now();
        let r = get(addr, "/metrics");
        let took = t.elapsed();
        assert_eq!(r.status, 200, "{}", r.head);
        assert!(
            took < bound,
            "a scrape took {took:?} behind {n} slow clients"
        );
        worst = worst.max(took);
        scrapes += 1;
        thread::sleep(Duration::from_millis(250));
    }
    stop.store(true, Ordering::Relaxed);
    let dropped: usize = slow
        .into_iter()
        .map(|t| t.join().expect("slow client"))
        .sum();
    eprintln!(
        "{scrapes} scrapes behind {n} slow clients: worst {worst:?}; slow connections dropped: {dropped}"
    );
    assert!(
        dropped >= n - limits.max_connections,
        "slow clients were not evicted"
    );
}

#[test]
fn a_silent_client_is_dropped_after_the_read_timeout() {
    if in_vm("a_silent_client_is_dropped_after_the_read_timeout") {
        return;
    }
    let limits = HttpLimits::default();
    let (addr, _) = start(limits);
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(limits.read_timeout * 3))
        .expect("timeout");
    let t = Instant::now();
    let r = read_response(&mut s);
    let took = t.elapsed();
    assert_eq!(r.status, 408, "{}", r.head);
    assert!(
        took >= limits.read_timeout - Duration::from_millis(100)
            && took < limits.read_timeout + Duration::from_secs(2),
        "dropped after {took:?}, read timeout {:?}",
        limits.read_timeout
    );
    // Dripping bytes does not extend the deadline.
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(limits.read_timeout * 3))
        .expect("timeout");
    let t = Instant::now();
    let dripper = {
        let mut w = s.try_clone().expect("clone");
        thread::spawn(move || {
            for b in b"GET /metrics HTTP/1.1\r\nHost: drip\r\n" {
                if w.write_all(&[*b]).is_err() {
                    break;
                }
                thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let r = read_response(&mut s);
    assert_eq!(r.status, 408);
    assert!(t.elapsed() < limits.read_timeout + Duration::from_secs(2));
    dripper.join().expect("dripper");
}
