//! The protocol's rules, against a fake handler with two tools and one resource: what a
//! client gets for malformed JSON, an unknown method, a request before `initialize`, an
//! unknown tool, a failing tool, and a message over the cap, all through [`serve`] on byte
//! buffers; and, on a pipe the test writes as it goes, requests served at once, cancelled,
//! told their progress and bounded in number.

use std::io::{BufReader, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::*;

/// `echo` answers at once; `slow` runs until it is cancelled (or 10 s pass), telling its
/// progress each 10 ms, and counts how many run and how many saw their cancellation.
#[derive(Default)]
struct Fake {
    slow_running: AtomicUsize,
    slow_cancelled: AtomicUsize,
}

impl Handler for Fake {
    fn tools(&self) -> Vec<Tool> {
        vec![Tool {
            name: "echo",
            description: "echoes",
            input_schema: json!({ "type": "object" }),
            read_only: true,
        }]
    }
    fn call(&self, name: &str, arguments: &Map<String, Value>, request: &Request<'_>) -> Option<Outcome> {
        match name {
            "echo" if arguments.contains_key("fail") => Some(Outcome::Failed {
                said: String::new(),
                message: "cannot cancel task x".into(),
                exit_code: 77,
            }),
            "echo" => {
                let document = json!({ "got": arguments });
                Some(Outcome::Json { text: serde_json::to_string_pretty(&document).unwrap(), document })
            }
            "slow" => {
                self.slow_running.fetch_add(1, Ordering::SeqCst);
                let started = Instant::now();
                let mut step = 0.0;
                while !request.cancelled() && started.elapsed() < Duration::from_secs(10) {
                    request.progress(step, Some(1000.0), "slowly");
                    step += 1.0;
                    std::thread::sleep(Duration::from_millis(10));
                }
                if request.cancelled() {
                    self.slow_cancelled.fetch_add(1, Ordering::SeqCst);
                }
                self.slow_running.fetch_sub(1, Ordering::SeqCst);
                Some(Outcome::Text("done".into()))
            }
            _ => None,
        }
    }
    fn resources(&self) -> Vec<Resource> {
        vec![
            Resource { uri: "fake://one", name: "one", description: "d", mime_type: "text/plain" },
            Resource { uri: "fake://{id}", name: "many", description: "d", mime_type: "text/plain" },
        ]
    }
    fn read(&self, uri: &str, _request: &Request<'_>) -> Result<(&'static str, String), ReadError> {
        match uri {
            "fake://one" => Ok(("text/plain", "1".into())),
            _ => Err(ReadError::NotFound(format!("no resource {uri}"))),
        }
    }
}

/// Every answer `serve` writes for these input lines, parsed, in the order written.
fn answers(lines: &[&str]) -> Vec<Value> {
    let input = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    let mut output = Vec::new();
    serve(&mut input.as_bytes(), &mut output, &Fake::default()).unwrap();
    let text = String::from_utf8(output).unwrap();
    text.lines().map(|l| serde_json::from_str(l).expect("each answer is one JSON line")).collect()
}

/// The answer to request `id` among `got`.
fn by_id(got: &[Value], id: Value) -> Value {
    got.iter().find(|a| a["id"] == id).unwrap_or_else(|| panic!("no answer to {id}: {got:#?}")).clone()
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

#[test]
fn malformed_json_is_a_parse_error_and_the_session_goes_on() {
    let got = answers(&["{not json", r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#]);
    assert_eq!(got[0]["id"], Value::Null);
    assert_eq!(got[0]["error"]["code"], -32700);
    assert!(got[0]["error"]["message"].as_str().unwrap().starts_with("not JSON: "), "{}", got[0]);
    assert_eq!(got[1], json!({ "jsonrpc": "2.0", "id": 7, "result": {} }));
}

#[test]
fn an_unknown_method_is_method_not_found() {
    let got = answers(&[INIT, r#"{"jsonrpc":"2.0","id":"a","method":"tools/destroy"}"#]);
    assert_eq!(got[1]["id"], "a");
    assert_eq!(got[1]["error"]["code"], -32601);
    assert_eq!(
        got[1]["error"]["message"],
        "unknown method \"tools/destroy\"; this server has tools and resources"
    );
}

#[test]
fn requests_before_initialize_are_refused_and_initialize_negotiates_the_version() {
    let got = answers(&[
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        INIT,
        r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}"#,
    ]);
    assert_eq!(got[0]["error"]["code"], -32600);
    assert_eq!(got[0]["error"]["message"], "tools/list before initialize; send initialize first");
    assert_eq!(got[1]["result"]["protocolVersion"], "2025-06-18", "a version it speaks is agreed");
    assert_eq!(got[1]["result"]["serverInfo"]["name"], "carma");
    assert_eq!(got[2]["result"]["protocolVersion"], PROTOCOL_VERSIONS[0], "else its newest is offered");
}

#[test]
fn notifications_and_responses_get_no_answer_and_bad_messages_get_invalid_request() {
    let got = answers(&[
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
        r#"[{"jsonrpc":"2.0","id":4,"method":"ping"}]"#,
        r#"{"jsonrpc":"1.0","id":5,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":6,"method":"ping","params":[1]}"#,
    ]);
    let codes: Vec<(Value, Value)> =
        got.iter().map(|a| (a["id"].clone(), a["error"]["code"].clone())).collect();
    assert_eq!(
        codes,
        [
            (Value::Null, json!(-32600)),
            (json!(5), json!(-32600)),
            (Value::Null, json!(-32600)),
            (json!(6), json!(-32602)),
        ]
    );
    assert_eq!(got[0]["error"]["message"], "a message must be one JSON object (batches are not supported)");
}

#[test]
fn tools_list_and_call_give_results_unknown_tools_an_error_and_failures_is_error() {
    let got = answers(&[
        INIT,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"a":1}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"rm"}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"fail":true}}}"#,
    ]);
    let listed = by_id(&got, json!(1));
    assert_eq!(listed["result"]["tools"][0]["name"], "echo");
    assert_eq!(listed["result"]["tools"][0]["inputSchema"], json!({ "type": "object" }));
    let echoed = by_id(&got, json!(2));
    assert_eq!(echoed["result"]["isError"], false);
    assert_eq!(echoed["result"]["structuredContent"], json!({ "got": { "a": 1 } }));
    let text: Value = serde_json::from_str(echoed["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, echoed["result"]["structuredContent"], "the text is the same document");
    let unknown = by_id(&got, json!(3));
    assert_eq!(unknown["error"]["code"], -32602);
    assert_eq!(unknown["error"]["message"], "unknown tool \"rm\"; tools/list lists them");
    let failed = by_id(&got, json!(4));
    assert_eq!(failed["result"]["isError"], true);
    assert_eq!(failed["result"]["content"][0]["text"], "error: cannot cancel task x");
    assert_eq!(
        failed["result"]["structuredContent"],
        json!({ "error": "cannot cancel task x", "exit_code": 77 })
    );
}

#[test]
fn resources_list_templates_and_read() {
    let got = answers(&[
        INIT,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/list"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"resources/templates/list"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"fake://one"}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"fake://none"}}"#,
    ]);
    assert_eq!(by_id(&got, json!(1))["result"]["resources"].as_array().unwrap().len(), 1);
    assert_eq!(by_id(&got, json!(2))["result"]["resourceTemplates"][0]["uriTemplate"], "fake://{id}");
    assert_eq!(by_id(&got, json!(3))["result"]["contents"][0]["text"], "1");
    let missing = by_id(&got, json!(4));
    assert_eq!(missing["error"]["code"], -32002);
    assert_eq!(missing["error"]["message"], "no resource fake://none");
}

#[test]
fn an_oversized_message_is_refused_and_the_next_one_answered() {
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(MESSAGE_BYTES_MAX)
    );
    let got = answers(&[&big, r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#]);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0]["id"], Value::Null);
    assert_eq!(got[0]["error"]["code"], -32600);
    assert_eq!(got[0]["error"]["message"], "message over 1048576 bytes refused; send smaller messages");
    assert_eq!(got[1]["result"], json!({}));
}

/// A pipe into `serve`: lines the test sends as it goes, answers it reads as they come.
struct Pipe {
    send: Option<Sender<Vec<u8>>>,
    answers: Receiver<Value>,
    served: Option<std::thread::JoinHandle<()>>,
    fake: Arc<Fake>,
}

/// The reading end: bytes from the channel until it closes.
struct ChannelReader(Receiver<Vec<u8>>, Vec<u8>);

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.1.is_empty() {
            match self.0.recv() {
                Ok(bytes) => self.1 = bytes,
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.1.len());
        buf[..n].copy_from_slice(&self.1[..n]);
        self.1.drain(..n);
        Ok(n)
    }
}

/// The writing end: each whole line parsed and passed on.
struct LineWriter(Mutex<(Vec<u8>, Sender<Value>)>);

impl Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut inner = self.0.lock().unwrap();
        inner.0.extend_from_slice(buf);
        while let Some(at) = inner.0.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = inner.0.drain(..=at).collect();
            let _ = inner.1.send(serde_json::from_slice(&line).expect("one JSON message a line"));
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Pipe {
    fn start() -> Pipe {
        let (send, lines) = channel();
        let (to_test, answers) = channel();
        let fake = Arc::new(Fake::default());
        let handler = Arc::clone(&fake);
        let served = std::thread::spawn(move || {
            let mut input = BufReader::new(ChannelReader(lines, Vec::new()));
            let mut output = LineWriter(Mutex::new((Vec::new(), to_test)));
            serve(&mut input, &mut output, &*handler).unwrap();
        });
        let pipe = Pipe { send: Some(send), answers, served: Some(served), fake };
        pipe.line(INIT);
        assert_eq!(pipe.next()["id"], 0);
        pipe
    }

    fn line(&self, line: &str) {
        self.send.as_ref().unwrap().send(format!("{line}\n").into_bytes()).unwrap();
    }

    fn next(&self) -> Value {
        self.answers.recv_timeout(Duration::from_secs(5)).expect("an answer within 5 s")
    }

    /// Waits until `n` slow calls run.
    fn until_slow_running(&self, n: usize) {
        let started = Instant::now();
        while self.fake.slow_running.load(Ordering::SeqCst) != n {
            assert!(started.elapsed() < Duration::from_secs(5), "{n} slow calls never ran");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Closes the input and waits for `serve` to end; what it wrote after.
    fn close(mut self) -> Vec<Value> {
        drop(self.send.take());
        self.served.take().unwrap().join().unwrap();
        self.answers.try_iter().collect()
    }
}

fn cancel(id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{id},"reason":"test"}}}}"#
    )
}

