//! Text shown to people: nothing a user typed may drive the reader's terminal.
//!
//! Task names are restricted, but commands, paths, reasons quoting a spool file's name, and
//! anything else a user wrote reach `queue`, `show`, `events` and error messages. An argv
//! holding `\x1b[2J` would clear an administrator's screen, so every human output passes its
//! user-written parts through [`escape`]; `--json` outputs are escaped by JSON itself.

use std::borrow::Cow;

/// `text` with control characters (C0, DEL, C1) written as Rust-style escapes (`\x1b`, `\n`).
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A byte count in binary units for people: `512 MiB`, `1 GiB`, `1.5 GiB`, `300 B`.
pub fn bytes(count: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (unit, shift) in UNITS {
        let size = 1u64 << shift;
        if count >= size {
            return if count.is_multiple_of(size) {
                format!("{} {unit}", count >> shift)
            } else {
                format!("{:.1} {unit}", count as f64 / size as f64)
            };
        }
    }
    format!("{count} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_as_people_write_them() {
        assert_eq!(bytes(512 << 20), "512 MiB");
        assert_eq!(bytes(1 << 30), "1 GiB");
        assert_eq!(bytes(3 << 29), "1.5 GiB");
        assert_eq!(bytes(64 << 10), "64 KiB");
        assert_eq!(bytes(300), "300 B");
    }

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(escape("plain ünïcode"), "plain ünïcode");
        assert_eq!(escape("clear\x1b[2Jscreen"), "clear\\x1b[2Jscreen");
        assert_eq!(escape("a\nb\tc\u{7f}\u{9b}"), "a\\nb\\tc\\x7f\\x9b");
    }
}
