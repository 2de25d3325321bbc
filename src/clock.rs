//! Time as an input: the real tick reads the wall clock, the simulator a virtual one.

/// A source of "now", in Unix milliseconds.
pub trait Clock {
    /// The current time, Unix ms.
    fn now_ms(&self) -> u64;
}

/// The wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        let since_epoch =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
    }
}

/// Renders Unix milliseconds as RFC 3339 UTC with seconds, for tables and JSON.
pub fn format_ms(unix_ms: u64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(unix_ms);
    humantime::format_rfc3339_seconds(time).to_string()
}
