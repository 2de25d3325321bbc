//! Text shown to people: nothing a user typed may drive the reader's terminal or hide from them.
//!
//! Task names are restricted, but commands, paths, reasons quoting a spool file's name, and
//! anything else a user wrote reach `queue`, `show`, `events` and error messages. An argv
//! holding `\x1b[2J` would clear an administrator's screen, and one holding U+202E
//! (RIGHT-TO-LEFT OVERRIDE) would show `rm -rf /` backwards or hide part of a line, so every
//! human output passes its user-written parts through [`escape`]; `--json` outputs are escaped
//! by JSON itself.

use std::borrow::Cow;

/// Invisible format characters (Unicode general category Cf, as of Unicode 15.1) and the line
/// and paragraph separators (Zl, Zp), as inclusive ranges sorted by start. They include every
/// bidirectional control (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069). std has no
/// general-category lookup, and a table this short is cheaper to review than a dependency.
const INVISIBLE: [(char, char); 19] = [
    ('\u{00ad}', '\u{00ad}'),
    ('\u{0600}', '\u{0605}'),
    ('\u{061c}', '\u{061c}'),
    ('\u{06dd}', '\u{06dd}'),
    ('\u{070f}', '\u{070f}'),
    ('\u{0890}', '\u{0891}'),
    ('\u{08e2}', '\u{08e2}'),
    ('\u{180e}', '\u{180e}'),
    ('\u{200b}', '\u{200f}'),
    ('\u{2028}', '\u{202e}'),
    // U+2065 is unassigned but reserved as default-ignorable, like the rest of this block.
    ('\u{2060}', '\u{206f}'),
    ('\u{feff}', '\u{feff}'),
    ('\u{fff9}', '\u{fffb}'),
    ('\u{110bd}', '\u{110bd}'),
    ('\u{110cd}', '\u{110cd}'),
    ('\u{13430}', '\u{1343f}'),
    ('\u{1bca0}', '\u{1bca3}'),
    ('\u{1d173}', '\u{1d17a}'),
    // Language tags and the tag characters; the block's unassigned code points are reserved
    // as default-ignorable, so future format characters land here too.
    ('\u{e0000}', '\u{e00ff}'),
];

/// `text` with control characters (C0, DEL, C1) written as Rust-style escapes (`\x1b`, `\n`),
/// and invisible format characters (bidi controls, zero-width characters, separators; see
/// [`INVISIBLE`]) as `\u{202e}`. Text with none of them comes back borrowed.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if is_invisible(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Whether [`escape`] rewrites `c`.
fn needs_escape(c: char) -> bool {
    c.is_control() || is_invisible(c)
}

/// Whether `c` is in [`INVISIBLE`]. Everything below U+00AD is plain ASCII or Latin-1, the
/// common case, and returns at the first comparison.
fn is_invisible(c: char) -> bool {
    if c < '\u{00ad}' {
        return false;
    }
    INVISIBLE.iter().any(|&(first, last)| (first..=last).contains(&c))
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

    /// Goal: every bidirectional control is shown as an escape, so `carma events` cannot be
    /// made to display a command reversed.
    #[test]
    fn bidi_controls_are_escaped() {
        assert_eq!(escape("rm \u{202e}fdp.exe"), "rm \\u{202e}fdp.exe");
        let bidi =
            "\u{61c}\u{200e}\u{200f}\u{202a}\u{202b}\u{202c}\u{202d}\u{202e}\u{2066}\u{2067}\u{2068}\u{2069}";
        assert_eq!(
            escape(bidi),
            "\\u{61c}\\u{200e}\\u{200f}\\u{202a}\\u{202b}\\u{202c}\\u{202d}\\u{202e}\\u{2066}\\u{2067}\\u{2068}\\u{2069}"
        );
    }

    /// Goal: characters that draw nothing (zero-width, soft hyphen, BOM, separators, tags)
    /// cannot hide text or make two different commands look alike.
    #[test]
    fn invisible_format_characters_and_separators_are_escaped() {
        assert_eq!(escape("a\u{200b}b\u{200c}c\u{200d}d"), "a\\u{200b}b\\u{200c}c\\u{200d}d");
        assert_eq!(
            escape("\u{2060}\u{2064}\u{feff}\u{ad}\u{180e}"),
            "\\u{2060}\\u{2064}\\u{feff}\\u{ad}\\u{180e}"
        );
        assert_eq!(escape("\u{fff9}\u{fffb}\u{2028}\u{2029}"), "\\u{fff9}\\u{fffb}\\u{2028}\\u{2029}");
        assert_eq!(escape("tag\u{e0041}\u{e007f}\u{2065}"), "tag\\u{e0041}\\u{e007f}\\u{2065}");
    }

    /// Goal: visible text next to the escaped ranges is untouched, and clean text is not copied.
    #[test]
    fn visible_neighbours_are_kept_and_clean_text_is_borrowed() {
        let visible = "\u{ac}\u{ae}\u{2027}\u{2030}\u{fffc}\u{fffd}\u{e0100} — 日本語 👩";
        assert!(matches!(escape(visible), Cow::Borrowed(_)), "{:?}", escape(visible));
        assert!(matches!(escape("python train.py --lr 0.1"), Cow::Borrowed(_)));
    }
}
