use super::{request::*, response::*, routes::*, *};

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

/// A client on loopback: `/api` is open to it.
const LOCAL: Served<'static> = Served {
    api: &Fixed,
    api_open: true,
};

fn get(target: &str) -> String {
    get_as(target, LOCAL)
}

fn get_as(target: &str, served: Served<'_>) -> String {
    let req = Request {
        method: "GET".into(),
        target: target.into(),
    };
    String::from_utf8(handle(&req, served)).expect("utf-8")
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
fn only_metrics_and_the_api_read_the_agents_state() {
    let reads = |target: &str| {
        reads_state(&Request {
            method: "GET".into(),
            target: target.into(),
        })
    };
    for t in [
        "/metrics",
        "/metrics?x=1",
        "/api/sockets?path=/a",
        "/api/verdicts",
    ] {
        assert!(reads(t), "{t}");
    }
    for t in [
        "/healthz",
        "/readyz?verbose",
        "/",
        "/nope",
        "/api",
        "/metricsx",
    ] {
        assert!(!reads(t), "{t}");
    }
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
    let r = String::from_utf8(handle(&req, LOCAL)).expect("utf-8");
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
        let r = String::from_utf8(handle(&req, LOCAL)).expect("utf-8");
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

#[test]
fn respond_answers_what_a_connection_would() {
    let limits = HttpLimits::default();
    let text =
        |buf: &[u8]| respond(buf, &limits, LOCAL).map(|r| String::from_utf8_lossy(&r).into_owned());
    assert!(text(b"GET /healthz HTTP/1.1\r\n\r\n").is_some_and(|r| r.starts_with("HTTP/1.1 200")));
    assert_eq!(text(b""), None, "a client that sent nothing gets nothing");
    assert!(text(b"GET /healthz HTTP/1.1\r\n").is_some_and(|r| r.starts_with("HTTP/1.1 400")));
    let long_line = vec![b'a'; limits.max_head_bytes + 1];
    assert!(text(&long_line).is_some_and(|r| r.starts_with("HTTP/1.1 414")));
}

#[test]
fn api_access_admits_loopback_by_default() {
    let peer = |s: &str| s.parse::<IpAddr>().expect("address");
    for local in ["127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"] {
        assert!(ApiAccess::Loopback.admits(peer(local)), "{local}");
    }
    for remote in ["192.0.2.1", "::ffff:192.0.2.1", "2001:db8::1", "0.0.0.0"] {
        assert!(!ApiAccess::Loopback.admits(peer(remote)), "{remote}");
        assert!(ApiAccess::Everyone.admits(peer(remote)), "{remote}");
    }
    assert_eq!(ApiAccess::default(), ApiAccess::Loopback);
}

#[test]
fn a_client_beyond_loopback_gets_metrics_and_health_but_no_api() {
    let remote = Served {
        api: &Fixed,
        api_open: false,
    };
    for route in ["/api/sockets?path=/run/x", "/api/verdicts", "/api/"] {
        let r = get_as(route, remote);
        assert!(r.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{route}: {r}");
        assert!(r.ends_with("loopback clients only (api_remote = true exposes it)\n"));
    }
    for route in ["/metrics", "/healthz", "/readyz", "/", "/nope"] {
        assert_eq!(get_as(route, remote), get(route), "{route}");
    }
    let head = Request {
        method: "HEAD".into(),
        target: "/api/verdicts".into(),
    };
    let r = String::from_utf8(handle(&head, remote)).expect("utf-8");
    assert!(
        r.starts_with("HTTP/1.1 403 ") && r.ends_with("\r\n\r\n"),
        "{r}"
    );
}

mod admission {
    use tokio::time::Instant;

    use super::super::{
        Dropped,
        gate::{Gate, Phase, Pool},
    };

    /// Two general slots, one in reserve.
    fn gate() -> Gate {
        Gate::new(2, 1)
    }

    #[test]
    fn idle_connections_give_way_first_then_the_oldest_reader() {
        let gate = gate();
        let now = Instant::now();
        let older = gate.admit(now).expect("a free slot");
        let answered = gate.admit(now).expect("a free slot");
        assert!(gate.enter(answered.id, Phase::Idle));
        let a = gate.admit(now).expect("the idle slot");
        assert_eq!(
            (a.pool, a.displaced),
            (Pool::Main, Some(Dropped::EvictedIdle))
        );
        assert!(!gate.enter(answered.id, Phase::Answering), "evicted");
        let b = gate.admit(now).expect("the oldest reader's slot");
        assert_eq!(
            (b.pool, b.displaced),
            (Pool::Main, Some(Dropped::EvictedReading))
        );
        assert!(!gate.enter(older.id, Phase::Answering), "the oldest went");
        assert!(gate.enter(a.id, Phase::Answering), "the younger stays");
    }

    #[test]
    fn the_reserve_opens_when_every_connection_is_answered_then_refusal() {
        let gate = gate();
        let now = Instant::now();
        for _ in 0..2 {
            let t = gate.admit(now).expect("a free slot");
            assert!(gate.enter(t.id, Phase::Answering));
        }
        let r = gate.admit(now).expect("the reserve");
        assert_eq!((r.pool, r.displaced), (Pool::Reserve, None));
        let next = gate.admit(now).expect("the reserve reader's slot");
        assert_eq!(
            (next.pool, next.displaced),
            (Pool::Reserve, Some(Dropped::EvictedReading))
        );
        assert!(gate.enter(next.id, Phase::Answering));
        assert!(gate.admit(now).is_none(), "every slot answering");
        gate.release(next.id);
        let freed = gate.admit(now).expect("the freed reserve slot");
        assert_eq!((freed.pool, freed.displaced), (Pool::Reserve, None));
    }
}
