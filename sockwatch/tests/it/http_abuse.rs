//! The HTTP endpoint under abuse: oversized, malformed and slow requests, refused methods and
//! a crowd of scrapers. No root needed: the server runs on loopback with a canned API, on its
//! own current-thread runtime as in `sockwatch run`. The last test attacks the real agent (root).
use crate::common;

use std::{
    io::{Read as _, Write as _},
    net::{Shutdown, SocketAddr, TcpStream},
    sync::{
        Arc, Barrier, Condvar, Mutex,
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
    /// While true, `/metrics` waits (as behind a lock the event path holds).
    held: Mutex<bool>,
    released: Condvar,
}

impl TestApi {
    fn hold(&self, held: bool) {
        *self.held.lock().expect("held") = held;
        self.released.notify_all();
    }
}

impl Api for TestApi {
    fn metrics(&self) -> String {
        self.scrapes.fetch_add(1, Ordering::Relaxed);
        let held = self.held.lock().expect("held");
        drop(self.released.wait_while(held, |held| *held).expect("held"));
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
        common::skip(
            test,
            "userspace HTTP server, timing-bound; runs on the host layer",
        );
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

#[test]
fn probes_are_answered_while_every_slot_waits_on_the_agents_state() {
    if in_vm("probes_are_answered_while_every_slot_waits_on_the_agents_state") {
        return;
    }
    let limits = HttpLimits {
        max_connections: 2,
        reserve: 1,
        ..HttpLimits::default()
    };
    let (addr, api) = start(limits);
    api.hold(true);
    let scrapes: Vec<_> = (0..limits.max_connections)
        .map(|_| thread::spawn(move || get(addr, "/metrics")))
        .collect();
    let until = Instant::now() + Duration::from_secs(5);
    while api.scrapes.load(Ordering::Relaxed) < limits.max_connections {
        assert!(Instant::now() < until, "the scrapes never started");
        thread::sleep(Duration::from_millis(10));
    }
    // Every general slot is answering: a probe gets the reserve, and its answer at once.
    let t = Instant::now();
    assert_eq!(get(addr, "/healthz").status, 200);
    assert_eq!(get(addr, "/readyz").status, 503);
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let r = get(addr, "/metrics");
    assert_eq!(r.status, 503, "a reserve slot serves probes only");
    assert_eq!(r.body, b"busy: only /healthz and /readyz are answered\n");
    assert_eq!(api.scrapes.load(Ordering::Relaxed), limits.max_connections);
    api.hold(false);
    for s in scrapes {
        assert_eq!(s.join().expect("scrape").status, 200);
    }
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
    // A small cap, so a few threads exceed it.
    let limits = HttpLimits {
        max_connections: 64,
        ..HttpLimits::default()
    };
    let (addr, _) = start(limits);
    let stop = Arc::new(AtomicBool::new(false));
    let n = limits.max_connections + limits.reserve + 24;
    let slow: Vec<_> = (0..n)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || slow_client(addr, stop))
        })
        .collect();
    // Let them take every slot.
    thread::sleep(Duration::from_millis(300));
    // Admission never waits: the scrape takes the slot of the oldest slow client.
    let bound = Duration::from_millis(500);
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
        dropped >= n - limits.max_connections - limits.reserve,
        "slow clients were not evicted"
    );
}

#[test]
fn a_silent_client_is_dropped_after_the_header_timeout() {
    if in_vm("a_silent_client_is_dropped_after_the_header_timeout") {
        return;
    }
    let limits = HttpLimits::default();
    let (addr, _) = start(limits);
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(limits.header_timeout * 3))
        .expect("timeout");
    let t = Instant::now();
    let r = read_response(&mut s);
    let took = t.elapsed();
    assert_eq!(r.status, 408, "{}", r.head);
    assert!(
        took >= limits.header_timeout - Duration::from_millis(100)
            && took < limits.header_timeout + Duration::from_secs(2),
        "dropped after {took:?}, read timeout {:?}",
        limits.header_timeout
    );
    // Dripping bytes does not extend the deadline.
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(limits.header_timeout * 3))
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
    assert!(t.elapsed() < limits.header_timeout + Duration::from_secs(2));
    dripper.join().expect("dripper");
}

/// Slow-loris connections: each sends one more byte of a head that never ends, every `TICK`.
const SLOW_CLIENTS: usize = 300;
/// Complete requests a second whose connections the client never closes.
const HELD_OPEN_PER_SEC: usize = 300;
const ATTACK: Duration = Duration::from_secs(10);
const TICK: Duration = Duration::from_millis(300);
/// The agent's memory may grow by at most this under the attack (7 to 13 MiB measured): its
/// connection slots are bounded (512 + 16, each a few KiB of buffers) and so is its render pool.
const RSS_GROWTH_BOUND_KB: u64 = 32 * 1024;
/// Connections past the general slots, in [`overflow`].
const OVERFLOW: usize = 88;

