//! One message in, at most one answer out: JSON-RPC 2.0's rules and MCP's methods
//! (`initialize`, `ping`, `tools/list`, `tools/call`, `resources/list`,
//! `resources/templates/list`, `resources/read`). Pure but for the handler's calls.

use serde_json::{Map, Value, json};

use super::{
    Handler, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, Outcome, PARSE_ERROR, PROTOCOL_VERSIONS,
    READ_FAILED, RESOURCE_NOT_FOUND, ReadError, text_content,
};

/// What one client has negotiated.
#[derive(Debug, Default)]
pub struct Session {
    /// The protocol revision agreed in `initialize`; `None` before it.
    version: Option<&'static str>,
}

/// A JSON-RPC error: its code and one line.
struct RpcError {
    code: i64,
    message: String,
    data: Option<Value>,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError { code, message: message.into(), data: None }
    }
}

/// An error answer to the request `id` (`null` when it could not be read).
pub(super) fn error(id: Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

impl Session {
    /// The answer to one message (a line's bytes); `None` for a notification or a response.
    pub fn handle(&mut self, bytes: &[u8], handler: &mut impl Handler) -> Option<Value> {
        let message: Value = match serde_json::from_slice(bytes) {
            Ok(message) => message,
            Err(e) => return Some(error(Value::Null, PARSE_ERROR, &format!("not JSON: {e}"))),
        };
        let Value::Object(object) = message else {
            let why = "a message must be one JSON object (batches are not supported)";
            return Some(error(Value::Null, INVALID_REQUEST, why));
        };
        let id = object.get("id").cloned();
        if let Some(id) = &id
            && !(id.is_string() || id.is_number())
        {
            return Some(error(Value::Null, INVALID_REQUEST, "id must be a string or a number"));
        }
        let reply_to = id.clone().unwrap_or(Value::Null);
        if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Some(error(reply_to, INVALID_REQUEST, "jsonrpc must be \"2.0\""));
        }
        let Some(method) = object.get("method").and_then(Value::as_str) else {
            // A response to a request of ours: this server sends none, so there is nothing to do.
            if id.is_some() && (object.contains_key("result") || object.contains_key("error")) {
                return None;
            }
            return Some(error(reply_to, INVALID_REQUEST, "a request needs a method"));
        };
        // A notification (`notifications/initialized`, `notifications/cancelled`) is never answered.
        let id = id?;
        let params = match object.get("params") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(params)) => params.clone(),
            Some(_) => return Some(error(id, INVALID_PARAMS, "params must be an object")),
        };
        Some(match self.request(method, &params, handler) {
            Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
            Err(e) => {
                let mut answer = error(id, e.code, &e.message);
                if let Some(data) = e.data {
                    answer["error"]["data"] = data;
                }
                answer
            }
        })
    }

    fn request(
        &mut self,
        method: &str,
        params: &Map<String, Value>,
        handler: &mut impl Handler,
    ) -> Result<Value, RpcError> {
        match method {
            "initialize" => return Ok(self.initialize(params)),
            "ping" => return Ok(json!({})),
            _ => {}
        }
        if self.version.is_none() {
            return Err(RpcError::new(
                INVALID_REQUEST,
                format!("{method} before initialize; send initialize first"),
            ));
        }
        match method {
            "tools/list" => Ok(json!({ "tools": handler.tools().iter().map(tool_json).collect::<Vec<_>>() })),
            "tools/call" => self.call(params, handler),
            "resources/list" => Ok(json!({ "resources": resources(handler, false) })),
            "resources/templates/list" => Ok(json!({ "resourceTemplates": resources(handler, true) })),
            "resources/read" => read(params, handler),
            _ => Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!("unknown method {method:?}; this server has tools and resources"),
            )),
        }
    }

    /// Agrees on the client's revision when this server speaks it, else offers its newest.
    fn initialize(&mut self, params: &Map<String, Value>) -> Value {
        let asked = params.get("protocolVersion").and_then(Value::as_str);
        let version =
            PROTOCOL_VERSIONS.iter().find(|v| Some(**v) == asked).copied().unwrap_or(PROTOCOL_VERSIONS[0]);
        self.version = Some(version);
        json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": { "listChanged": false },
                "resources": { "subscribe": false, "listChanged": false },
            },
            "serverInfo": { "name": "carma", "version": env!("CARGO_PKG_VERSION") },
            "instructions": INSTRUCTIONS,
        })
    }

    fn call(&self, params: &Map<String, Value>, handler: &mut impl Handler) -> Result<Value, RpcError> {
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return Err(RpcError::new(INVALID_PARAMS, "tools/call needs the tool's name"));
        };
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(arguments)) => arguments.clone(),
            Some(_) => return Err(RpcError::new(INVALID_PARAMS, "arguments must be an object")),
        };
        let Some(outcome) = handler.call(name, &arguments) else {
            return Err(RpcError::new(
                INVALID_PARAMS,
                format!("unknown tool {name:?}; tools/list lists them"),
            ));
        };
        // structuredContent arrived in 2025-06-18; older clients get the text alone.
        let structured = self.version.is_some_and(|v| v >= "2025-06-18");
        Ok(match outcome {
            Outcome::Json { text, document } => {
                let mut result = json!({ "content": text_content(text), "isError": false });
                if structured && document.is_object() {
                    result["structuredContent"] = document;
                }
                result
            }
            Outcome::Text(text) => json!({ "content": text_content(text), "isError": false }),
            Outcome::Failed { said, message, exit_code } => {
                let text = format!("{said}error: {message}");
                let mut result = json!({ "content": text_content(text), "isError": true });
                if structured {
                    result["structuredContent"] = json!({ "error": message, "exit_code": exit_code });
                }
                result
            }
        })
    }
}

