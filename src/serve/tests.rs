//! The dashboard's pure parts: escaping, the pages' content, the version digest, the Host
//! check. Method: State folded from hand-written events; the pages read as text. The server
//! itself, a browser and the view are tested end to end in tests/dashboard.rs.

use super::cards;
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
    let body = page::index(&state, &Default::default(), 61_000, &names, 5120);
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
    // A MIG instance's memory is on the page too (its row in its GPU's card).
    let mig = crate::metrics::fixtures::mig_and_lost();
    let mut busier = mig.clone();
    if let Some(sample) =
        busier.gpus.values_mut().find_map(|g| g.last.as_mut().filter(|s| !s.mig.instances.is_empty()))
    {
        sample.mig.instances[0].memory_used_mib += 1024;
    }
    assert_ne!(version(&busier), version(&mig), "an instance's memory changed the page");
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

/// Defect: the sparklines were an empty grey box. Time ran over a fixed hour, so a queue up
/// for minutes drew every point within a pixel of the right edge. Now the line spans the box
/// from the oldest reading to the newest; one reading draws a level line.
#[test]
fn a_sparkline_spans_its_box_from_the_oldest_reading_to_the_newest() {
    let svg = cards::sparkline(&[(10_000, 0.0), (70_000, 1.0), (40_000, 2.0)], "t\"");
    assert!(
        svg.contains("data-points=\"3\"") && svg.contains("points=\"0.0,34.0 240.0,2.0 120.0,2.0\""),
        "{svg}"
    );
    assert!(svg.contains("aria-label=\"t&quot;\""), "{svg}");
    let one = cards::sparkline(&[(5_000, 0.5)], "m");
    assert!(one.contains("points=\"0.0,18.0 240.0,18.0\""), "{one}");
    let none = cards::sparkline(&[], "m");
    assert!(none.contains("aria-label=\"m: no reading yet\"") && none.contains("points=\"\""), "{none}");
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

// ---------------------------------------------------------------------------------------
// The GPU cards and the folded queue (State: crate::metrics::fixtures)
// ---------------------------------------------------------------------------------------

fn gpus_page() -> (State, String) {
    let state = crate::metrics::fixtures::mig_and_lost();
    let body = page::index(&state, &Default::default(), 61_000, &names, 5120);
    (state, body)
}

/// The card of the GPU with `uuid`: from its opening tag to its end.
fn card<'a>(body: &'a str, uuid: &str) -> &'a str {
    let start = body
        .find(&format!("data-uuid=\"{uuid}\">\n<h3>"))
        .unwrap_or_else(|| panic!("no card {uuid}: {body}"));
    let end = body[start..].find("</section>").unwrap();
    &body[start..start + end]
}

/// Defect: a task on a MIG instance showed on no card (cards matched the parent's UUID). The
/// instance is now a row of its parent's card, with its task.
#[test]
fn a_task_on_a_mig_instance_shows_under_its_gpu() {
    let (state, body) = gpus_page();
    let card = card(&body, "GPU-z");
    let task = crate::metrics::fixtures::id(1);
    assert!(
        card.contains(&format!(
            "<tr data-uuid=\"MIG-z-1\"><td>GPU0/mig1</td><td>1g.10gb</td><td>0 B of 9.6 GiB</td><td>8 GiB</td><td>1.6 GiB</td><td><a href=\"/task/{task}\">small</a></td></tr>"
        )),
        "{card}"
    );
    assert!(card.find("GPU0/mig0").unwrap() < card.find("GPU0/mig1").unwrap(), "by slot: {card}");
    assert!(card.contains("<p>tasks: none</p>"), "the whole GPU holds no task itself: {card}");
    assert_eq!(state.tasks.len(), 4);
}

/// Defect: the task page's GPUS column showed a bare index (and a MIG instance's raw UUID).
/// It names each GPU as placement reasons do, with its UUID.
#[test]
fn the_task_page_names_its_gpus_as_placement_reasons_do() {
    let (state, _) = gpus_page();
    let attempts = |n: u8| {
        let page = page::task(&state, &state.tasks[&crate::metrics::fixtures::id(n)], 61_000, &names);
        let start = page.find("<tbody>").unwrap();
        page[start..].lines().nth(1).unwrap().to_string()
    };
    assert!(attempts(1).starts_with("<tr><td>1</td><td>GPU0/mig1 (MIG-z-1)</td>"), "{}", attempts(1));
    assert!(attempts(2).starts_with("<tr><td>1</td><td>GPU0/mig0 (MIG-z-0)</td>"), "{}", attempts(2));
}