/// One slow-loris connection: the head it has sent so far, one byte a tick.
struct Loris {
    stream: TcpStream,
    sent: usize,
}

impl Loris {
    const HEAD: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: slow\r\n";

    fn open(addr: SocketAddr) -> Option<Loris> {
        let stream = TcpStream::connect(addr).ok()?;
        stream.set_nonblocking(true).ok()?;
        Some(Loris { stream, sent: 0 })
    }

    /// Sends the next byte (header lines without end once the request line is out); `false`
    /// once the server answered or closed.
    fn drip(&mut self) -> bool {
        let mut probe = [0u8; 512];
        match self.stream.read(&mut probe) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            _ => return false,
        }
        let filler = b"X-Slow: a\r\n";
        let byte = Self::HEAD
            .get(self.sent)
            .copied()
            .unwrap_or_else(|| filler[(self.sent - Self::HEAD.len()) % filler.len()]);
        self.sent += 1;
        self.stream.write(&[byte]).is_ok()
    }
}

/// Keeps `SLOW_CLIENTS` slow-loris connections open until `stop`, reopening each one the
/// server drops.
fn slowloris(addr: SocketAddr, stop: &AtomicBool) {
    let mut conns: Vec<Option<Loris>> = (0..SLOW_CLIENTS).map(|_| Loris::open(addr)).collect();
    while !stop.load(Ordering::Relaxed) {
        for c in &mut conns {
            if !c.as_mut().is_some_and(Loris::drip) {
                *c = Loris::open(addr);
            }
        }
        thread::sleep(TICK);
    }
}

/// `HELD_OPEN_PER_SEC` complete keep-alive requests a second until `stop`, each connection
/// held open, its response never read; returns how many were sent.
fn held_open(addr: SocketAddr, stop: &AtomicBool) -> usize {
    let req = b"GET /metrics HTTP/1.1\r\nHost: held\r\nConnection: keep-alive\r\n\r\n";
    let mut held = Vec::new();
    let every = Duration::from_secs(1) / HELD_OPEN_PER_SEC as u32;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if let Ok(mut s) = TcpStream::connect(addr)
            && s.write_all(req).is_ok()
        {
            held.push(s);
        }
        next += every;
        thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    held.len()
}

/// `GET target` on a fresh connection with a kubelet's 5 s timeout: status and time taken.
fn timed_get(addr: SocketAddr, target: &str) -> (u16, Duration) {
    let t = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(s, "GET {target} HTTP/1.1\r\nHost: probe\r\n\r\n").expect("send");
    let r = read_response(&mut s);
    (r.status, t.elapsed())
}

/// Samples `target` every `every` until `stop`; every answer must be a 200.
fn sample(addr: SocketAddr, target: &str, every: Duration, stop: &AtomicBool) -> Vec<Duration> {
    let mut took = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let (status, t) = timed_get(addr, target);
        assert_eq!(status, 200, "{target} under attack");
        took.push(t);
        thread::sleep(every);
    }
    took.sort();
    took
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

fn vm_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// `sockwatch_http_connections_dropped_total{reason="…"}` in a scrape.
fn dropped(metrics: &str, reason: &str) -> u64 {
    let series = format!("sockwatch_http_connections_dropped_total{{reason=\"{reason}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in the scrape"))
}

/// `n` connections that send nothing, each given a slot (or refused) as it is accepted.
fn silent(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect()
}

/// What a connection has from the agent now: `None` while it is open and silent, else the
/// bytes read before the close.
fn answer_so_far(s: &mut TcpStream) -> Option<Vec<u8>> {
    s.set_nonblocking(true).expect("nonblocking");
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && got.is_empty() => None,
        _ => Some(got),
    }
}

