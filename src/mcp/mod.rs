//! The Model Context Protocol over stdio, the door `carma mcp` opens for a user's agent:
//! JSON-RPC 2.0 messages, one per line. Tool calls and resource reads run on threads of their
//! own, at most [`IN_FLIGHT_MAX`] at once, so a `wait` of minutes never holds the session;
//! `notifications/cancelled` stops the request it names (its answer is never sent) and a
//! request that carries a `progressToken` gets `notifications/progress` while it runs
//! ([`serve`]).
//!
//! This room knows the protocol and nothing of carma's verbs: the [`Handler`] (in
//! `commands::mcp`) lists the tools and resources and runs them. It owns what a client can
//! get wrong: a line that is not JSON (`-32700`), a message that is not a request
//! (`-32600`), an unknown method (`-32601`), bad parameters or an unknown tool (`-32602`),
//! a request before `initialize` (`-32600`), an unknown resource (`-32002`), and a message
//! over [`MESSAGE_BYTES_MAX`], which is refused (`-32600`) and skipped to its newline, never
//! buffered. A tool that fails answers a result with `isError: true`, as the specification
//! asks, so the model reads the reason and can correct itself.
//!
//! Why not the official Rust SDK (`rmcp`): it is built on tokio (with `futures`,
//! `tokio-util`, `tracing`, and `schemars` for its tool macros), and carma is synchronous
//! `std` code with no async runtime (its HTTP dashboard was rewritten on `std` to drop a
//! dependency). Stdio MCP is a line protocol of a handful of methods; serde_json, already a
//! dependency, is all it needs.

use std::io::Write;

use serde_json::{Value, json};

mod frame;
mod rpc;
mod serve;
#[cfg(test)]
mod tests;

/// The longest message read, in bytes (1 MiB): a longer line is refused and skipped.
pub const MESSAGE_BYTES_MAX: usize = 1 << 20;

/// The protocol revisions this server speaks through `initialize`, newest first. A client
/// asking for another gets the newest, and may disconnect.
pub const PROTOCOL_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// JSON-RPC: the line is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: the message is not a valid request (or came before `initialize`, or too long).
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC: no such method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC: the parameters are wrong (an unknown tool among them).
pub const INVALID_PARAMS: i64 = -32602;
/// MCP: no such resource.
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// carma: reading a resource failed as the CLI's verb fails (`data.exit_code` says how).
pub const READ_FAILED: i64 = -32001;
/// carma: the session runs as many requests as it may ([`IN_FLIGHT_MAX`]); send it again later.
pub const BUSY: i64 = -32000;

/// A tool as `tools/list` shows it.
pub struct Tool {
    /// Its name, e.g. `queue`.
    pub name: &'static str,
    /// One or two sentences for the model: what it does, what it returns.
    pub description: &'static str,
    /// The JSON schema of its `arguments` (an object schema).
    pub input_schema: Value,
    /// Whether it only reads (an annotation clients may use to skip a confirmation).
    pub read_only: bool,
}

/// What a tool call gave.
pub enum Outcome {
    /// A JSON document (a `--json` shape of `schema/`): the verb's text as the content, and
    /// the document as `structuredContent`.
    Json {
        /// The document as the verb wrote it.
        text: String,
        /// The document parsed.
        document: Value,
    },
    /// The verb's own lines for people (`cancel`, `hold`, `wait`).
    Text(String),
    /// The verb failed: its one-line message and the exit code the CLI would have given.
    Failed {
        /// What the verb printed before it failed (`wait`'s outcomes), shown before the error.
        said: String,
        /// What the CLI prints after `error: `.
        message: String,
        /// What the CLI exits with.
        exit_code: i32,
    },
}

/// A resource as `resources/list` (or, with a `{placeholder}`, `resources/templates/list`)
/// shows it.
#[derive(Clone, Copy)]
pub struct Resource {
    /// `carma://queue`, or a template such as `carma://task/{id}/logs`.
    pub uri: &'static str,
    /// A short name.
    pub name: &'static str,
    /// What reading it gives.
    pub description: &'static str,
    /// Its MIME type.
    pub mime_type: &'static str,
}

/// Why a resource could not be read.
pub enum ReadError {
    /// No resource has this URI.
    NotFound(String),
    /// The verb behind it failed (another user's logs, an unknown task).
    Failed {
        /// The CLI's message.
        message: String,
        /// The CLI's exit code.
        exit_code: i32,
    },
}

/// carma's side of the protocol: the tools and resources, and running them. Shared by the
/// threads that serve requests at once, so it is `Sync` and takes `&self`.
pub trait Handler: Sync {
    /// Every tool, in the order `tools/list` gives them.
    fn tools(&self) -> Vec<Tool>;
    /// Runs tool `name` with its `arguments` (an object); `None` when there is no such tool.
    /// `request` says whether the client cancelled it, and carries its progress.
    fn call(
        &self,
        name: &str,
        arguments: &serde_json::Map<String, Value>,
        request: &Request<'_>,
    ) -> Option<Outcome>;
    /// The fixed resources and the templates.
    fn resources(&self) -> Vec<Resource>;
    /// Reads the resource at `uri`: its MIME type and text.
    fn read(&self, uri: &str, request: &Request<'_>) -> Result<(&'static str, String), ReadError>;
}

pub use serve::{IN_FLIGHT_MAX, Request, serve};

/// One message on one line (serde_json's compact form has no raw newline), flushed.
fn write_message(output: &mut impl Write, message: &Value) -> std::io::Result<()> {
    serde_json::to_writer(&mut *output, message)?;
    output.write_all(b"\n")?;
    output.flush()
}

/// The `content` of a tool result whose text is `text`.
fn text_content(text: String) -> Value {
    json!([{ "type": "text", "text": text }])
}
