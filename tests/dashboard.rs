//! `carma serve`, the read-only dashboard, end to end: a real queue with two fake A100s and
//! real ticks, the real server on a free port, and a real headless Chromium driven over
//! chromedriver's WebDriver HTTP API. The page must show the queue's tasks and GPUs, reload by
//! itself when a tick changes the state, and leave the browser console without errors.
//! Without Chromium and chromedriver the browser test says it skipped; CI installs them.
//!
//! The HTTP-level tests need no browser: the server answers while the journal's lock is held
//! (it reads only the published view), refuses anything but GET and HEAD, answers only to
//! loopback Host names, and shows a command holding `<script>` as text.

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::TestHome;
use common::cluster::TWO_A100;
use common::skip::{Need, skip};
use serde_json::{Value, json};

const CHROMIUM: [&str; 2] = ["/usr/bin/chromium", "/usr/bin/chromium-browser"];
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A child process killed when the test ends, passing or not.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A queue with fake GPUs, one running task, and `carma serve` on a free port.
fn serving() -> (TestHome, Killed, String) {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    home.ok(&["submit", "--parsable", "--name", "first-task", "--", "sleep", "60"]);
    assert!(home.run(&["tick"]).status.success());
    let port = free_port();
    let server = home
        .cmd()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn carma serve");
    let base = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    while ureq::get(&format!("{base}/version")).call().is_err() {
        assert!(started.elapsed() < Duration::from_secs(20), "carma serve never answered");
        std::thread::sleep(Duration::from_millis(50));
    }
    (home, Killed(server), base)
}

/// GET `url`: status and body, whatever the status.
fn get(url: &str) -> (u16, String) {
    match ureq::get(url).call() {
        Ok(response) => (response.status(), response.into_string().unwrap()),
        Err(ureq::Error::Status(code, response)) => (code, response.into_string().unwrap()),
        Err(e) => panic!("GET {url}: {e}"),
    }
}

fn cancel_all(home: &TestHome) {
    let queue: Value = serde_json::from_str(&home.ok(&["queue", "--json"])).unwrap();
    for task in queue["tasks"].as_array().into_iter().flatten() {
        let _ = home.run(&["cancel", task["id"].as_str().unwrap_or_default()]);
    }
    let _ = home.run(&["tick"]);
}

/// The invariant "serve reads only the view": with the journal's lock held by someone else
/// (as a long tick holds it), every page still answers at once, from the published view.
#[test]
fn serve_reads_only_the_view() {
    let (home, _server, base) = serving();
    let lock = std::fs::File::open(home.path().join("carma.lock")).unwrap();
    lock.lock().expect("hold the journal's lock");
    let started = Instant::now();
    let (status, page) = get(&format!("{base}/"));
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("first-task"), "{page}");
    for path in ["/metrics", "/report", "/version", "/app.js", "/style.css"] {
        assert_eq!(get(&format!("{base}{path}")).0, 200, "{path}");
    }
    assert!(started.elapsed() < Duration::from_secs(5), "no page waited for the lock");
    let (_, metrics) = get(&format!("{base}/metrics"));
    assert!(metrics.contains("carma_tasks{state=\"running\"} 1\n"), "{metrics}");
    assert!(metrics.contains("carma_gpu_memory_total_bytes{gpu=\"0\",uuid=\"GPU-fake-0000\""), "{metrics}");
    lock.unlock().unwrap();

    // The sparklines grow by what each tick published (read once, incrementally).
    let points = |page: &str| -> usize {
        let svg = page.split("<svg class=\"sparkline\"").nth(1).expect("a sparkline");
        svg.split("data-points=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap()
    };
    let before = points(&page);
    assert!(before >= 1, "{page}");
    assert!(home.run(&["tick"]).status.success());
    let (_, later) = get(&format!("{base}/"));
    assert_eq!(points(&later), before + 1, "{later}");
    // A view rebuilt from the journal (deleted here) is read again, nothing counted twice.
    std::fs::remove_dir_all(home.path().join("view")).unwrap();
    assert!(home.run(&["tick"]).status.success());
    let (status, rebuilt) = get(&format!("{base}/"));
    assert_eq!(status, 200, "{rebuilt}");
    assert_eq!(points(&rebuilt), before + 2, "{rebuilt}");
    assert!(rebuilt.contains("first-task"), "{rebuilt}");
    cancel_all(&home);
}

