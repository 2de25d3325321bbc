//! When a task may start and what it is told before its time limit: Slurm's `--begin` and
//! `--signal=[B:]SIG@SECONDS`.
//!
//! The spec keeps `signal` in its canonical text (`USR1@5`, `B:TERM@60`), parsed again where
//! the supervisor's plan is made, and `begin` as an absolute time in ms since the epoch,
//! whole seconds, so the spool's canonical form (`begin = "2026-11-25T14:30:00Z"`) validates
//! back to the same value.
//!
//! carma runs no batch shell: the job's first process (the program, or a job script's
//! interpreter) stands in for it. `B:SIG` signals that process only; a bare `SIG` signals
//! every process of the attempt, as Slurm signals every step.

/// Longest warning accepted, in seconds (Slurm's own maximum).
pub const SIGNAL_SECONDS_MAX: u32 = 65_535;

/// Signals a job may ask for, by name without `SIG`, with their Linux numbers.
const SIGNALS: [(&str, i32); 9] = [
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("CONT", libc::SIGCONT),
    ("URG", libc::SIGURG),
];

/// A parsed `--signal`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarnSignal {
    /// The signal's number.
    pub number: i32,
    /// Seconds before the time limit.
    pub seconds: u32,
    /// `B:`: the job's first process only.
    pub batch_only: bool,
}

/// Parses `[B:]SIG[@SECONDS]` (Slurm's form; SIG a name with or without `SIG`, or a number;
/// SECONDS 60 when left out, as Slurm's) into its canonical text.
pub fn parse_signal(text: &str) -> Result<String, String> {
    let warn = WarnSignal::parse(text)?;
    let name = SIGNALS.iter().find(|(_, n)| *n == warn.number).map_or("", |(name, _)| name);
    let batch = if warn.batch_only { "B:" } else { "" };
    Ok(format!("{batch}{name}@{}", warn.seconds))
}

impl WarnSignal {
    /// Parses the text form of [`parse_signal`].
    pub fn parse(text: &str) -> Result<WarnSignal, String> {
        let hint = "use [B:]SIG@SECONDS, e.g. USR1@60 or B:TERM@120";
        let trimmed = text.trim();
        let (batch_only, rest) = match trimmed.strip_prefix("B:") {
            Some(rest) => (true, rest),
            None => (false, trimmed),
        };
        let (name, seconds) = rest.split_once('@').unwrap_or((rest, "60"));
        let upper = name.to_ascii_uppercase();
        let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
        let number = match bare.parse::<i32>() {
            Ok(number) => SIGNALS.iter().find(|(_, n)| *n == number).map(|(_, n)| *n),
            Err(_) => SIGNALS.iter().find(|(known, _)| *known == bare).map(|(_, n)| *n),
        };
        let Some(number) = number else {
            let names: Vec<&str> = SIGNALS.iter().map(|(name, _)| *name).collect();
            return Err(format!("signal {text:?}: unknown signal {name:?}; use one of {}", names.join(", ")));
        };
        let seconds =
            seconds.parse::<u32>().ok().filter(|s| (1..=SIGNAL_SECONDS_MAX).contains(s)).ok_or_else(
                || format!("signal {text:?}: {seconds:?} is not 1 to {SIGNAL_SECONDS_MAX} seconds; {hint}"),
            )?;
        Ok(WarnSignal { number, seconds, batch_only })
    }
}

/// The warning must come before the limit, or it would never be sent.
pub fn check_signal_fits(signal: &str, time_limit_ms: Option<u64>) -> Result<(), String> {
    let warn = WarnSignal::parse(signal)?;
    if let Some(limit) = time_limit_ms
        && u64::from(warn.seconds) * 1000 >= limit
    {
        return Err(format!(
            "signal {signal:?} comes {} s before a time limit of {}; give a time limit longer than that or fewer seconds",
            warn.seconds,
            super::render_ms(limit)
        ));
    }
    Ok(())
}

