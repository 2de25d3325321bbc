//! The little of HTTP/1.1 the dashboard speaks: one request per connection, read with a cap on
//! its bytes and a deadline ([`read_head`], [`parse_head`]), one answer written with a
//! deadline and `Connection: close` ([`write_response`]). A GET or HEAD has no body, so none
//! is read; what a client pipelined after its first request is never answered.

use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::limits::REQUEST_HEAD_BYTES_MAX;

/// A request's line and the one header the dashboard reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `HEAD`, or whatever else the client sent (answered 405).
    pub method: String,
    /// The request target as sent, e.g. `/task/abc?x`.
    pub target: String,
    /// The `Host` header's value, if any.
    pub host: Option<String>,
}

/// An answer: status, headers, body (left out for HEAD).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Headers besides `Content-Length` and `Connection`, which [`write_response`] adds.
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Vec<u8>,
}

/// What became of reading a request's head.
#[derive(Debug)]
pub enum Head {
    /// The bytes up to and including the blank line.
    Complete(Vec<u8>),
    /// The client closed or failed before a whole head: nothing to answer.
    Gone,
    /// The deadline passed first (answered 408).
    TimedOut,
    /// [`REQUEST_HEAD_BYTES_MAX`] bytes came without the blank line (answered 431).
    TooLarge,
}

impl Response {
    /// A plain-text answer with the headers every answer carries.
    pub fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            headers: vec![
                ("Content-Type", "text/plain; charset=utf-8".into()),
                ("Cache-Control", "no-store".into()),
                ("X-Content-Type-Options", "nosniff".into()),
                ("Referrer-Policy", "no-referrer".into()),
            ],
            body: body.as_bytes().to_vec(),
        }
    }

    /// Sets header `name` (replacing an earlier value).
    pub fn with_header(mut self, name: &'static str, value: &str) -> Response {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name, value.to_owned()));
        self
    }

    /// Changes the status.
    pub fn with_status(mut self, status: u16) -> Response {
        self.status = status;
        self
    }

    /// The status line, headers and blank line.
    pub fn head_bytes(&self) -> Vec<u8> {
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, reason_phrase(self.status));
        for (name, value) in &self.headers {
            let _ = write!(head, "{name}: {value}\r\n");
        }
        let _ = write!(head, "Content-Length: {}\r\nConnection: close\r\n\r\n", self.body.len());
        head.into_bytes()
    }
}

/// Reads a request's head from `stream` until the blank line, at most
/// [`REQUEST_HEAD_BYTES_MAX`] bytes, until `deadline`. Bytes after the blank line (a pipelined
/// request) are left unread or dropped.
pub fn read_head(stream: &mut TcpStream, deadline: Instant) -> Head {
    let mut buf = vec![0u8; REQUEST_HEAD_BYTES_MAX];
    let mut len = 0;
    loop {
        if let Some(end) = head_end(&buf[..len]) {
            buf.truncate(end);
            return Head::Complete(buf);
        }
        if len == buf.len() {
            return Head::TooLarge;
        }
        let Some(left) = remaining(deadline) else { return Head::TimedOut };
        if stream.set_read_timeout(Some(left)).is_err() {
            return Head::Gone;
        }
        match stream.read(&mut buf[len..]) {
            Ok(0) => return Head::Gone,
            Ok(n) => len += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Head::TimedOut;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Head::Gone,
        }
    }
}

/// Parses a head read by [`read_head`]; `None` when it is not `METHOD /TARGET HTTP/1.x` in
/// UTF-8 (answered 400).
pub fn parse_head(head: &[u8]) -> Option<Request> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let mut words = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return None;
    };
    if method.is_empty() || !target.starts_with('/') || !version.starts_with("HTTP/1.") {
        return None;
    }
    let host = lines
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("host"))
        .map(|(_, value)| value.trim().to_owned());
    Some(Request { method: method.to_owned(), target: target.to_owned(), host })
}

/// Writes `response` (its head only when `head_only`) until `deadline`; a client that does not
/// read in time is left. Returns whether all of it was written.
pub fn write_response(
    stream: &mut TcpStream,
    response: &Response,
    head_only: bool,
    deadline: Instant,
) -> bool {
    let body: &[u8] = if head_only { &[] } else { &response.body };
    write_until(stream, &response.head_bytes(), deadline) && write_until(stream, body, deadline)
}

/// After an answer: says no more will come, then reads (and drops) what the client still sends
/// for up to `linger`, so closing does not reset the connection before the client read its
/// answer.
pub fn close_gently(stream: &mut TcpStream, linger: Duration) {
    const LINGER_BYTES_MAX: usize = 64 * 1024;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let deadline = Instant::now() + linger;
    let mut buf = [0u8; 4096];
    let mut read = 0;
    while read < LINGER_BYTES_MAX {
        let Some(left) = remaining(deadline) else { return };
        if stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => read += n,
        }
    }
}

fn write_until(stream: &mut TcpStream, mut bytes: &[u8], deadline: Instant) -> bool {
    const CHUNK: usize = 64 * 1024;
    while !bytes.is_empty() {
        let Some(left) = remaining(deadline) else { return false };
        if stream.set_write_timeout(Some(left)).is_err() {
            return false;
        }
        match stream.write(&bytes[..bytes.len().min(CHUNK)]) {
            Ok(0) => return false,
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

/// Time left until `deadline`; `None` once it passed.
fn remaining(deadline: Instant) -> Option<Duration> {
    deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
}

/// Where the head ends: after `\r\n\r\n` (or a bare `\n\n`).
fn head_end(bytes: &[u8]) -> Option<usize> {
    let crlf = bytes.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = bytes.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        421 => "Misdirected Request",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_parsed_for_its_method_target_and_host() {
        let head = b"GET /task/abc?x=1 HTTP/1.1\r\nUser-Agent: t\r\nhost:  127.0.0.1:8350 \r\n\r\n";
        assert_eq!(head_end(head), Some(head.len()));
        let request = parse_head(head).unwrap();
        assert_eq!(request.method, "GET");
        assert_eq!(request.target, "/task/abc?x=1");
        assert_eq!(request.host.as_deref(), Some("127.0.0.1:8350"));
        assert_eq!(parse_head(b"GET / HTTP/1.0\n\n").unwrap().host, None);
    }

    #[test]
    fn a_malformed_head_is_refused() {
        for head in [
            &b"GET /\r\n\r\n"[..],
            b"GET / HTTP/1.1 x\r\n\r\n",
            b"GET x HTTP/1.1\r\n\r\n",
            b"\xff / HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(parse_head(head), None, "{head:?}");
        }
    }

    #[test]
    fn an_answer_closes_its_connection_and_states_its_length() {
        let response = Response::text(404, "no\n").with_header("content-type", "text/html");
        let head = String::from_utf8(response.head_bytes()).unwrap();
        assert!(head.starts_with("HTTP/1.1 404 Not Found\r\n"), "{head}");
        assert!(head.contains("\r\ncontent-type: text/html\r\n"), "{head}");
        assert!(!head.contains("text/plain"), "a header set twice is replaced: {head}");
        assert!(head.ends_with("Content-Length: 3\r\nConnection: close\r\n\r\n"), "{head}");
    }
}
