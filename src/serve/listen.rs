//! The accept loop and the workers: who gets a worker, who waits, who is refused.
//!
//! One thread accepts. Each connection is counted against the caps ([`Peers::admit`]) by its
//! peer ([`Peer::of`]: on the loopback, the local user who owns the client's socket); one
//! within them waits in a queue for one of [`WORKERS`] threads, one past them goes to a
//! single refusing thread that writes the 503 and closes (and is simply closed when that
//! thread is behind). A worker reads one request with a deadline, asks the site for the
//! answer, writes it with a deadline and closes: no client holds a worker longer than
//! [`REQUEST_HEAD_TIMEOUT`] plus [`RESPONSE_WRITE_TIMEOUT`], whatever it sends or leaves unread.

use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::{Receiver, TrySendError, sync_channel};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::http::{self, Head, Request, Response};
use super::limits::{
    CONNECTIONS_MAX, Peers, REQUEST_HEAD_TIMEOUT, RESPONSE_WRITE_TIMEOUT, RETRY_AFTER_S, Refusal, Ticket,
    WORKERS,
};
use super::peer::Peer;

/// Refused connections waiting for their 503; past this they are closed without one.
const REFUSALS_QUEUED_MAX: usize = 64;
/// Time for a refusal's 503 to leave.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a worker reads what a client still sends after its answer, before closing.
const LINGER: Duration = Duration::from_millis(500);
/// The same for a refusal, which one thread writes for everyone refused.
const REFUSAL_LINGER: Duration = Duration::from_millis(100);

/// Answers connections on `listener` with `answer` until the process is stopped.
pub fn serve(listener: &TcpListener, answer: &(dyn Fn(&Request) -> Response + Sync)) {
    let peers = Peers::default();
    let (admitted, waiting) = sync_channel::<(TcpStream, Ticket)>(CONNECTIONS_MAX);
    let waiting = Mutex::new(waiting);
    let (refused, refusals) = sync_channel::<(TcpStream, Refusal)>(REFUSALS_QUEUED_MAX);
    std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| work(&waiting, answer));
        }
        scope.spawn(move || {
            for (mut stream, refusal) in refusals {
                refuse(&mut stream, &refusal);
            }
        });
        for stream in listener.incoming() {
            let stream = match stream {
                Ok(stream) => stream,
                // Out of descriptors, or a connection reset before it was accepted: go on,
                // without spinning.
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            let Some(peer) = Peer::of(&stream) else { continue };
            match peers.admit(peer) {
                Ok(ticket) => match admitted.try_send((stream, ticket)) {
                    Ok(()) => {}
                    Err(TrySendError::Full((stream, _)) | TrySendError::Disconnected((stream, _))) => {
                        let _ = refused.try_send((stream, Refusal::Total));
                    }
                },
                // A full refusal queue drops (closes) the connection.
                Err(refusal) => {
                    let _ = refused.try_send((stream, refusal));
                }
            }
        }
    });
}

/// A worker: takes the next admitted connection, answers it, closes it.
fn work(waiting: &Mutex<Receiver<(TcpStream, Ticket)>>, answer: &(dyn Fn(&Request) -> Response + Sync)) {
    loop {
        let next = waiting.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok((mut stream, ticket)) = next else { return };
        answer_one(&mut stream, answer);
        drop(stream);
        drop(ticket);
    }
}

fn answer_one(stream: &mut TcpStream, answer: &(dyn Fn(&Request) -> Response + Sync)) {
    let started = Instant::now();
    let _ = stream.set_nodelay(true);
    let (response, head_only) = match http::read_head(stream, started + REQUEST_HEAD_TIMEOUT) {
        Head::Complete(head) => match http::parse_head(&head) {
            Some(request) => (answer(&request), request.method == "HEAD"),
            None => (Response::text(400, "carma serve: a request line is METHOD /PATH HTTP/1.1\n"), false),
        },
        Head::Gone => return,
        Head::TimedOut => (
            Response::text(
                408,
                &format!("carma serve: no whole request within {}s\n", REQUEST_HEAD_TIMEOUT.as_secs()),
            ),
            false,
        ),
        Head::TooLarge => (
            Response::text(
                431,
                &format!(
                    "carma serve: the request's line and headers are over {} KiB\n",
                    super::limits::REQUEST_HEAD_BYTES_MAX / 1024
                ),
            ),
            false,
        ),
    };
    if http::write_response(stream, &response, head_only, Instant::now() + RESPONSE_WRITE_TIMEOUT) {
        http::close_gently(stream, LINGER);
    }
}

/// Writes a refusal's 503 and closes.
fn refuse(stream: &mut TcpStream, refusal: &Refusal) {
    let response =
        Response::text(503, &refusal.message()).with_header("Retry-After", &RETRY_AFTER_S.to_string());
    if http::write_response(stream, &response, false, Instant::now() + REFUSAL_WRITE_TIMEOUT) {
        http::close_gently(stream, REFUSAL_LINGER);
    }
}
