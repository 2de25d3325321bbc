//! The bytes between `carma alloc`/`carma run` and an interactive task's supervisor, on the
//! attempt's Unix socket: frames of one kind byte, a two-byte big-endian length and at most
//! [`PAYLOAD_MAX`] bytes. Pure: [`encode`] and the [`Decoder`] hold no descriptor, so both
//! ends and the tests share one definition.
//!
//! A length over the cap or an unknown kind is a broken peer: the decoder says so once and
//! the relay hangs up; nothing a peer sends sizes a buffer beyond [`BUFFER_MAX`].

/// Most payload bytes in one frame.
pub const PAYLOAD_MAX: usize = 16 * 1024;
/// Most undecoded bytes a decoder keeps: one whole frame and its header.
pub const BUFFER_MAX: usize = PAYLOAD_MAX + HEADER_LEN;
/// Kind byte and length.
const HEADER_LEN: usize = 3;

/// One message either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Client → supervisor, first: whether the client's stdin is a terminal, and its size.
    Hello {
        /// The client's stdin is a terminal (raw mode, the task's terminal echoes).
        tty: bool,
        /// Terminal rows (0 when unknown).
        rows: u16,
        /// Terminal columns (0 when unknown).
        cols: u16,
    },
    /// Client → supervisor: bytes typed (or piped) for the job.
    Input(Vec<u8>),
    /// Client → supervisor: the client's terminal changed size.
    Resize {
        /// Terminal rows.
        rows: u16,
        /// Terminal columns.
        cols: u16,
    },
    /// Client → supervisor: the client's stdin ended (not a terminal).
    EndOfInput,
    /// Client → supervisor, after the hello, to a held allocation (`carma run --attach`): the
    /// command to run in it, `argv[0]` an absolute path the client resolved as the user.
    Command(Vec<String>),
    /// Supervisor → client: bytes the job wrote to its terminal.
    Output(Vec<u8>),
    /// Supervisor → client: one line from carma for the user (warnings, refusals, ends).
    Note(String),
    /// Supervisor → client, last: the session ended; the client exits with this code.
    Exit(i32),
}

const HELLO: u8 = 1;
const INPUT: u8 = 2;
const RESIZE: u8 = 3;
const END_OF_INPUT: u8 = 4;
const OUTPUT: u8 = 5;
const NOTE: u8 = 6;
const EXIT: u8 = 7;
const COMMAND: u8 = 8;

/// The frame's bytes. A payload over [`PAYLOAD_MAX`] is cut there: callers split data into
/// reads of at most that size, and a note is one line.
pub fn encode(frame: &Frame) -> Vec<u8> {
    let (kind, payload): (u8, Vec<u8>) = match frame {
        Frame::Hello { tty, rows, cols } => {
            let mut bytes = vec![u8::from(*tty)];
            bytes.extend(rows.to_be_bytes());
            bytes.extend(cols.to_be_bytes());
            (HELLO, bytes)
        }
        Frame::Input(data) => (INPUT, data.clone()),
        Frame::Resize { rows, cols } => (RESIZE, [rows.to_be_bytes(), cols.to_be_bytes()].concat()),
        Frame::EndOfInput => (END_OF_INPUT, Vec::new()),
        Frame::Output(data) => (OUTPUT, data.clone()),
        Frame::Note(line) => (NOTE, line.as_bytes().to_vec()),
        Frame::Exit(code) => (EXIT, code.to_be_bytes().to_vec()),
        Frame::Command(argv) => (COMMAND, argv.join("\0").into_bytes()),
    };
    let len = payload.len().min(PAYLOAD_MAX);
    let mut bytes = Vec::with_capacity(HEADER_LEN + len);
    bytes.push(kind);
    // PAYLOAD_MAX fits in u16 (checked below).
    bytes.extend((len as u16).to_be_bytes());
    bytes.extend(&payload[..len]);
    bytes
}

const _: () = assert!(PAYLOAD_MAX <= u16::MAX as usize);

/// Most bytes of a command for a held allocation (its words joined by NULs): one byte under
/// a frame's payload, so a frame [`encode`] cut at [`PAYLOAD_MAX`] is never taken for a whole
/// command.
pub const COMMAND_BYTES_MAX: usize = PAYLOAD_MAX - 1;

/// Why a held allocation refuses `argv` as a command, in words for its user; `None` when it
/// takes it. The client (`carma run --attach`) asks before it sends, the supervisor again on
/// what it got, so both say the same.
pub fn command_refusal(argv: &[String]) -> Option<String> {
    let words_max = crate::exec::plan::ARGV_LEN_MAX;
    if argv.len() > words_max {
        return Some(format!("the command has {} words; at most {words_max} are allowed", argv.len()));
    }
    let bytes = argv.iter().map(String::len).sum::<usize>() + argv.len().saturating_sub(1);
    if bytes > COMMAND_BYTES_MAX {
        return Some(format!(
            "the command is {bytes} bytes; at most {COMMAND_BYTES_MAX} fit, so pass long arguments in a file"
        ));
    }
    if argv.first().is_none_or(|program| !program.starts_with('/')) {
        return Some("the command's program must be an absolute path".into());
    }
    None
}

/// Frames out of a byte stream read in pieces.
#[derive(Debug, Default)]
pub struct Decoder {
    buffer: Vec<u8>,
}

impl Decoder {
    /// Room left before the buffer is full: read at most this much next.
    pub fn room(&self) -> usize {
        BUFFER_MAX.saturating_sub(self.buffer.len())
    }

