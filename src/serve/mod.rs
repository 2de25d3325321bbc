//! `carma serve`: a read-only web dashboard over the published view.
//!
//! It reads only what every user may read, `HOME/view/` ([`crate::view`]): never the journal
//! (so never its lock: a dashboard cannot delay a tick), never `private/` (environment
//! values), never a job's logs. Every request is answered from the State last published; the
//! server re-reads the view only when the log's size or time changed ([`view::generation`], one
//! `stat`), and reads each new record once for the hour of GPU history ([`history`]).
//!
//! Only GET and HEAD are answered (anything else: 405). Pages are rendered on the server
//! ([`page`]); a small script, served from the same origin as `/app.js`, polls `/version` and
//! reloads when the state shown has changed. A strict Content-Security-Policy forbids inline
//! script and anything from elsewhere, so even a task name that escaped escaping could not run.
//! Listening on a loopback address (the default), it answers only requests whose `Host` is a
//! loopback name, so a web page elsewhere cannot read it through DNS rebinding.
//!
//! The HTTP server is carma's own, on `std` ([`listen`], [`http`]): a fixed pool of workers,
//! a deadline on reading each request and on writing each answer, one request per connection,
//! and caps on connections in all and per peer ([`limits`]; a local user or a remote address,
//! [`peer`]). tiny_http, used before, answered
//! one request at a time on one thread, wrote without a timeout and gave each connection a
//! thread of its own, and does not expose its sockets to set those bounds.

mod arrays;
mod cards;
pub mod history;
pub mod http;
pub mod limits;
pub mod listen;
pub mod page;
pub mod peer;
mod words;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Mutex, PoisonError};

use crate::error::{Error, Result};
use crate::home::Home;
use crate::journal::State;
use history::History;
use http::{Request, Response};

/// Default `--listen`: this machine only.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:8350";

const CSP: &str = "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// What the server knows, refreshed when the view changes.
struct Site<'a> {
    home: &'a Home,
    generation: Option<(u64, u64, i64, i64)>,
    state: State,
    history: History,
    /// Digest of what the pages show; `/version`'s answer.
    version: String,
    /// The report page, made on demand for the generation it was made at.
    report: Option<((u64, u64, i64, i64), String)>,
    loopback: bool,
    /// What placement assumes a shared attempt with no figure holds (`[sched]
    /// margin-without-figure-mib`), read with the view: the cards count it as placement does.
    assumed_without_figure_mib: u64,
}

/// `[sched] margin-without-figure-mib` from the queue's config; the default where it cannot be
/// read (the tick refuses such a config, and says so, on its own).
fn assumed_without_figure_mib(home: &Home) -> u64 {
    crate::config::Config::load(home)
        .map(|c| c.sched.margin_without_figure_mib)
        .unwrap_or_else(|_| crate::sched::SchedConfig::default().margin_without_figure_mib)
}

/// Serves the dashboard on `listen` until the process is stopped; prints the address.
pub fn run(home: &Home, listen: &str) -> Result<()> {
    home.require_initialized()?;
    let address: SocketAddr = listen.parse().map_err(|_| {
        Error::BadInput(format!("--listen {listen:?} is not an address; give IP:PORT, e.g. {LISTEN_DEFAULT}"))
    })?;
    let listener = TcpListener::bind(address).map_err(|e| {
        Error::BadInput(format!("cannot listen on {address}: {e}; choose another --listen address or port"))
    })?;
    let bound = listener.local_addr().unwrap_or(address);
    println!("carma serve: http://{bound}/ (read-only; Ctrl-C stops)");
    let site = Mutex::new(Site {
        home,
        generation: None,
        state: State::default(),
        history: History::default(),
        version: String::new(),
        report: None,
        loopback: address.ip().is_loopback(),
        assumed_without_figure_mib: assumed_without_figure_mib(home),
    });
    // Pages are made one at a time (they are bounded, and made from one State); only reading
    // requests and writing answers, where a client sets the pace, happen in parallel.
    listen::serve(&listener, &|request| site.lock().unwrap_or_else(PoisonError::into_inner).answer(request));
    Ok(())
}

