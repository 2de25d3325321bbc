//! Times in reasons, as people read them: the local clock, with the date only when it is not
//! today's. A leaf: `gate` (BeginTime) and `reservation` both word their times with it.

/// `14:30`, `14:30:05`, or `2026-12-03 09:00` when not on the day of `now_ms`: local time.
pub(super) fn clock_text(at_ms: u64, now_ms: u64) -> String {
    let at = |ms: u64| {
        let seconds = libc::time_t::try_from(ms / 1000).unwrap_or(0);
        // SAFETY: localtime_r writes only into the tm we own; zeroed is a valid tm.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        unsafe { libc::localtime_r(&seconds, &mut tm) };
        (tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec)
    };
    let (begin, now) = (at(at_ms), at(now_ms));
    let clock = match begin.5 {
        0 => format!("{:02}:{:02}", begin.3, begin.4),
        s => format!("{:02}:{:02}:{s:02}", begin.3, begin.4),
    };
    let day = if begin.0 == now.0 && begin.1 == now.1 && begin.2 == now.2 {
        String::new()
    } else {
        format!("{}-{:02}-{:02} ", begin.0, begin.1, begin.2)
    };
    format!("{day}{clock}")
}