/// Parses `--begin`: `now+DURATION` (`now+1hour`, `now+30s`), `HH:MM[:SS]` (the next such
/// local time), `YYYY-MM-DD[THH:MM[:SS]]` (local time) or RFC 3339 with `Z` (the canonical
/// form). Returns ms since the epoch, whole seconds.
pub fn parse_begin(text: &str, now_ms: u64) -> Result<u64, String> {
    let hint = "use now+1hour, now+30s, 14:30, 2026-12-01T09:00 or 2026-12-01";
    let trimmed = text.trim();
    let now_s = now_ms / 1000;
    let seconds = if let Some(offset) = trimmed.strip_prefix("now") {
        let offset = offset.trim();
        if offset.is_empty() {
            now_s
        } else {
            let duration = offset
                .strip_prefix('+')
                .and_then(|d| humantime::parse_duration(d.trim()).ok())
                .ok_or_else(|| format!("begin {text:?} is not a time; {hint}"))?;
            now_s.saturating_add(duration.as_secs())
        }
    } else if trimmed.ends_with('Z') {
        let time =
            humantime::parse_rfc3339(trimmed).map_err(|_| format!("begin {text:?} is not a time; {hint}"))?;
        time.duration_since(std::time::UNIX_EPOCH)
            .map_err(|_| format!("begin {text:?} is before 1970; {hint}"))?
            .as_secs()
    } else {
        local_time(trimmed, now_s).ok_or_else(|| format!("begin {text:?} is not a time; {hint}"))?
    };
    if seconds > now_s + 366 * 24 * 3600 {
        return Err(format!("begin {text:?} is more than a year away; {hint}"));
    }
    Ok(seconds * 1000)
}

/// A time already past, in `--begin`'s local forms: `HH:MM[:SS]` (the latest such time, today
/// or yesterday) or `YYYY-MM-DD[THH:MM[:SS]]`. Returns ms since the epoch, whole seconds; `None`
/// when `text` is neither.
pub fn parse_local_past(text: &str, now_ms: u64) -> Option<u64> {
    let now_s = now_ms / 1000;
    let text = text.trim();
    let at = local_time(text, now_s)?;
    // A bare clock time is the next one for `--begin`; the one before for a past.
    let at = if !text.contains('-') && at > now_s { at.saturating_sub(24 * 3600) } else { at };
    Some(at * 1000)
}

/// The canonical text of a begin time: RFC 3339 in UTC.
pub fn render_begin(begin_ms: u64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(begin_ms / 1000);
    humantime::format_rfc3339_seconds(time).to_string()
}

