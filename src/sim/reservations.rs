//! Administrators' GPU reservations in a simulation (`carma simulate --reservation`).
//!
//! The simulator runs the real tick, so a reservation is honoured exactly as on a server once
//! it is in the journal: the run journals one `ReservationCreated` per reservation before its
//! first tick, with the window counted from the trace's start. The simulated users of a
//! reservation submit into it: a row of one of its users that arrives before its window ends
//! names it (`--reservation`), and waits for the window; everyone else's rows name none and
//! are kept off its GPUs as the scheduler's rules say.

use crate::error::{Error, Result};
use crate::journal::{Event, Record};
use crate::spec::TaskSpec;

/// One reservation of a simulation: `NAME:GPUS@START+DURATION:USER,USER`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimReservation {
    /// Its name.
    pub name: String,
    /// How many GPUs it holds.
    pub gpus: u32,
    /// Start of the window after the trace's start, ms.
    pub start_offset_ms: u64,
    /// Length of the window, ms.
    pub duration_ms: u64,
    /// The trace users (the trace's `user` column) whose rows run in it.
    pub users: Vec<String>,
}

impl SimReservation {
    /// Parses `paper:2@1h+2h:alice,bob`: 2 GPUs from 1 hour after the trace's start, for 2
    /// hours, for the trace users alice and bob.
    pub fn parse(text: &str) -> std::result::Result<SimReservation, String> {
        let hint = "use NAME:GPUS@START+DURATION:USERS, e.g. paper:2@1h+2h:alice,bob";
        let bad = || format!("reservation {:?} is not one; {hint}", crate::text::escape(text));
        let (name, rest) = text.split_once(':').ok_or_else(bad)?;
        let (gpus, rest) = rest.split_once('@').ok_or_else(bad)?;
        let (window, users) = rest.split_once(':').ok_or_else(bad)?;
        let (start, duration) = window.split_once('+').ok_or_else(bad)?;
        let name = crate::spec::extras::validate_reservation_name(name)?;
        let gpus: u32 = gpus.parse().ok().filter(|&n| n >= 1).ok_or_else(bad)?;
        let ms = |t: &str| humantime::parse_duration(t).ok().and_then(|d| u64::try_from(d.as_millis()).ok());
        let start_offset_ms = ms(start).ok_or_else(bad)?;
        let duration_ms = ms(duration).filter(|&d| d > 0).ok_or_else(bad)?;
        let users: Vec<String> = users.split(',').map(str::to_string).collect();
        if users.iter().any(|u| !crate::access::users::is_user_name(u)) {
            return Err(bad());
        }
        Ok(SimReservation { name, gpus, start_offset_ms, duration_ms, users })
    }

    /// The record that creates it in a journal whose clock starts at `epoch_ms`; `uid_of`
    /// gives a trace user's simulated uid (`None`: not a user of the trace).
    pub fn record(&self, epoch_ms: u64, uid_of: impl Fn(&str) -> Option<u32>) -> Result<Record> {
        let users = self
            .users
            .iter()
            .map(|name| {
                uid_of(name).ok_or_else(|| {
                    Error::BadInput(format!(
                        "reservation \"{}\" names user {name:?}, who submits nothing in the trace; use the trace's user column",
                        self.name
                    ))
                })
            })
            .collect::<Result<Vec<u32>>>()?;
        let start_ms = epoch_ms.saturating_add(self.start_offset_ms);
        let event = Event::ReservationCreated {
            name: self.name.clone(),
            start_ms,
            end_ms: start_ms.saturating_add(self.duration_ms),
            users,
            gpu_count: self.gpus,
            gpus: Vec::new(),
            by_uid: 0,
        };
        Ok(Record { time_ms: epoch_ms, event })
    }
}

/// The next start or end of a window after `now_ms` (the clock starting at `epoch_ms`): the
/// simulator must tick there, since waiting tasks may start or be kept off then, though
/// nothing in the model changes.
pub fn next_boundary(reservations: &[SimReservation], epoch_ms: u64, now_ms: u64) -> Option<u64> {
    reservations
        .iter()
        .flat_map(|r| {
            let start = epoch_ms.saturating_add(r.start_offset_ms);
            [start, start.saturating_add(r.duration_ms)]
        })
        .filter(|&t| t > now_ms)
        .min()
}

/// Names in `spec` the first reservation of `reservations` that `user` is in and whose window
/// has not ended by the row's arrival (`offset_ms` after the trace's start).
pub fn name_in(spec: &mut TaskSpec, reservations: &[SimReservation], user: Option<&str>, offset_ms: u64) {
    let Some(user) = user else { return };
    spec.reservation = reservations
        .iter()
        .find(|r| {
            r.users.iter().any(|u| u == user) && offset_ms < r.start_offset_ms.saturating_add(r.duration_ms)
        })
        .map(|r| r.name.clone());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_is_parsed_and_refused_with_the_form() {
        let parsed = SimReservation::parse("paper:2@1h+2h:alice,bob").expect("valid");
        assert_eq!(parsed.gpus, 2);
        assert_eq!((parsed.start_offset_ms, parsed.duration_ms), (3_600_000, 7_200_000));
        assert_eq!(parsed.users, ["alice", "bob"]);
        assert_eq!(
            SimReservation::parse("paper:0@1h+2h:alice").unwrap_err(),
            "reservation \"paper:0@1h+2h:alice\" is not one; use NAME:GPUS@START+DURATION:USERS, e.g. paper:2@1h+2h:alice,bob"
        );
        assert!(SimReservation::parse("paper:2@1h:alice").is_err());
    }
}