fn slow(id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"slow"}}}}"#)
}

/// Goal (issue 41): a long request holds nothing else up, and `notifications/cancelled` stops
/// it without an answer. Method: a slow call, then a ping and an echo answered while it runs;
/// then its cancellation: the handler sees it, no answer ever comes for it, the session goes
/// on.
#[test]
fn a_long_request_holds_nothing_up_and_a_cancelled_one_stops_unanswered() {
    let pipe = Pipe::start();
    pipe.line(&slow(1));
    pipe.until_slow_running(1);
    pipe.line(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#);
    assert_eq!(pipe.next(), json!({ "jsonrpc": "2.0", "id": 2, "result": {} }), "ping while a tool runs");
    pipe.line(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#);
    assert_eq!(pipe.next()["id"], 3, "another tool while one runs");
    pipe.line(
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"user"}}"#,
    );
    pipe.until_slow_running(0);
    assert_eq!(pipe.fake.slow_cancelled.load(Ordering::SeqCst), 1, "the tool saw its cancellation");
    pipe.line(r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#);
    assert_eq!(pipe.next()["id"], 4, "no answer for the cancelled request came before");
    assert_eq!(pipe.close(), Vec::<Value>::new(), "nor after");
}

/// Goal: a request with a progressToken gets growing `notifications/progress` while it runs,
/// one without gets none. Method: two slow calls, cancelled after three notes.
#[test]
fn progress_is_told_to_a_request_that_asks() {
    let pipe = Pipe::start();
    pipe.line(&slow(1));
    pipe.line(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","_meta":{"progressToken":"p-2"}}}"#);
    pipe.until_slow_running(2);
    let told: Vec<Value> = (0..3).map(|_| pipe.next()).collect();
    for note in &told {
        assert_eq!(note["method"], "notifications/progress", "{note}");
        assert_eq!(note["params"]["progressToken"], "p-2");
        assert_eq!(note["params"]["total"], 1000.0);
        assert_eq!(note["params"]["message"], "slowly");
    }
    let steps: Vec<f64> = told.iter().map(|n| n["params"]["progress"].as_f64().unwrap()).collect();
    assert!(steps.windows(2).all(|w| w[1] > w[0]), "progress grows: {steps:?}");
    for id in [1, 2] {
        pipe.line(&cancel(id));
    }
    pipe.until_slow_running(0);
    let after = pipe.close();
    assert!(after.iter().all(|a| a["method"] == "notifications/progress"), "no answer after: {after:#?}");
}

/// Goal: a client that writes its requests and closes its end still gets every answer, a
/// tool's included. Method: the requests and the end of input at once.
#[test]
fn the_inputs_end_waits_for_the_answers_still_running() {
    let call =
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"b":2}}}"#;
    let got = answers(&[INIT, call]);
    assert_eq!(by_id(&got, json!(1))["result"]["structuredContent"], json!({ "got": { "b": 2 } }));
}