/// What the server tells the client's model about itself, once.
const INSTRUCTIONS: &str = "carma is this machine's GPU job queue. Every tool runs as the user \
who started this server, with that user's rights, exactly as the `carma` command would: submit \
queues a task, queue/show/gpus/report read, logs returns a bounded tail of a task's output, \
cancel/hold/release act on the user's own tasks, wait blocks for a bounded time. Environment \
values are never shown.";

fn tool_json(tool: &super::Tool) -> Value {
    json!({
        "name": tool.name,
        "description": tool.description,
        "inputSchema": tool.input_schema,
        "annotations": { "readOnlyHint": tool.read_only, "openWorldHint": false },
    })
}

/// The fixed resources (`templates == false`) or the templates (a `{` in the URI).
fn resources(handler: &impl Handler, templates: bool) -> Vec<Value> {
    let key = if templates { "uriTemplate" } else { "uri" };
    handler
        .resources()
        .iter()
        .filter(|r| r.uri.contains('{') == templates)
        .map(|r| json!({ key: r.uri, "name": r.name, "description": r.description, "mimeType": r.mime_type }))
        .collect()
}

fn read(params: &Map<String, Value>, handler: &mut impl Handler) -> Result<Value, RpcError> {
    let Some(uri) = params.get("uri").and_then(Value::as_str) else {
        return Err(RpcError::new(INVALID_PARAMS, "resources/read needs a uri"));
    };
    match handler.read(uri) {
        Ok((mime_type, text)) => {
            Ok(json!({ "contents": [{ "uri": uri, "mimeType": mime_type, "text": text }] }))
        }
        Err(ReadError::NotFound(why)) => {
            Err(RpcError { code: RESOURCE_NOT_FOUND, message: why, data: Some(json!({ "uri": uri })) })
        }
        Err(ReadError::Failed { message, exit_code }) => Err(RpcError {
            code: READ_FAILED,
            message,
            data: Some(json!({ "uri": uri, "exit_code": exit_code })),
        }),
    }
}
