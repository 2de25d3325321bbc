//! `carma serve` keeps serving everyone while one client misbehaves (issue 32, item 3): a real
//! queue with fake GPUs, real ticks, the real server on a free port of 127.0.0.1, and hostile
//! clients written on raw sockets.
//!
//! - A client that pipelines a thousand GETs and never reads its answers delays nobody: an
//!   honest GET meanwhile is answered (each connection gets one answer, then is closed).
//! - Connections that send nothing hold at most the per-peer cap of workers: past it, the same
//!   local user (the socket's owner, though every local user connects from 127.0.0.1) gets a
//!   503 with `Retry-After` at once, and another user is still served.
//! - A task whose command is most of a journal record renders a page of bounded size that says
//!   what it cut.
//!
//! Every loop is bounded in count and in time; every socket is on the loopback.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::FromRawFd;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use carma::serve::limits::{CONNECTIONS_PER_PEER_MAX, PAGE_BYTES_MAX, REQUEST_HEAD_TIMEOUT};
use common::TestHome;
use common::cluster::TWO_A100;
use common::skip::{Need, skip};

/// A generous bound for an honest answer: no speed is measured, only that it came.
const HONEST_WITHIN: Duration = Duration::from_secs(5);
/// A uid no one uses, for the hostile local user (sockets need no account).
const HOSTILE_UID: u32 = 54_321;

/// A child process killed when the test ends, passing or not.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A queue with fake GPUs and `carma serve` on a free port of 127.0.0.1; returns its port.
fn serving(home: &TestHome) -> (Killed, u16) {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let server = home
        .cmd()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn carma serve");
    let server = Killed(server);
    let started = Instant::now();
    while honest_get(port, "/version").is_err() {
        assert!(started.elapsed() < Duration::from_secs(20), "carma serve never answered");
        std::thread::sleep(Duration::from_millis(50));
    }
    (server, port)
}

/// GET `path` as an honest client would, with a bound on the whole exchange.
fn honest_get(port: u16, path: &str) -> Result<(u16, String), Box<ureq::Error>> {
    let agent = ureq::AgentBuilder::new().timeout(HONEST_WITHIN).build();
    match agent.get(&format!("http://127.0.0.1:{port}{path}")).call() {
        Ok(response) => Ok((response.status(), response.into_string().unwrap_or_default())),
        Err(ureq::Error::Status(code, response)) => {
            let retry = response.header("Retry-After").map(str::to_owned);
            let body = response.into_string().unwrap_or_default();
            Ok((code, format!("{body}Retry-After: {}", retry.unwrap_or_default())))
        }
        Err(e) => Err(Box::new(e)),
    }
}

/// A task whose command holds 700,000 `<` (about 2.8 MB once escaped for HTML); its id.
fn submit_huge(home: &TestHome) -> String {
    let word = "<".repeat(100_000);
    let mut args = vec!["submit", "--parsable", "--name", "huge", "--", "echo"];
    args.extend(std::iter::repeat_n(word.as_str(), 7));
    let id = home.ok(&args).trim().to_string();
    assert!(home.run(&["tick"]).status.success());
    id
}

