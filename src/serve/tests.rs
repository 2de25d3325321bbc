//! The dashboard's pure parts: escaping, the pages' content, the version digest, the Host
//! check. Method: State folded from hand-written events; the pages read as text. The server
//! itself, a browser and the view are tested end to end in tests/dashboard.rs.

use super::limits::{PAGE_BYTES_MAX, TEXT_SHOWN_BYTES_MAX};
use super::page::{self, html};
use super::{loopback_name, version};
use crate::id::TaskId;
use crate::journal::{Event, Record, State};

fn id(n: u8) -> TaskId {
    TaskId::from_parts(1_700_000_000_000 + u64::from(n), u32::from(n))
}

fn state_with(name: &str, command: &str) -> State {
    let text = format!("name = \"{name}\"\ncommand = [\"python\", {command:?}]\nmemory = \"8GiB\"\n");
    let spec = crate::spec::parse_toml("t", &text)
        .and_then(|f| f.validate("t", std::path::Path::new("/w"), crate::spec::Limits::default()))
        .unwrap();
    let mut state = State::default();
    let events = [
        Event::Submitted { task: id(1), submitter_uid: 1000, spec },
        Event::Pending { task: id(1), reason: "NoFit: <b>bold</b> \u{202e}evil".into() },
    ];
    for (i, event) in events.into_iter().enumerate() {
        state.apply(i as u64 + 1, &Record { time_ms: 1_000, event });
    }
    state
}

fn names(uid: u32) -> String {
    format!("user<{uid}>")
}

#[test]
fn html_escapes_markup_and_invisible_characters() {
    assert_eq!(html("<script>alert('x')</script>"), "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;");
    assert_eq!(html("a&b \"q\""), "a&amp;b &quot;q&quot;");
    assert_eq!(html("rtl\u{202e}txt\x1b[2J"), "rtl\\u{202e}txt\\x1b[2J");
}

#[test]
fn the_queue_page_shows_user_text_only_as_text() {
    let state = state_with("train", "<script>alert(1)</script>");
    let body = page::index(&state, &Default::default(), 61_000, &names);
    assert!(body.contains("<td class=\"name\">train</td>"), "{body}");
    assert!(body.contains("NoFit: &lt;b&gt;bold&lt;/b&gt; \\u{202e}evil"), "{body}");
    assert!(body.contains("user&lt;1000&gt;"), "{body}");
    assert!(body.contains("<td>1m 0s</td>"), "waiting since submission: {body}");
    let detail = page::task(&state, state.tasks.values().next().unwrap(), 61_000, &names);
    assert!(detail.contains("python &#39;&lt;script&gt;alert(1)&lt;/script&gt;&#39;"), "{detail}");
    assert!(!detail.contains("<script>"), "{detail}");
}

#[test]
fn the_layout_loads_the_script_from_the_same_origin_only() {
    let page = page::layout("x<y", "00ff", "<p>body</p>");
    assert!(page.contains("<title>x&lt;y - carma</title>"), "{page}");
    assert!(page.contains("<meta name=\"carma-version\" content=\"00ff\">"), "{page}");
    assert!(page.contains("<script src=\"/app.js\" defer></script>"), "{page}");
    assert_eq!(page.matches("<script").count(), 1, "no inline script: {page}");
}

#[test]
fn the_version_changes_with_what_the_page_shows() {
    let state = state_with("train", "x.py");
    let before = version(&state);
    assert_eq!(version(&state), before, "a digest of the same state is the same");
    let mut later = state.clone();
    later.apply(3, &Record { time_ms: 2_000, event: Event::Pending { task: id(1), reason: "other".into() } });
    assert_ne!(version(&later), before);
    let mut ticked = state.clone();
    ticked.ticks += 1;
    ticked.last_tick_ms = Some(9_000);
    assert_eq!(version(&ticked), before, "a tick that changed nothing shown keeps the page");
}

#[test]
fn only_loopback_hosts_are_answered() {
    for host in ["localhost", "localhost:8350", "127.0.0.1:1", "[::1]:8350", "[::1]"] {
        assert!(loopback_name(host), "{host}");
    }
    for host in ["evil.example:8350", "127.0.0.1.evil.example", "", "[::2]:80"] {
        assert!(!loopback_name(host), "{host}");
    }
}

#[test]
fn a_sparkline_scales_into_its_box() {
    let svg = page::sparkline(&[(0.0, 0.0), (1.0, 1.0), (0.5, 2.0)], "t\"");
    assert!(svg.contains("points=\"0.0,35.0 240.0,1.0 120.0,1.0\""), "{svg}");
    assert!(svg.contains("aria-label=\"t&quot;\""), "{svg}");
}

#[test]
fn long_user_text_is_cut_and_says_how_much() {
    let long = "<".repeat(TEXT_SHOWN_BYTES_MAX + 1536);
    let shown = html(&long);
    assert!(shown.ends_with("&lt;&lt;… (cut: 1.5 KiB more)"), "{}", &shown[shown.len() - 60..]);
    assert_eq!(shown.matches("&lt;").count(), TEXT_SHOWN_BYTES_MAX);
    // A cut never splits a character: é is two bytes, the cap an even number.
    let accents = format!("x{}", "é".repeat(TEXT_SHOWN_BYTES_MAX));
    assert!(html(&accents).ends_with("é… (cut: 16.0 KiB more)"), "cut at a character's start");
    assert_eq!(
        html(&"a".repeat(TEXT_SHOWN_BYTES_MAX)),
        "a".repeat(TEXT_SHOWN_BYTES_MAX),
        "the cap itself is whole"
    );
}

#[test]
fn a_long_page_is_cut_at_a_line_and_says_so() {
    let body = "<p>row</p>\n".repeat(PAGE_BYTES_MAX / 11 + 100);
    let page = page::layout("t", "v", &body);
    assert!(page.len() <= PAGE_BYTES_MAX, "{} bytes", page.len());
    assert!(page.contains("<p>row</p>\n<p class=\"warn\">… (cut: "), "cut at a line");
    assert!(page.ends_with(" more of this page)</p>\n\n</body>\n</html>\n"), "{}", &page[page.len() - 120..]);
    let short = page::layout("t", "v", "<p>row</p>\n");
    assert!(!short.contains("cut:"), "{short}");
}