impl Site<'_> {
    fn answer(&mut self, request: &Request) -> Response {
        if !matches!(request.method.as_str(), "GET" | "HEAD") {
            return text(405, "read-only: only GET and HEAD\n").with_header("Allow", "GET, HEAD");
        }
        if self.loopback && !loopback_host(request) {
            return text(421, "this dashboard answers only to localhost, 127.0.0.1 or [::1]\n");
        }
        if let Err(e) = self.refresh() {
            return text(503, &format!("carma: {e}\n"));
        }
        let path = request.target.split(['?', '#']).next().unwrap_or("/");
        let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
        let names = |uid: u32| crate::access::users::name_of(uid).unwrap_or_else(|| uid.to_string());
        match path {
            "/" => self.page(
                "queue",
                &page::index(&self.state, &self.history, now, &names, self.assumed_without_figure_mib),
            ),
            "/version" => text(200, &format!("{}\n", self.version)),
            "/metrics" => {
                let input = crate::metrics::Input {
                    state: &self.state,
                    tick_duration_us: self.history.tick_duration_us,
                    user_name: &names,
                    assumed_without_figure_mib: self.assumed_without_figure_mib,
                };
                text(200, &crate::metrics::render(&input))
                    .with_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            }
            "/report" => {
                let body = self.report_body();
                self.page("report", &body)
            }
            "/app.js" => {
                text(200, page::SCRIPT).with_header("Content-Type", "text/javascript; charset=utf-8")
            }
            "/style.css" => text(200, page::STYLE).with_header("Content-Type", "text/css; charset=utf-8"),
            _ => match path.strip_prefix("/task/") {
                Some(query) => self.task_page(query, now, &names),
                None => self.not_found("no such page"),
            },
        }
    }

    fn task_page(&self, query: &str, now: u64, names: page::Names) -> Response {
        match crate::view::lookup::find(&self.state, &[], query) {
            Ok(crate::view::lookup::Found::Task(task)) => {
                self.page(&format!("task {}", task.id), &page::task(&self.state, task, now, names))
            }
            Ok(_) => self.not_found("that task is still in the spool; the next tick takes it in"),
            Err(e) => self.not_found(&e.to_string()),
        }
    }

    fn not_found(&self, why: &str) -> Response {
        let body = format!("<h1>Not found</h1>\n<p>{}</p>\n", page::html(why));
        self.page("not found", &body).with_status(404)
    }

    fn page(&self, title: &str, body: &str) -> Response {
        text(200, &page::layout(title, &self.version, body))
            .with_header("Content-Type", "text/html; charset=utf-8")
            .with_header("Content-Security-Policy", CSP)
    }

    /// Re-reads the view when it changed since the last request.
    fn refresh(&mut self) -> Result<()> {
        let generation = crate::view::generation(self.home);
        if generation.is_some() && generation == self.generation {
            return Ok(());
        }
        self.state = crate::view::load(self.home)?;
        self.assumed_without_figure_mib = assumed_without_figure_mib(self.home);
        self.history.refresh(self.home)?;
        self.version = version(&self.state);
        self.generation = generation;
        Ok(())
    }

    /// The report's figure over the published log, made once per generation.
    fn report_body(&mut self) -> String {
        let Some(generation) = self.generation else { return "<p>Nothing published yet.</p>".into() };
        if let Some((made, body)) = &self.report
            && *made == generation
        {
            return body.clone();
        }
        let body = match crate::report::analyze(self.home.root(), "queue", true) {
            Ok(report) => {
                let summary = format!(
                    "{} tasks: {} finished, {} failed, {} cancelled, {} unfinished; {} out-of-memory crashes",
                    report.tasks,
                    report.finished,
                    report.failed,
                    report.cancelled,
                    report.unfinished,
                    report.oom_crashes
                );
                page::report(&crate::report::svg::timeseries(&report), &summary)
            }
            Err(e) => format!("<p>No report: {}</p>", page::html(&e.to_string())),
        };
        self.report = Some((generation, body.clone()));
        body
    }
}

/// A digest of what the pages show: the tasks' states, reasons and attempts, and each GPU's
/// memory (to 256 MiB), SM activity (to 5%) and state, and its MIG instances' memory. A tick that changes none of them
/// leaves it, so an idle queue's page stays put.
pub fn version(state: &State) -> String {
    let mut hasher = DefaultHasher::new();
    for task in state.tasks.values() {
        (task.id.as_str(), task.status().as_str(), task.pending_reason(), task.attempts.len(), task.held())
            .hash(&mut hasher);
    }
    for gpu in state.gpus.values() {
        gpu.uuid.hash(&mut hasher);
        if let Some(sample) = &gpu.last {
            (
                sample.memory_used_mib / 256,
                sample.sm_active.map(|sm| (sm * 20.0).round() as i32),
                sample.state_word(),
            )
                .hash(&mut hasher);
            for instance in &sample.mig.instances {
                (&instance.uuid, instance.memory_used_mib / 256).hash(&mut hasher);
            }
        }
    }
    format!("{:016x}", hasher.finish())
}

/// Whether the request's `Host` names this machine's loopback (any port).
fn loopback_host(request: &Request) -> bool {
    request.host.as_deref().is_some_and(loopback_name)
}

/// Whether a `Host` header's value is `localhost`, `127.0.0.1` or `[::1]`, with any port.
fn loopback_name(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    matches!(name, "localhost" | "127.0.0.1" | "::1")
}

fn text(status: u16, body: &str) -> Response {
    Response::text(status, body)
}

#[cfg(test)]
mod tests;