/// Goal: a session runs at most IN_FLIGHT_MAX requests; one more is refused at once with the
/// bound, and so is an id already in flight. Method: slow calls up to the bound and past it.
#[test]
fn requests_in_flight_are_bounded_and_ids_are_not_reused() {
    let pipe = Pipe::start();
    for id in 1..=IN_FLIGHT_MAX as u64 {
        pipe.line(&slow(id));
    }
    pipe.until_slow_running(IN_FLIGHT_MAX);
    pipe.line(&slow(1));
    let reused = pipe.next();
    assert_eq!((reused["id"].clone(), reused["error"]["code"].clone()), (json!(1), json!(-32600)));
    assert_eq!(reused["error"]["message"], "request id 1 is already in flight; give each request its own id");
    pipe.line(&slow(99));
    let refused = pipe.next();
    assert_eq!((refused["id"].clone(), refused["error"]["code"].clone()), (json!(99), json!(BUSY)));
    assert_eq!(
        refused["error"]["message"],
        "8 requests are in flight, the most one session runs; send this again once one has answered"
    );
    pipe.line(r#"{"jsonrpc":"2.0","id":100,"method":"ping"}"#);
    assert_eq!(pipe.next()["id"], 100, "the session still answers");
    for id in 1..=IN_FLIGHT_MAX as u64 {
        pipe.line(&cancel(id));
    }
    pipe.until_slow_running(0);
    pipe.close();
}