/// What a raw socket reads until the server closes it or `limit` passes.
fn read_all(stream: &mut TcpStream, limit: Duration) -> String {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut bytes = Vec::new();
    let _ = stream.take(1 << 20).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn an_honest_get_is_answered_while_a_client_pipelines_and_never_reads() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let id = submit_huge(&home);
    let (_server, port) = serving(&home);

    // The hostile client: a thousand GETs of the largest page in one write, never read.
    let mut hostile = TcpStream::connect(("127.0.0.1", port)).unwrap();
    hostile.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    let request = format!("GET /task/{id} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    let _ = hostile.write_all(request.repeat(1000).as_bytes());
    std::thread::sleep(Duration::from_millis(300));

    for path in ["/version", "/", &format!("/task/{id}")] {
        let started = Instant::now();
        match honest_get(port, path) {
            Ok((status, _)) => assert_eq!(status, 200, "{path}"),
            Err(e) => panic!("an honest GET {path} was not answered while one client never reads: {e}"),
        }
        assert!(started.elapsed() < HONEST_WITHIN, "{path} took {:?}", started.elapsed());
    }
    drop(hostile);
}

#[test]
fn connections_past_the_per_user_cap_get_503_and_other_users_are_served() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return skip(Need::Root, "giving a socket to another uid needs root");
    }
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let (_server, port) = serving(&home);
    // The connections that asked whether it was up are gone.
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();

    // A hostile local user holds the cap's worth of connections and sends nothing.
    let silent: Vec<TcpStream> =
        (0..CONNECTIONS_PER_PEER_MAX).map(|_| connect_as(HOSTILE_UID, port)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let refusal = format!(
        "carma serve: {CONNECTIONS_PER_PEER_MAX} connections of user {HOSTILE_UID} are open, the most one user may hold; retry in a few seconds\n"
    );
    for _ in 0..2 {
        let mut extra = connect_as(HOSTILE_UID, port);
        let answer = read_all(&mut extra, Duration::from_secs(2));
        assert!(answer.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{answer:?}");
        assert!(answer.contains("\r\nRetry-After: 5\r\n"), "{answer:?}");
        assert!(answer.ends_with(&format!("\r\n\r\n{refusal}")), "{answer:?}");
    }
    // Another user on the same address is served meanwhile.
    let (status, body) = honest_get(port, "/version").expect("an answer, not a hang");
    assert_eq!(status, 200, "{body}");
    assert!(started.elapsed() < REQUEST_HEAD_TIMEOUT, "the silent connections were still held");

    // Once they go, the hostile user is served again.
    drop(silent);
    let mut tries = 0;
    loop {
        let mut again = connect_as(HOSTILE_UID, port);
        again
            .write_all(format!("GET /version HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").as_bytes())
            .unwrap();
        let answer = read_all(&mut again, HONEST_WITHIN);
        if answer.starts_with("HTTP/1.1 200 OK\r\n") {
            assert!(answer.contains("\r\nConnection: close\r\n"), "{answer:?}");
            break;
        }
        tries += 1;
        assert!(tries < 50, "still refused after the silent connections closed: {answer:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_connection_that_sends_nothing_is_closed_after_the_head_timeout() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let (_server, port) = serving(&home);
    let mut silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let started = Instant::now();
    let answer = read_all(&mut silent, REQUEST_HEAD_TIMEOUT * 3);
    assert!(started.elapsed() < REQUEST_HEAD_TIMEOUT * 2, "held for {:?}", started.elapsed());
    assert!(answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{answer:?}");
}

#[test]
fn a_huge_command_renders_a_capped_page_that_says_it_was_cut() {
    let home = TestHome::with_fake_gpus(TWO_A100, "magm");
    let id = submit_huge(&home);
    let (_server, port) = serving(&home);
    for path in [format!("/task/{id}"), "/".to_string()] {
        let (status, page) = honest_get(port, &path).expect("the page");
        assert_eq!(status, 200, "{path}");
        assert!(page.len() <= PAGE_BYTES_MAX, "{path}: {} bytes", page.len());
        assert!(page.contains("</html>"), "{path}: the page is whole");
    }
    let (_, page) = honest_get(port, &format!("/task/{id}")).unwrap();
    assert!(page.contains("<td>echo &#39;&lt;&lt;&lt;"), "{}", page.get(..4000).unwrap_or(&page));
    assert!(page.contains("… (cut: 667.6 KiB more)</td>"), "{}", page.get(..4000).unwrap_or(&page));
}

/// A TCP connection to 127.0.0.1:`port` whose socket `uid` owns, as if that user had opened it
/// (root gives the socket away before connecting; the kernel's socket table then names `uid`).
fn connect_as(uid: u32, port: u16) -> TcpStream {
    let size = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let to = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(Ipv4Addr::LOCALHOST).to_be() },
        sin_zero: [0; 8],
    };
    // SAFETY: plain socket calls on a descriptor this function owns and hands to the stream.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let stream = TcpStream::from_raw_fd(fd);
        assert_eq!(libc::fchown(fd, uid, u32::MAX), 0, "fchown: {}", std::io::Error::last_os_error());
        assert_eq!(
            libc::connect(fd, (&raw const to).cast(), size),
            0,
            "connect: {}",
            std::io::Error::last_os_error()
        );
        stream
    }
}
