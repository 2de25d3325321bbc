//! The protocol's rules, against a fake handler with one tool and one resource: what a client
//! gets for malformed JSON, an unknown method, a request before `initialize`, an unknown tool,
//! a failing tool, and a message over the cap, all through [`serve`] on byte buffers.

use serde_json::{Map, Value, json};

use super::*;

struct Fake;

impl Handler for Fake {
    fn tools(&self) -> Vec<Tool> {
        vec![Tool {
            name: "echo",
            description: "echoes",
            input_schema: json!({ "type": "object" }),
            read_only: true,
        }]
    }
    fn call(&mut self, name: &str, arguments: &Map<String, Value>) -> Option<Outcome> {
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
            _ => None,
        }
    }
    fn resources(&self) -> Vec<Resource> {
        vec![
            Resource { uri: "fake://one", name: "one", description: "d", mime_type: "text/plain" },
            Resource { uri: "fake://{id}", name: "many", description: "d", mime_type: "text/plain" },
        ]
    }
    fn read(&mut self, uri: &str) -> Result<(&'static str, String), ReadError> {
        match uri {
            "fake://one" => Ok(("text/plain", "1".into())),
            _ => Err(ReadError::NotFound(format!("no resource {uri}"))),
        }
    }
}

/// Every answer `serve` writes for these input lines, parsed.
fn answers(lines: &[&str]) -> Vec<Value> {
    let input = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    let mut output = Vec::new();
    serve(&mut input.as_bytes(), &mut output, &mut Fake).unwrap();
    let text = String::from_utf8(output).unwrap();
    text.lines().map(|l| serde_json::from_str(l).expect("each answer is one JSON line")).collect()
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
    assert_eq!(got[1]["result"]["tools"][0]["name"], "echo");
    assert_eq!(got[1]["result"]["tools"][0]["inputSchema"], json!({ "type": "object" }));
    assert_eq!(got[2]["result"]["isError"], false);
    assert_eq!(got[2]["result"]["structuredContent"], json!({ "got": { "a": 1 } }));
    let text: Value = serde_json::from_str(got[2]["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, got[2]["result"]["structuredContent"], "the text is the same document");
    assert_eq!(got[3]["error"]["code"], -32602);
    assert_eq!(got[3]["error"]["message"], "unknown tool \"rm\"; tools/list lists them");
    assert_eq!(got[4]["result"]["isError"], true);
    assert_eq!(got[4]["result"]["content"][0]["text"], "error: cannot cancel task x");
    assert_eq!(
        got[4]["result"]["structuredContent"],
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
    assert_eq!(got[1]["result"]["resources"].as_array().unwrap().len(), 1);
    assert_eq!(got[2]["result"]["resourceTemplates"][0]["uriTemplate"], "fake://{id}");
    assert_eq!(got[3]["result"]["contents"][0]["text"], "1");
    assert_eq!(got[4]["error"]["code"], -32002);
    assert_eq!(got[4]["error"]["message"], "no resource fake://none");
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
