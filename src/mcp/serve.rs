//! The session loop: messages read one a line on one thread, tool calls and resource reads
//! run on threads of their own, answers written whole, one a line, in the order they are
//! ready.
//!
//! Why threads: `wait` blocks for up to minutes, and MCP clients send requests while one is
//! outstanding (a `ping`, another tool, a cancellation); one answer at a time would hold all
//! of them behind it. Plain `std` threads, as the dashboard's workers, rather than an async
//! runtime: a session serves one user's agent, so a handful is all it ever needs.
//!
//! The bounds, per session (one user's agent): at most [`IN_FLIGHT_MAX`] requests run at once;
//! one more is refused at once (`-32000`, with the bound), never queued, so what a client
//! sends can never pile up threads or memory. A request id already in flight is refused
//! (JSON-RPC ids name one request). What a tool touches that other users share (the spool)
//! keeps its own per-user bounds whatever the number of sessions.
//!
//! `notifications/cancelled` sets the request's flag: a running `wait` sees it at its next
//! poll and returns, and the answer of a cancelled request is never written, as the
//! specification asks. When the input ends, the requests still running finish and are
//! answered (a script that writes its requests and closes its end gets every answer, as
//! before), then the session ends; a client that leaves for good is ended by the SDKs' own
//! shutdown (SIGTERM after a grace), and a failed write cancels them all.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde_json::{Value, json};

use super::rpc::{Incoming, Session};
use super::{BUSY, Handler, INVALID_REQUEST, MESSAGE_BYTES_MAX, frame, rpc, write_message};

/// The most requests one session runs at once.
pub const IN_FLIGHT_MAX: usize = 8;

/// What a handler knows of the request it serves: whether the client cancelled it, and how
/// to tell the client how far it got.
pub struct Request<'a> {
    cancelled: &'a AtomicBool,
    progress_token: Option<Value>,
    notify: &'a (dyn Fn(&Value) + Sync),
    /// The last progress sent (an `f64`'s bits): the specification wants it to grow.
    progress_sent: AtomicU64,
}

impl Request<'_> {
    /// True once the client sent `notifications/cancelled` for this request, or its input
    /// ended: stop, nobody will read the answer.
    pub fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Sends `notifications/progress` when the request carried a `progressToken` and
    /// `progress` is past the last one sent; otherwise nothing.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: &str) {
        let Some(token) = &self.progress_token else { return };
        let last = f64::from_bits(self.progress_sent.load(Ordering::SeqCst));
        if progress.is_nan() || progress <= last || self.cancelled() {
            return;
        }
        self.progress_sent.store(progress.to_bits(), Ordering::SeqCst);
        let mut params = json!({ "progressToken": token, "progress": progress, "message": message });
        if let Some(total) = total {
            params["total"] = json!(total);
        }
        (self.notify)(&json!({ "jsonrpc": "2.0", "method": "notifications/progress", "params": params }));
    }
}

/// The requests in flight, by their id's JSON text (so `5` and `"5"` stay two ids), each
/// with its cancellation flag.
#[derive(Default)]
struct Flights(Mutex<BTreeMap<String, std::sync::Arc<AtomicBool>>>);

impl Flights {
    /// Takes a place for `id`, or says why not.
    fn enter(&self, id: &Value) -> Result<std::sync::Arc<AtomicBool>, (i64, String)> {
        let mut flights = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if flights.contains_key(&id.to_string()) {
            return Err((
                INVALID_REQUEST,
                format!("request id {id} is already in flight; give each request its own id"),
            ));
        }
        if flights.len() >= IN_FLIGHT_MAX {
            return Err((
                BUSY,
                format!(
                    "{IN_FLIGHT_MAX} requests are in flight, the most one session runs; send this again once one has answered"
                ),
            ));
        }
        let flag = std::sync::Arc::new(AtomicBool::new(false));
        flights.insert(id.to_string(), std::sync::Arc::clone(&flag));
        Ok(flag)
    }

    fn leave(&self, id: &Value) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&id.to_string());
    }

    fn cancel(&self, id: &Value) {
        if let Some(flag) =
            self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&id.to_string())
        {
            flag.store(true, Ordering::SeqCst);
        }
    }

    fn cancel_all(&self) {
        for flag in self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).values() {
            flag.store(true, Ordering::SeqCst);
        }
    }
}

/// Serves one client until its input ends: each line a message; answers and notifications
/// go to `output`, one whole message a line.
pub fn serve(
    input: &mut impl BufRead,
    output: &mut (impl Write + Send),
    handler: &impl Handler,
) -> std::io::Result<()> {
    let output = Mutex::new(output);
    let write = |message: &Value| -> std::io::Result<()> {
        let mut output = output.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        write_message(&mut **output, message)
    };
    let flights = Flights::default();
    // A write that fails has lost the client: nobody reads what still runs, so stop it.
    let notify = |message: &Value| {
        if write(message).is_err() {
            flights.cancel_all();
        }
    };
    std::thread::scope(|scope| {
        let mut session = Session::default();
        let ended = loop {
            let incoming = match frame::read_message(input, MESSAGE_BYTES_MAX) {
                Err(e) => break Err(e),
                Ok(frame::Frame::End) => break Ok(()),
                Ok(frame::Frame::Oversized) => Incoming::Answer(rpc::error(
                    Value::Null,
                    INVALID_REQUEST,
                    &format!("message over {MESSAGE_BYTES_MAX} bytes refused; send smaller messages"),
                )),
                Ok(frame::Frame::Message(bytes)) if bytes.iter().all(u8::is_ascii_whitespace) => {
                    Incoming::Nothing
                }
                Ok(frame::Frame::Message(bytes)) => session.receive(&bytes),
            };
            let answer = match incoming {
                Incoming::Nothing => None,
                Incoming::Answer(answer) => Some(answer),
                Incoming::Cancel(id) => {
                    flights.cancel(&id);
                    None
                }
                Incoming::Request { id, method, params } if session.runs_apart(&method) => {
                    match flights.enter(&id) {
                        Err((code, why)) => Some(rpc::error(id, code, &why)),
                        Ok(cancelled) => {
                            let structured = session.structured();
                            let (flights, notify) = (&flights, &notify);
                            let spawned =
                                std::thread::Builder::new().name("carma-mcp".into()).spawn_scoped(scope, {
                                    let id = id.clone();
                                    move || {
                                        let request = Request {
                                            cancelled: &cancelled,
                                            progress_token: rpc::progress_token(&params),
                                            notify,
                                            progress_sent: AtomicU64::new(f64::NEG_INFINITY.to_bits()),
                                        };
                                        let answer = rpc::answer_apart(
                                            structured,
                                            id.clone(),
                                            &method,
                                            &params,
                                            handler,
                                            &request,
                                        );
                                        flights.leave(&id);
                                        if !request.cancelled() {
                                            notify(&answer);
                                        }
                                    }
                                });
                            spawned.err().map(|e| {
                                flights.leave(&id);
                                rpc::error(
                                    id,
                                    BUSY,
                                    &format!(
                                        "cannot start a thread for this request ({e}); send it again later"
                                    ),
                                )
                            })
                        }
                    }
                }
                Incoming::Request { id, method, params } => {
                    Some(session.answer_now(id, &method, &params, handler))
                }
            };
            if let Some(answer) = answer
                && let Err(e) = write(&answer)
            {
                break Err(e);
            }
        };
        if ended.is_err() {
            // Output or input broke: nobody reads what still runs, so stop it.
            flights.cancel_all();
        }
        // The scope joins what still runs, whose answers go out as they are ready.
        ended
    })
}
