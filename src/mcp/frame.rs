//! Messages as lines, each read with a cap: a line longer than the cap is dropped as it
//! streams past (never held whole), and said to be oversized once its newline comes.

use std::io::{BufRead, ErrorKind};

/// What one read gave.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Frame {
    /// One line, without its newline (and a `\r` before it).
    Message(Vec<u8>),
    /// A line over the cap, skipped.
    Oversized,
    /// The input ended.
    End,
}

/// Reads the next line of at most `bytes_max` bytes.
pub(super) fn read_message(input: &mut impl BufRead, bytes_max: usize) -> std::io::Result<Frame> {
    let mut message = Vec::new();
    let mut oversized = false;
    loop {
        let buffer = match input.fill_buf() {
            Ok(buffer) => buffer,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buffer.is_empty() {
            return Ok(match (oversized, message.is_empty()) {
                (true, _) => Frame::Oversized,
                (false, true) => Frame::End,
                (false, false) => Frame::Message(message),
            });
        }
        let newline = buffer.iter().position(|&b| b == b'\n');
        let chunk = &buffer[..newline.unwrap_or(buffer.len())];
        if !oversized && message.len() + chunk.len() > bytes_max {
            oversized = true;
            message = Vec::new();
        }
        if !oversized {
            message.extend_from_slice(chunk);
        }
        let used = newline.map_or(buffer.len(), |at| at + 1);
        input.consume(used);
        if newline.is_some() {
            if oversized {
                return Ok(Frame::Oversized);
            }
            if message.last() == Some(&b'\r') {
                message.pop();
            }
            return Ok(Frame::Message(message));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_messages_and_an_oversized_line_is_skipped_to_its_newline() {
        let text = format!("{{\"a\":1}}\r\n{}\nnext\nlast", "x".repeat(100));
        // A small buffer: the long line arrives in pieces, as from a pipe.
        let mut input = std::io::BufReader::with_capacity(8, text.as_bytes());
        assert_eq!(read_message(&mut input, 64).unwrap(), Frame::Message(b"{\"a\":1}".to_vec()));
        assert_eq!(read_message(&mut input, 64).unwrap(), Frame::Oversized);
        assert_eq!(read_message(&mut input, 64).unwrap(), Frame::Message(b"next".to_vec()));
        assert_eq!(read_message(&mut input, 64).unwrap(), Frame::Message(b"last".to_vec()));
        assert_eq!(read_message(&mut input, 64).unwrap(), Frame::End);
    }

    #[test]
    fn an_oversized_line_is_never_held_whole() {
        // 8 MiB without a newline, against a 1 KiB cap: what is kept stays under the cap.
        struct Endless(usize);
        impl std::io::Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = buf.len().min(self.0);
                buf[..n].fill(b'y');
                self.0 -= n;
                Ok(n)
            }
        }
        let mut input = std::io::BufReader::new(Endless(8 << 20));
        assert_eq!(read_message(&mut input, 1024).unwrap(), Frame::Oversized);
        assert_eq!(read_message(&mut input, 1024).unwrap(), Frame::End);
    }
}