    /// Adds bytes read from the peer (at most [`Decoder::room`] of them are kept).
    pub fn push(&mut self, bytes: &[u8]) {
        let take = bytes.len().min(self.room());
        self.buffer.extend_from_slice(&bytes[..take]);
    }

    /// The next whole frame, `Ok(None)` when more bytes are needed, `Err` for a broken peer.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, String> {
        let Some(header) = self.buffer.get(..HEADER_LEN) else { return Ok(None) };
        let kind = header[0];
        let len = usize::from(u16::from_be_bytes([header[1], header[2]]));
        if len > PAYLOAD_MAX {
            return Err(format!("a frame of {len} bytes, more than {PAYLOAD_MAX}"));
        }
        let Some(payload) = self.buffer.get(HEADER_LEN..HEADER_LEN + len) else { return Ok(None) };
        let pair = |at: usize| payload.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
        let frame = match kind {
            HELLO => match (payload.first(), pair(1), pair(3)) {
                (Some(tty), Some(rows), Some(cols)) => Frame::Hello { tty: *tty != 0, rows, cols },
                _ => return Err("a short hello frame".into()),
            },
            INPUT => Frame::Input(payload.to_vec()),
            RESIZE => match (pair(0), pair(2)) {
                (Some(rows), Some(cols)) => Frame::Resize { rows, cols },
                _ => return Err("a short resize frame".into()),
            },
            END_OF_INPUT => Frame::EndOfInput,
            OUTPUT => Frame::Output(payload.to_vec()),
            NOTE => Frame::Note(String::from_utf8_lossy(payload).into_owned()),
            EXIT => match payload.get(..4) {
                Some(b) => Frame::Exit(i32::from_be_bytes([b[0], b[1], b[2], b[3]])),
                None => return Err("a short exit frame".into()),
            },
            COMMAND => match std::str::from_utf8(payload) {
                Ok(text) if !text.is_empty() => {
                    Frame::Command(text.split('\0').map(str::to_string).collect())
                }
                _ => return Err("a command frame that is empty or not UTF-8".into()),
            },
            other => return Err(format!("a frame of unknown kind {other}")),
        };
        self.buffer.drain(..HEADER_LEN + len);
        Ok(Some(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_frame_round_trips_through_pieces_of_any_size() {
        let frames = vec![
            Frame::Hello { tty: true, rows: 24, cols: 80 },
            Frame::Input(b"echo $CUDA_VISIBLE_DEVICES\r".to_vec()),
            Frame::Resize { rows: 50, cols: 132 },
            Frame::EndOfInput,
            Frame::Output(vec![0, 255, 10]),
            Frame::Note("carma: this session ends in 60 s (time limit 2h)".into()),
            Frame::Exit(-3),
            Frame::Command(vec!["/usr/bin/python3".into(), "x.py".into(), String::new()]),
        ];
        let bytes: Vec<u8> = frames.iter().flat_map(encode).collect();
        for piece in [1, 2, 7, bytes.len()] {
            let mut decoder = Decoder::default();
            let mut seen = Vec::new();
            for chunk in bytes.chunks(piece) {
                decoder.push(chunk);
                while let Some(frame) = decoder.next_frame().expect("sound bytes") {
                    seen.push(frame);
                }
            }
            assert_eq!(seen, frames, "pieces of {piece} bytes");
        }
    }

    /// Goal (issue 41): an over-long command is refused for its length, never for its
    /// program, and a command cut at a frame's end is never run. Method: each bound alone.
    #[test]
    fn a_command_is_refused_for_what_is_wrong_with_it() {
        let words = |n: usize| -> Vec<String> {
            std::iter::once("/bin/echo".into()).chain((1..n).map(|_| "x".into())).collect()
        };
        assert_eq!(command_refusal(&words(4096)), None);
        assert_eq!(
            command_refusal(&words(4097)).as_deref(),
            Some("the command has 4097 words; at most 4096 are allowed")
        );
        let long = vec!["/bin/echo".to_string(), "y".repeat(COMMAND_BYTES_MAX - 9)];
        assert_eq!(
            command_refusal(&long).as_deref(),
            Some("the command is 16384 bytes; at most 16383 fit, so pass long arguments in a file")
        );
        let fits = vec!["/bin/echo".to_string(), "y".repeat(COMMAND_BYTES_MAX - 10)];
        assert_eq!(command_refusal(&fits), None);
        // What the supervisor decodes from a frame cut at PAYLOAD_MAX is refused too.
        let mut decoder = Decoder::default();
        decoder.push(&encode(&Frame::Command(vec!["/bin/echo".into(), "z".repeat(2 * PAYLOAD_MAX)])));
        let Ok(Some(Frame::Command(cut))) = decoder.next_frame() else { panic!("a command frame") };
        assert!(command_refusal(&cut).is_some_and(|why| why.starts_with("the command is 16384 bytes")));
        assert_eq!(
            command_refusal(&["echo".to_string()]).as_deref(),
            Some("the command's program must be an absolute path")
        );
    }

    #[test]
    fn a_broken_peer_is_named_and_never_sizes_the_buffer() {
        let mut decoder = Decoder::default();
        decoder.push(&[INPUT, 0xff, 0xff]);
        assert_eq!(decoder.next_frame(), Err("a frame of 65535 bytes, more than 16384".into()));
        let mut decoder = Decoder::default();
        decoder.push(&[42, 0, 0]);
        assert_eq!(decoder.next_frame(), Err("a frame of unknown kind 42".into()));
        let mut decoder = Decoder::default();
        decoder.push(&vec![0; 3 * BUFFER_MAX]);
        assert_eq!(decoder.room(), 0, "the buffer stops at one frame");
    }
}
