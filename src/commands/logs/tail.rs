//! `carma logs ID --tail N` and `carma logs ID --json`: the end of each stream, bounded. At
//! most [`TAIL_BYTES_MAX`] are read from the end of a file, whatever its size (the job's), and
//! of those the last N lines are kept. The same reader as `carma logs` opens the files, after
//! the same access check, so `carma mcp`'s `logs` tool can do nothing `carma logs` cannot.

use std::io::{Read, Seek, SeekFrom, Write};

use serde::Serialize;

use crate::cli::LogsArgs;
use crate::error::Error;
use crate::home::Home;
use crate::id::TaskId;
use crate::tick::launch::Stream;

/// Schema tag of `carma logs --json` (schema/logs.schema.json).
const LOGS_SCHEMA: &str = "carma.logs/1";
/// The most bytes read from the end of one stream.
const TAIL_BYTES_MAX: u64 = 64 * 1024;

#[derive(Serialize)]
struct LogsJson {
    schema: &'static str,
    task: String,
    attempt: u32,
    streams: Vec<StreamTail>,
}

/// One stream's tail.
#[derive(Serialize)]
struct StreamTail {
    stream: &'static str,
    path: String,
    /// Whether the file exists yet.
    exists: bool,
    /// Its size when read, bytes.
    size_bytes: u64,
    /// Bytes before the shown text that were left out.
    cut_bytes: u64,
    /// The last lines (UTF-8, an invalid byte as U+FFFD).
    text: String,
}

/// Prints (or with `--json` writes as one document) each stream's tail.
pub(super) fn run(
    home: &Home,
    args: &LogsArgs,
    id: &TaskId,
    attempt: u32,
    streams: &[Stream],
    escape_controls: bool,
    mut out: &mut dyn Write,
) -> anyhow::Result<()> {
    let lines_max = args.tail.map_or(usize::MAX, |n| n as usize);
    let mut tails = Vec::with_capacity(streams.len());
    for &stream in streams {
        let path = super::attempt_path(home, id, attempt, stream)?;
        tails.push(read_tail(&path, stream, lines_max)?);
    }
    if tails.iter().all(|t| !t.exists) {
        return Err(Error::BadInput(format!(
            "task {id} attempt {attempt} has no output yet ({}); carma logs -f {id} waits for it",
            tails[0].path
        ))
        .into());
    }
    if args.json {
        let doc = LogsJson { schema: LOGS_SCHEMA, task: id.to_string(), attempt, streams: tails };
        return crate::commands::render::write_json(out, &doc);
    }
    for tail in &tails {
        super::write_bytes(&mut out, tail.text.as_bytes(), escape_controls)?;
    }
    Ok(())
}

fn read_tail(path: &std::path::Path, stream: Stream, lines_max: usize) -> anyhow::Result<StreamTail> {
    let name = match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    };
    let shown = path.display().to_string();
    let mut tail = StreamTail {
        stream: name,
        path: shown.clone(),
        exists: false,
        size_bytes: 0,
        cut_bytes: 0,
        text: String::new(),
    };
    let mut file = match super::open_log(path, crate::fsutil::Symlinks::Follow) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(tail),
        Err(e) => return Err(Error::io(format!("cannot read {shown}"), e).into()),
    };
    let cannot = |e| Error::io(format!("cannot read {shown}"), e);
    let size = file.metadata().map_err(cannot)?.len();
    let from = size.saturating_sub(TAIL_BYTES_MAX);
    file.seek(SeekFrom::Start(from)).map_err(cannot)?;
    // At most the cap, even if the job grows the file meanwhile.
    let mut bytes = Vec::new();
    file.take(TAIL_BYTES_MAX).read_to_end(&mut bytes).map_err(cannot)?;
    let start = last_lines_start(&bytes, lines_max, from > 0);
    tail.exists = true;
    tail.size_bytes = size;
    tail.cut_bytes = from + start as u64;
    tail.text = String::from_utf8_lossy(&bytes[start..]).into_owned();
    Ok(tail)
}

/// Where the last `lines_max` lines of `bytes` start. A read that began mid-file
/// (`cut_before`) drops its first, partial line when a newline follows it.
fn last_lines_start(bytes: &[u8], lines_max: usize, cut_before: bool) -> usize {
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let mut start = 0;
    let mut seen = 0;
    for (at, _) in body.iter().enumerate().rev().filter(|(_, b)| **b == b'\n') {
        seen += 1;
        if seen == lines_max {
            return at + 1;
        }
        start = at + 1;
    }
    if lines_max == 0 {
        return bytes.len();
    }
    // Fewer newlines than asked: everything, less a partial first line.
    if cut_before && seen > 0 { start.min(first_newline_end(body)) } else { 0 }
}

fn first_newline_end(bytes: &[u8]) -> usize {
    bytes.iter().position(|&b| b == b'\n').map_or(0, |at| at + 1)
}

#[cfg(test)]
mod tests {
    use super::last_lines_start;

    #[test]
    fn the_last_lines_are_kept_and_a_cut_first_line_dropped() {
        let text = b"one\ntwo\nthree\n";
        assert_eq!(&text[last_lines_start(text, 2, false)..], b"two\nthree\n");
        assert_eq!(&text[last_lines_start(text, 1, false)..], b"three\n");
        assert_eq!(&text[last_lines_start(text, 9, false)..], b"one\ntwo\nthree\n");
        assert_eq!(&text[last_lines_start(text, 9, true)..], b"two\nthree\n", "one may be half a line");
        assert_eq!(&text[last_lines_start(text, 0, false)..], b"");
        let open = b"one\ntwo";
        assert_eq!(&open[last_lines_start(open, 1, false)..], b"two");
    }
}