/// Defect: a card showed process memory only. It now says what carma reserved and what is
/// free for a new task, so a reader sees why tasks wait.
#[test]
fn a_card_shows_carmas_reservations_and_what_is_free_for_new_tasks() {
    let (_, body) = gpus_page();
    let card = card(&body, "GPU-z");
    assert!(card.contains("<p>memory 12 GiB used by processes of 80 GiB</p>"), "{card}");
    assert!(
        card.contains("<p class=\"carma\">reserved by carma 0 B (0 tasks), free for new tasks none (MIG on: its instances take the work)</p>"),
        "{card}"
    );
    assert!(card.contains("<th>RESERVED BY CARMA</th><th>FREE FOR NEW TASKS</th>"), "{card}");
}

/// Defect: a lost (or XID) GPU's card looked like a healthy one. Its state leads the card, in
/// `carma gpus`'s words, with the reason and that it takes no work.
#[test]
fn a_lost_gpu_says_so_first() {
    let (_, body) = gpus_page();
    let card = card(&body, "GPU-a");
    assert!(card.contains("<h3>GPU 1: A100 <span class=\"state bad\">lost</span></h3>"), "{card}");
    assert!(card.contains("<p class=\"health bad\">lost (fell off the bus); takes no work</p>"), "{card}");
    assert!(card.contains("free for new tasks none"), "{card}");
    assert!(body.contains("<section class=\"gpu bad\" data-uuid=\"GPU-a\">"), "{body}");
    let healthy = self::card(&body, "GPU-z");
    assert!(healthy.contains("<span class=\"state ok\">MIG</span>"), "{healthy}");
}

/// Defect: cards came in UUID order (GPU-a, index 1, first). They come by index.
#[test]
fn cards_come_by_index() {
    let (_, body) = gpus_page();
    let (z, a) = (body.find("data-uuid=\"GPU-z\"").unwrap(), body.find("data-uuid=\"GPU-a\"").unwrap());
    assert!(z < a, "GPU 0 first: {body}");
}

/// Defect: an array's members each had a row. They fold into one, counted by state, opening
/// onto a link to each member.
#[test]
fn an_array_folds_into_one_row() {
    let (_, body) = gpus_page();
    let array = crate::metrics::fixtures::array_id();
    let row =
        body.lines().find(|l| l.starts_with("<tr class=\"array\">")).unwrap_or_else(|| panic!("{body}"));
    assert!(row.contains(&format!("<summary>{array}[3%2]</summary>")), "{row}");
    assert!(row.contains("<td>1 Placed, 2 Pending</td>"), "{row}");
    assert!(row.contains("<td>array cap: 1 of 2 running</td>"), "the first waiting member's reason: {row}");
    let member = crate::metrics::fixtures::id(3);
    assert!(
        row.contains(&format!("<li><a href=\"/task/{member}\">{member}</a> index 1: Pending</li>")),
        "{row}"
    );
    assert_eq!(body.matches("<td class=\"name\">sweep</td>").count(), 1, "one row: {body}");
}

/// A GPU an administrator reserved says so on its card, with why the reservation cannot be
/// honoured when the GPU is lost.
#[test]
fn a_reserved_gpu_says_so_on_its_card() {
    let mut state = crate::metrics::fixtures::mig_and_lost();
    let entry = crate::journal::reservations::ReservationEntry {
        name: "paper".into(),
        start_ms: 0,
        end_ms: 3_600_000,
        users: vec![1001],
        gpu_count: 1,
        gpus: vec!["GPU-a".into()],
        by_uid: 0,
        created_ms: 0,
    };
    state.gpu_reservations.insert("paper".into(), entry);
    let body = page::index(&state, &Default::default(), 61_000, &names, 5120);
    let card = card(&body, "GPU-a");
    assert!(card.contains("<p class=\"reserved\">reserved: "), "{card}");
    assert!(card.contains("paper"), "{card}");
    assert!(
        card.contains(
            " from 1970-01-01T00:00:00Z to 1970-01-01T01:00:00Z (cannot be honoured: GPU1 unavailable)</p>"
        ),
        "{card}"
    );
    assert!(!self::card(&body, "GPU-z").contains("reserved: "), "only the reserved GPU says so");
}
