//! Reading and parsing a request head, and its query string.
use std::io;

use tokio::{io::AsyncReadExt as _, net::TcpStream};

use super::{HttpLimits, response::Status};

/// A parsed request head: what routing needs.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Request {
    pub(super) method: String,
    pub(super) target: String,
}

#[derive(Debug)]
pub(super) enum HeadError {
    /// The client closed before sending anything.
    Closed,
    Io(io::Error),
    /// Answer with this status and reason, then close.
    Reject(Status, &'static str),
}

pub(super) async fn read_head(
    stream: &mut TcpStream,
    limits: &HttpLimits,
) -> Result<Request, HeadError> {
    let mut buf = Vec::with_capacity(512);
    // Small: a connection's buffers are its memory, and a head rarely exceeds this.
    const CHUNK: usize = 1024;
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
pub(super) fn parse_head(buf: &[u8], max_headers: usize) -> Result<Option<Request>, HeadError> {
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
pub(super) fn too_large(buf: &[u8]) -> HeadError {
    if buf.contains(&b'\n') {
        HeadError::Reject(Status::HeadersTooLarge, "request header fields too large")
    } else {
        HeadError::Reject(Status::UriTooLong, "request line too long")
    }
}

/// `a=b&c=d` with `+` and `%XX` decoded; pairs without `=` have an empty value.
pub(super) fn parse_query(q: &str) -> Result<Vec<(String, String)>, &'static str> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((percent_decode(k)?, percent_decode(v)?))
        })
        .collect()
}

pub(super) fn percent_decode(s: &str) -> Result<String, &'static str> {
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
