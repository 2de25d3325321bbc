//! Progress of a long run on stderr, so stdout keeps only the table or the JSON.
//!
//! On a terminal the line is rewritten in place every second; into a file (a `nohup` run, a CI
//! log) one line is written a minute, so a log shows how far a 90-minute run got without
//! growing by a line per seed. Nothing is written in a run's first second or minute, so short
//! runs, and the tests that read their stderr, see none of it.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One long run's progress line.
pub(super) struct Progress {
    what: &'static str,
    total: u64,
    started: Instant,
    every: Duration,
    terminal: bool,
    /// When the last line was written (`None`: not yet).
    last: Mutex<Option<Instant>>,
}

impl Progress {
    pub(super) fn new(what: &'static str, total: u64) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let every = if terminal { Duration::from_secs(1) } else { Duration::from_secs(60) };
        Progress { what, total, started: Instant::now(), every, terminal, last: Mutex::new(None) }
    }

    /// `done` of the total are finished, `bad` of them with a violation.
    pub(super) fn step(&self, done: u64, bad: u64) {
        let now = Instant::now();
        let Ok(mut last) = self.last.lock() else { return };
        if now.duration_since(last.unwrap_or(self.started)) < self.every {
            return;
        }
        *last = Some(now);
        let line = self.line(done, bad, now.duration_since(self.started));
        let mut err = std::io::stderr().lock();
        // A progress line that cannot be written is not worth stopping the run for.
        let _ = if self.terminal { write!(err, "\r\x1b[2K{line}") } else { writeln!(err, "{line}") };
    }

    /// Clears the terminal's line once the run is over (the result follows on stdout).
    pub(super) fn finish(&self) {
        if self.terminal && self.last.lock().is_ok_and(|last| last.is_some()) {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
        }
    }

    fn line(&self, done: u64, bad: u64, elapsed: Duration) -> String {
        let left = match (done, self.total.saturating_sub(done)) {
            (0, _) | (_, 0) => String::new(),
            (done, rest) => {
                let per = elapsed.as_secs_f64() / done as f64;
                format!(", about {} left", round(Duration::from_secs_f64(per * rest as f64)))
            }
        };
        format!(
            "{}: {done} of {} seeds, {bad} with a violation, {}{left}",
            self.what,
            self.total,
            round(elapsed)
        )
    }
}

/// Whole seconds under ten minutes, whole minutes above: a progress line, not a measurement.
fn round(d: Duration) -> humantime::FormattedDuration {
    let s = d.as_secs();
    humantime::format_duration(Duration::from_secs(if s < 600 { s } else { s / 60 * 60 }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_how_far_and_how_long_is_left() {
        let p = Progress::new("bench faults", 10_000);
        assert_eq!(
            p.line(2_500, 1, Duration::from_secs(900)),
            "bench faults: 2500 of 10000 seeds, 1 with a violation, 15m, about 45m left"
        );
        assert_eq!(
            p.line(0, 0, Duration::from_secs(3)),
            "bench faults: 0 of 10000 seeds, 0 with a violation, 3s"
        );
        assert_eq!(
            p.line(10_000, 0, Duration::from_secs(5_430)),
            "bench faults: 10000 of 10000 seeds, 0 with a violation, 1h 30m"
        );
    }
}