#[test]
fn serve_is_read_only_local_and_escapes_user_text() {
    let (home, _server, base) = serving();
    let id = home.ok(&["submit", "--parsable", "--name", "xss", "--", "echo", "<script>alert(1)</script>"]);
    assert!(home.run(&["tick"]).status.success());
    let (status, detail) = get(&format!("{base}/task/{}", id.trim()));
    assert_eq!(status, 200, "{detail}");
    assert!(detail.contains("echo &#39;&lt;script&gt;alert(1)&lt;/script&gt;&#39;"), "{detail}");
    assert_eq!(detail.matches("<script").count(), 1, "only the page's own script tag: {detail}");

    let (status, missing) = get(&format!("{base}/task/zzzzzzzz"));
    assert_eq!(status, 404);
    assert!(missing.contains("no task"), "{missing}");
    match ureq::post(&format!("{base}/")).send_string("x") {
        Err(ureq::Error::Status(405, response)) => assert_eq!(response.header("Allow"), Some("GET, HEAD")),
        other => panic!("POST is refused with 405: {other:?}"),
    }
    match ureq::get(&format!("{base}/")).set("Host", "evil.example").call() {
        Err(ureq::Error::Status(421, _)) => {}
        other => panic!("a foreign Host is refused: {other:?}"),
    }
    let response = ureq::get(&format!("{base}/")).call().unwrap();
    let policy = response.header("Content-Security-Policy").unwrap_or_default().to_string();
    assert!(policy.contains("script-src 'self'"), "{policy}");
    cancel_all(&home);
}

#[test]
fn serve_refuses_a_bad_listen_address() {
    let home = TestHome::new();
    let out = home.run(&["serve", "--listen", "localhost"]);
    common::assert_error(
        &out,
        2,
        "--listen \"localhost\" is not an address; give IP:PORT, e.g. 127.0.0.1:8350",
    );
}

// ---------------------------------------------------------------------------------------
// The browser
// ---------------------------------------------------------------------------------------

struct Browser {
    _driver: Killed,
    url: String,
}

impl Browser {
    /// A headless Chromium session; `None` when Chromium or chromedriver is not installed.
    /// Installed but failing to start is a failure, not a skip: CI must not pass silently.
    fn start() -> Option<Browser> {
        let chromium = CHROMIUM.iter().find(|p| Path::new(p).exists())?;
        if !Path::new(CHROMEDRIVER).exists() {
            return None;
        }
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let driver = Killed(driver);
        let base = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while ureq::get(&format!("{base}/status")).call().is_err() {
            assert!(started.elapsed() < Duration::from_secs(30), "chromedriver never answered");
            std::thread::sleep(Duration::from_millis(100));
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                // No background networking: this machine's network is closed, and Chromium's
                // own connections (updates, sync) would be refused many at a time.
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-quic", "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                ],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let session = post(&format!("{base}/session"), &capabilities).expect("a Chromium session");
        let id = session["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {session}"));
        Some(Browser { url: format!("{base}/session/{id}"), _driver: driver })
    }

    fn go(&self, url: &str) {
        post(&format!("{}/url", self.url), &json!({ "url": url })).unwrap();
    }

    fn script(&self, script: &str) -> Value {
        post(&format!("{}/execute/sync", self.url), &json!({ "script": script, "args": [] })).unwrap()["value"].clone()
    }

    fn text(&self) -> String {
        self.script("return document.body ? document.body.innerText : '';")
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The console's entries since the last call.
    fn console(&self) -> Vec<Value> {
        let log = post(&format!("{}/se/log", self.url), &json!({ "type": "browser" })).unwrap();
        log["value"].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = ureq::delete(&self.url).call();
    }
}

fn post(url: &str, body: &Value) -> Result<Value, String> {
    let response = ureq::post(url)
        .set("Content-Type", "application/json")
        .send_string(&body.to_string())
        .map_err(|e| match e {
            ureq::Error::Status(code, response) => {
                format!("{code}: {}", response.into_string().unwrap_or_default())
            }
            other => other.to_string(),
        })?;
    serde_json::from_str(&response.into_string().map_err(|e| e.to_string())?).map_err(|e| e.to_string())
}

