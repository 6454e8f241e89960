//! What each route answers, and the response bytes.
use super::{
    DEFAULT_VERDICT_LIMIT, MAX_VERDICT_LIMIT, Served,
    request::{Request, parse_query},
    response::{Status, response},
};

/// Whether the answer reads the agent's state (behind locks the event path holds): `/metrics`
/// and `/api`. The rest, the probes among them, is answered from the request alone.
pub(super) fn reads_state(req: &Request) -> bool {
    let path = req
        .target
        .split_once('?')
        .map_or(req.target.as_str(), |(p, _)| p);
    path == "/metrics" || path.starts_with("/api/")
}

pub(super) fn handle(req: &Request, served: Served<'_>) -> Vec<u8> {
    let api = served.api;
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
        p if p.starts_with("/api/") && !served.api_open => response(
            Status::Forbidden,
            "text/plain",
            b"forbidden: /api answers loopback clients only (api_remote = true exposes it)\n",
            head,
        ),
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

pub(super) fn json_bytes(v: &serde_json::Value) -> Vec<u8> {
    let mut body = serde_json::to_vec(v).unwrap_or_else(|_| b"null".to_vec());
    body.push(b'\n');
    body
}