/// `HH:MM[:SS]` (today, or tomorrow when that has passed) or `YYYY-MM-DD[THH:MM[:SS]]`, in
/// the local time zone (`mktime`).
fn local_time(text: &str, now_s: u64) -> Option<u64> {
    let numbers = |part: &str, sep: char| -> Option<Vec<i32>> {
        part.split(sep).map(|n| (!n.is_empty() && n.len() <= 4).then(|| n.parse().ok()).flatten()).collect()
    };
    let (date, clock) = match text.split_once('T') {
        Some((date, clock)) => (Some(date), Some(clock)),
        None if text.contains('-') => (Some(text), None),
        None => (None, Some(text)),
    };
    let hms = match clock.map(|c| numbers(c, ':')) {
        None => vec![0, 0, 0],
        Some(Some(v)) if (2..=3).contains(&v.len()) => v,
        _ => return None,
    };
    let (hour, minute, second) = (hms[0], hms[1], hms.get(2).copied().unwrap_or(0));
    if !(0..24).contains(&hour) || !(0..60).contains(&minute) || !(0..60).contains(&second) {
        return None;
    }
    // SAFETY: localtime_r and mktime write and read only the tm we own; zeroed is a valid tm.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let now = libc::time_t::try_from(now_s).ok()?;
    unsafe { libc::localtime_r(&now, &mut tm) };
    if let Some(date) = date {
        let ymd = numbers(date, '-').filter(|v| v.len() == 3)?;
        if !(1..=12).contains(&ymd[1]) || !(1..=31).contains(&ymd[2]) {
            return None;
        }
        (tm.tm_year, tm.tm_mon, tm.tm_mday) = (ymd[0] - 1900, ymd[1] - 1, ymd[2]);
    }
    (tm.tm_hour, tm.tm_min, tm.tm_sec, tm.tm_isdst) = (hour, minute, second, -1);
    // SAFETY: as above.
    let mut at = u64::try_from(unsafe { libc::mktime(&mut tm) }).ok()?;
    if date.is_none() && at < now_s {
        at += 24 * 3600;
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33, defect 11: `events --since 11:40:20` was refused although `--begin` takes
    /// that form; as a past time it is the latest such local time.
    #[test]
    fn a_clock_time_in_the_past_is_the_latest_one() {
        let now_ms = 1_795_000_000_000;
        let next = parse_begin("11:40:20", now_ms).unwrap();
        let past = parse_local_past("11:40:20", now_ms).unwrap();
        assert!(past <= now_ms && now_ms - past < 86_400_000, "{past} is within the last day of {now_ms}");
        assert_eq!(next - past, 86_400_000, "the next one is a day after the latest one");
        assert_eq!(
            parse_local_past("2026-11-25T20:00", now_ms),
            local_time("2026-11-25T20:00", now_ms / 1000).map(|s| s * 1000)
        );
        assert_eq!(parse_local_past("soon", now_ms), None);
    }

    #[test]
    fn signals_take_slurm_forms() {
        assert_eq!(parse_signal("USR1@5"), Ok("USR1@5".into()));
        assert_eq!(parse_signal("B:sigterm@120"), Ok("B:TERM@120".into()));
        assert_eq!(parse_signal("10@30"), Ok("USR1@30".into()));
        assert_eq!(parse_signal("USR2"), Ok("USR2@60".into()));
        assert_eq!(
            parse_signal("KILL@5"),
            Err("signal \"KILL@5\": unknown signal \"KILL\"; use one of HUP, INT, QUIT, USR1, USR2, ALRM, TERM, CONT, URG".into())
        );
        assert_eq!(
            parse_signal("USR1@0"),
            Err("signal \"USR1@0\": \"0\" is not 1 to 65535 seconds; use [B:]SIG@SECONDS, e.g. USR1@60 or B:TERM@120".into())
        );
        let warn = WarnSignal::parse("B:USR1@5").unwrap();
        assert_eq!(warn, WarnSignal { number: libc::SIGUSR1, seconds: 5, batch_only: true });
    }

    #[test]
    fn a_warning_must_come_before_the_limit() {
        assert!(check_signal_fits("USR1@5", Some(15_000)).is_ok());
        assert!(check_signal_fits("USR1@5", None).is_ok());
        assert_eq!(
            check_signal_fits("USR1@60", Some(60_000)),
            Err("signal \"USR1@60\" comes 60 s before a time limit of 1m; give a time limit longer than that or fewer seconds".into())
        );
    }

    #[test]
    fn begin_times_resolve_against_now() {
        let now = 1_800_000_000_500;
        assert_eq!(parse_begin("now+1hour", now), Ok(1_800_003_600_000));
        assert_eq!(parse_begin("now+30s", now), Ok(1_800_000_030_000));
        assert_eq!(render_begin(1_800_000_000_999), "2027-01-15T08:00:00Z");
        assert_eq!(parse_begin("2027-01-15T08:00:00Z", now), Ok(1_800_000_000_000));
        let at = parse_begin("12:00", now).unwrap();
        assert!((1_800_000_000_000..1_800_000_000_000 + 86_400_000).contains(&at), "{at}");
        assert_eq!(
            parse_begin("tomorrow", now),
            Err("begin \"tomorrow\" is not a time; use now+1hour, now+30s, 14:30, 2026-12-01T09:00 or 2026-12-01".into())
        );
        assert_eq!(
            parse_begin("now+2years", now),
            Err("begin \"now+2years\" is more than a year away; use now+1hour, now+30s, 14:30, 2026-12-01T09:00 or 2026-12-01".into())
        );
    }
}