/// Waits until the page's text contains `wanted`, without navigating.
fn wait_for_text(browser: &Browser, wanted: &str, limit: Duration) -> String {
    let started = Instant::now();
    loop {
        let text = browser.text();
        if text.contains(wanted) || started.elapsed() > limit {
            return text;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_dashboard_in_a_real_browser_shows_the_queue_and_refreshes_itself() {
    let Some(browser) = Browser::start() else {
        return skip(Need::Browser, "no chromium/chromedriver (apt install chromium chromium-driver)");
    };
    let (home, _server, base) = serving();
    browser.go(&format!("{base}/"));
    let text = wait_for_text(&browser, "first-task", Duration::from_secs(10));
    assert!(text.contains("first-task"), "the queue's task: {text}");
    assert!(text.contains("GPU 0: A100-SXM4-40GB") && text.contains("GPU 1: A100-SXM4-40GB"), "{text}");
    assert!(text.contains("Running"), "{text}");
    // A mark that only this load of the page carries: a reload drops it.
    browser.script("window.carmaMark = 1; return null;");

    home.ok(&["submit", "--parsable", "--name", "second-task", "--", "sleep", "60"]);
    assert!(home.run(&["tick"]).status.success());
    let text = wait_for_text(&browser, "second-task", Duration::from_secs(20));
    assert!(text.contains("second-task"), "the page reloaded itself after the tick: {text}");
    assert_eq!(browser.script("return window.carmaMark === undefined;"), json!(true), "it was a reload");
    let url = browser.script("return window.location.href;");
    assert_eq!(url, json!(format!("{base}/")), "the browser stayed on the page");

    // The task page and the report page load too.
    let id = browser.script("return document.querySelector('#queue a').getAttribute('href');");
    browser.go(&format!("{base}{}", id.as_str().unwrap()));
    let detail = wait_for_text(&browser, "Attempts", Duration::from_secs(10));
    assert!(detail.contains("first-task") || detail.contains("second-task"), "{detail}");
    browser.go(&format!("{base}/report"));
    let report = wait_for_text(&browser, "out-of-memory crashes", Duration::from_secs(10));
    assert!(report.contains("Report"), "{report}");
    assert_eq!(browser.script("return document.querySelectorAll('.figure svg').length;"), json!(1));

    let console = browser.console();
    let errors: Vec<&Value> = console.iter().filter(|e| e["level"] == "SEVERE").collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
    // The log is read for real: an error logged now shows up in it.
    browser.script("console.error('carma-probe'); return null;");
    let probe = browser.console();
    assert!(
        probe
            .iter()
            .any(|e| e["level"] == "SEVERE" && e["message"].as_str().unwrap_or("").contains("carma-probe")),
        "the console log channel works: {probe:?}"
    );
    cancel_all(&home);
}

/// A GPU with MIG on (two instances), a plain GPU, and a lost one, by index; their UUIDs sort
/// the other way round.
const MIG_AND_LOST: &str = r#"[
  {"uuid": "GPU-z-h100", "name": "H100", "memory_total_mib": 81559, "memory_used_mib": 0,
   "memory_reserved_mib": 1024,
   "mig_instances": [
     {"uuid": "MIG-z-h100-0", "profile": "3g.40gb", "memory_total_mib": 40192, "memory_used_mib": 30000},
     {"uuid": "MIG-z-h100-1", "profile": "1g.10gb", "memory_total_mib": 9856, "memory_used_mib": 0}]},
  {"uuid": "GPU-m-a100", "name": "A100", "memory_total_mib": 40960, "memory_used_mib": 2048, "sm_active": 0.4},
  {"uuid": "GPU-a-a100", "name": "A100", "memory_total_mib": 40960, "memory_used_mib": 0,
   "health": {"state": "lost", "detail": "fell off the bus"}}
]"#;

/// Issue 33's dashboard defects, as a person sees them in a real browser: a task on a MIG
/// instance shows under its GPU; cards come by index and say what carma reserved and what is
/// free; the lost GPU says `lost`; an array is one row; the sparklines draw a line across
/// their box. A screenshot is left in the test's target dir (`dashboard.png`) to look at.
#[test]
fn the_dashboard_shows_mig_reservations_health_and_arrays() {
    let Some(browser) = Browser::start() else {
        return skip(Need::Browser, "no chromium/chromedriver (apt install chromium chromium-driver)");
    };
    let home = TestHome::with_fake_gpus(MIG_AND_LOST, "magm");
    home.ok(&["submit", "--parsable", "--name", "on-mig", "--mem", "4GiB", "--", "sleep", "60"]);
    home.ok(&[
        "submit",
        "--parsable",
        "--name",
        "sweep",
        "--array",
        "0-2%1",
        "--mem",
        "8GiB",
        "--",
        "sleep",
        "60",
    ]);
    for _ in 0..3 {
        assert!(home.run(&["tick"]).status.success());
        std::thread::sleep(Duration::from_millis(1100));
    }
    let port = free_port();
    let server = home
        .cmd()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn carma serve");
    let _server = Killed(server);
    let base = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    while ureq::get(&format!("{base}/version")).call().is_err() {
        assert!(started.elapsed() < Duration::from_secs(20), "carma serve never answered");
        std::thread::sleep(Duration::from_millis(50));
    }
    post(&format!("{}/window/rect", browser.url), &json!({"width": 1400, "height": 1300})).unwrap();
    browser.go(&format!("{base}/"));
    let text = wait_for_text(&browser, "GPU0/mig1", Duration::from_secs(10));
    let cards = browser.script(
        "return Array.from(document.querySelectorAll('section.gpu')).map(s => s.getAttribute('data-uuid'));",
    );
    assert_eq!(cards, json!(["GPU-z-h100", "GPU-m-a100", "GPU-a-a100"]), "by index: {text}");
    let mig = browser.script("return document.querySelector('tr[data-uuid=\"MIG-z-h100-1\"]').innerText;");
    assert_eq!(mig, json!("GPU0/mig1\t1g.10gb\t0 B of 9.6 GiB\t4 GiB\t5.6 GiB\ton-mig"), "{text}");
    let lost =
        browser.script("return document.querySelector('section[data-uuid=\"GPU-a-a100\"]').innerText;");
    let lost = lost.as_str().unwrap_or_default();
    assert!(lost.starts_with("GPU 2: A100 lost\n\nlost (fell off the bus); takes no work\n"), "{lost}");
    let color = browser.script(
        "return getComputedStyle(document.querySelector('section[data-uuid=\"GPU-a-a100\"] .state')).backgroundColor;",
    );
    assert_eq!(color, json!("rgb(187, 0, 0)"), "the state stands out in red");
    assert!(
        text.contains("reserved by carma 8 GiB (1 task), free for new tasks 30 GiB"),
        "GPU 1 holds the array's running member: {text}"
    );
    let row = browser.script("return document.querySelector('#queue tr.array').innerText;");
    let row = row.as_str().unwrap_or_default().to_string();
    assert!(row.contains("1 Running, 2 Pending") && row.contains("sweep"), "{row}");
    assert_eq!(browser.script("return document.querySelectorAll('#queue tr').length;"), json!(3), "{text}");
    // Opening the array shows its members, each a link.
    browser.script("document.querySelector('#queue tr.array summary').click(); return null;");
    let links = browser.script("return document.querySelectorAll('#queue tr.array li a').length;");
    assert_eq!(links, json!(3));
    // The memory sparkline of GPU 1 draws across its box, not a speck at its right edge.
    let width = browser.script(
        "return document.querySelector('section[data-uuid=\"GPU-m-a100\"] .sparkline polyline').getBBox().width;",
    );
    assert!(width.as_f64().unwrap_or(0.0) > 200.0, "sparkline width {width}");
    let shot = ureq::get(&format!("{}/screenshot", browser.url)).call().unwrap().into_string().unwrap();
    let shot: Value = serde_json::from_str(&shot).unwrap();
    let bytes = base64_decode(shot["value"].as_str().unwrap_or_default());
    let out = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    std::fs::write(&out, bytes).unwrap();
    let console = browser.console();
    let errors: Vec<&Value> = console.iter().filter(|e| e["level"] == "SEVERE").collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
    cancel_all(&home);
}

/// Standard base64 (the screenshot's PNG), padding and unknown characters skipped.
fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let (mut out, mut buffer, mut bits) = (Vec::new(), 0u32, 0u32);
    for byte in text.bytes() {
        let Some(value) = ALPHABET.iter().position(|&c| c == byte) else { continue };
        buffer = (buffer << 6) | value as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    out
}