/// Past every slot: `max_connections` silent connections fill the general slots, and each of
/// `OVERFLOW` more pushes out the oldest, closed without a word, and no younger one. Returns
/// how much `evicted_reading` grew.
fn overflow(addr: SocketAddr) -> u64 {
    let limits = HttpLimits::default();
    let before = common::agent::Agent::metrics(addr);
    let mut conns = silent(addr, limits.max_connections + OVERFLOW);
    // Until the agent has accepted them all (well within the head deadline).
    thread::sleep(Duration::from_millis(500));
    let answers: Vec<_> = conns.iter_mut().map(answer_so_far).collect();
    let closed: Vec<usize> = (0..answers.len())
        .filter(|&i| answers[i].is_some())
        .collect();
    assert_eq!(
        closed,
        (0..OVERFLOW).collect::<Vec<_>>(),
        "exactly the {OVERFLOW} oldest are closed"
    );
    assert!(
        answers.iter().flatten().all(Vec::is_empty),
        "closed without a word"
    );
    drop(conns);
    // Until the agent sees them closed: a scrape would take the slot of one of them.
    thread::sleep(Duration::from_millis(300));
    let after = common::agent::Agent::metrics(addr);
    dropped(&after, "evicted_reading") - dropped(&before, "evicted_reading")
}

fn join<T>(h: thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().expect("client thread")
}

#[test]
fn the_agent_stays_up_under_slow_loris_and_held_open_requests() {
    let test = "the_agent_stays_up_under_slow_loris_and_held_open_requests";
    if in_vm(test) || !common::root(test) {
        return;
    }
    let dir = common::tempdir();
    let watch = dir.path().join("watched");
    std::fs::create_dir(&watch).expect("watched dir");
    let addr = common::free_addr();
    let agent = common::agent::Agent::start(dir.path(), &watch, &["--listen", &addr.to_string()]);
    let rss_before = vm_rss_kb(agent.pid());
    let stop = AtomicBool::new(false);
    let (health, scrapes, held) = thread::scope(|s| {
        s.spawn(|| slowloris(addr, &stop));
        let held = s.spawn(|| held_open(addr, &stop));
        // Let the slow clients take their slots first.
        thread::sleep(Duration::from_millis(500));
        let health = s.spawn(|| sample(addr, "/healthz", Duration::from_millis(200), &stop));
        let scrapes = s.spawn(|| sample(addr, "/metrics", Duration::from_millis(100), &stop));
        thread::sleep(ATTACK);
        stop.store(true, Ordering::Relaxed);
        (join(health), join(scrapes), join(held))
    });
    let rss_after = vm_rss_kb(agent.pid());
    // Until the attackers' connections are gone: closed by them, or by the agent's idle
    // deadline (an idle connection would give way before the overflow's oldest).
    thread::sleep(HttpLimits::default().idle_timeout + Duration::from_millis(500));
    let evicted_reading = overflow(addr);
    let metrics = common::agent::Agent::metrics(addr);
    let count = |reason| dropped(&metrics, reason);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "SOCKWATCH-HTTP-ABUSE {SLOW_CLIENTS} slow-loris clients + {held} held-open requests \
         ({HELD_OPEN_PER_SEC}/s) for {ATTACK:?}: /healthz x{} p50 {:.1} ms p99 {:.1} ms max \
         {:.1} ms; /metrics x{} p50 {:.1} ms p99 {:.1} ms max {:.1} ms; VmRSS {rss_before} kB \
         -> {rss_after} kB; dropped: refused {} evicted_idle {} evicted_reading {} \
         header_timeout {} response_timeout {} idle_timeout {}",
        health.len(),
        ms(percentile(&health, 50)),
        ms(percentile(&health, 99)),
        ms(health[health.len() - 1]),
        scrapes.len(),
        ms(percentile(&scrapes, 50)),
        ms(percentile(&scrapes, 99)),
        ms(scrapes[scrapes.len() - 1]),
        count("refused"),
        count("evicted_idle"),
        count("evicted_reading"),
        count("header_timeout"),
        count("response_timeout"),
        count("idle_timeout"),
    );
    let second = Duration::from_secs(1);
    assert!(health.len() >= 40, "only {} health samples", health.len());
    assert!(health[health.len() - 1] < second, "/healthz: {health:?}");
    assert!(percentile(&scrapes, 99) < second, "/metrics: {scrapes:?}");
    assert!(
        rss_after <= rss_before + RSS_GROWTH_BOUND_KB,
        "VmRSS grew from {rss_before} kB to {rss_after} kB"
    );
    assert!(held >= HELD_OPEN_PER_SEC * 9, "only {held} requests sent");
    // The slow clients run into their head deadline, the held-open ones into the idle
    // deadline or give their slot to newcomers.
    assert!(count("header_timeout") > 0, "{metrics}");
    assert!(
        count("evicted_idle") + count("idle_timeout") > 0,
        "{metrics}"
    );
    assert_eq!(count("response_timeout"), 0, "{metrics}");
    assert_eq!(evicted_reading, OVERFLOW as u64);
    assert_eq!(count("refused"), 0, "no connection was being answered");
}
