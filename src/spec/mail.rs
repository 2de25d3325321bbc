//! Which mails a task asks for: sbatch's `--mail-type`.
//!
//! The spec keeps the types as a small set; its canonical text (`BEGIN,END,TIME_LIMIT_80`)
//! is what the spool file and the journal carry. No type given means END, carma's behaviour
//! before `--mail-type` existed, so `--mail-user` alone still mails once at the end.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One notice a task may be mailed, as sbatch names it (ALL and NONE are sets, not kinds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum MailKind {
    /// The first launch.
    Begin,
    /// Any end.
    End,
    /// An end as Failed.
    Fail,
    /// An out-of-memory relaunch, or a requeue (`carma requeue`, the requeue exit code).
    Requeue,
    /// The time limit reached (100 %).
    TimeLimit,
    /// 90 % of the time limit reached.
    TimeLimit90,
    /// 80 % of the time limit reached.
    TimeLimit80,
    /// 50 % of the time limit reached.
    TimeLimit50,
    /// Mail each array member as a task of its own, instead of one summary per array.
    ArrayTasks,
}

/// Every kind with its name, in canonical order.
const KINDS: [(MailKind, &str); 9] = [
    (MailKind::Begin, "BEGIN"),
    (MailKind::End, "END"),
    (MailKind::Fail, "FAIL"),
    (MailKind::Requeue, "REQUEUE"),
    (MailKind::TimeLimit, "TIME_LIMIT"),
    (MailKind::TimeLimit90, "TIME_LIMIT_90"),
    (MailKind::TimeLimit80, "TIME_LIMIT_80"),
    (MailKind::TimeLimit50, "TIME_LIMIT_50"),
    (MailKind::ArrayTasks, "ARRAY_TASKS"),
];

/// The time-limit kinds with the share of the limit, in percent, at which each is sent.
pub const TIME_LIMIT_KINDS: [(MailKind, u64); 4] = [
    (MailKind::TimeLimit50, 50),
    (MailKind::TimeLimit80, 80),
    (MailKind::TimeLimit90, 90),
    (MailKind::TimeLimit, 100),
];

/// What the error names as valid.
const VALID: &str = "NONE, BEGIN, END, FAIL, REQUEUE, ALL, TIME_LIMIT, TIME_LIMIT_90, TIME_LIMIT_80, TIME_LIMIT_50, ARRAY_TASKS";

/// NONE given: no mail at all, whatever else the list says.
const NONE_BIT: u16 = 1 << 15;

impl MailKind {
    /// As sbatch and the journal's Notified records name it.
    pub fn name(self) -> &'static str {
        KINDS.iter().find(|(k, _)| *k == self).map_or("", |(_, name)| name)
    }

    /// The kind a journaled name stands for.
    pub fn from_name(name: &str) -> Option<MailKind> {
        KINDS.iter().find(|(_, n)| *n == name).map(|(k, _)| *k)
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// A task's `--mail-type`: a set of kinds; empty when none was given (END by default).
/// Serialized as its canonical text, so `--json` readers see names, not bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MailTypes(u16);

impl Serialize for MailTypes {
    fn serialize<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(&self.render())
    }
}

impl<'de> Deserialize<'de> for MailTypes {
    fn deserialize<D: Deserializer<'de>>(input: D) -> Result<Self, D::Error> {
        // Only carma's own canonical text is stored; empty (the default) reads as none given.
        let text = String::deserialize(input)?;
        Ok(if text.is_empty() {
            MailTypes::default()
        } else {
            MailTypes::parse(&text).map_err(serde::de::Error::custom)?
        })
    }
}

impl MailTypes {
    /// Parses sbatch's comma-separated list, case-insensitively; ALL is BEGIN, END, FAIL and
    /// REQUEUE (as Slurm's, without the time-limit kinds).
    pub fn parse(text: &str) -> Result<MailTypes, String> {
        let mut bits = 0u16;
        for word in text.split(',').map(str::trim) {
            let upper = word.to_ascii_uppercase();
            bits |= match upper.as_str() {
                "NONE" => NONE_BIT,
                "ALL" => [MailKind::Begin, MailKind::End, MailKind::Fail, MailKind::Requeue]
                    .iter()
                    .fold(0, |b, k| b | k.bit()),
                _ => MailKind::from_name(&upper).map(MailKind::bit).ok_or_else(|| {
                    format!("unknown mail type {word:?}; give one or more of {VALID}, joined by commas")
                })?,
            };
        }
        Ok(if bits & NONE_BIT != 0 { MailTypes(NONE_BIT) } else { MailTypes(bits) })
    }

    /// Whether a type was given at all.
    pub fn is_given(self) -> bool {
        self.0 != 0
    }

    /// Whether the task asks for mails of `kind` (END when no type was given).
    pub fn wants(self, kind: MailKind) -> bool {
        if self.0 == 0 { kind == MailKind::End } else { self.0 & kind.bit() != 0 }
    }

    /// The canonical text (`BEGIN,END`), `NONE`, or empty when no type was given.
    pub fn render(self) -> String {
        if self.0 & NONE_BIT != 0 {
            return "NONE".into();
        }
        let names: Vec<&str> = KINDS.iter().filter(|(k, _)| self.0 & k.bit() != 0).map(|(_, n)| *n).collect();
        names.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: sbatch's words parse, ALL and NONE are sets, the default is END, a bad word is
    /// named with the valid ones, and the canonical text parses back to the same set.
    #[test]
    fn mail_types_parse_as_sbatch_and_round_trip() {
        let all = MailTypes::parse("all,time_limit_80").unwrap();
        assert_eq!(all.render(), "BEGIN,END,FAIL,REQUEUE,TIME_LIMIT_80");
        assert!(!all.wants(MailKind::ArrayTasks) && all.wants(MailKind::TimeLimit80));
        assert_eq!(MailTypes::parse(&all.render()).unwrap(), all);
        let none = MailTypes::parse("NONE,END").unwrap();
        assert_eq!(none.render(), "NONE");
        assert!(!none.wants(MailKind::End) && none.is_given());
        let default = MailTypes::default();
        assert!(default.wants(MailKind::End) && !default.wants(MailKind::Fail) && !default.is_given());
        assert_eq!(default.render(), "");
        assert_eq!(
            MailTypes::parse("END,BEGN").unwrap_err(),
            "unknown mail type \"BEGN\"; give one or more of NONE, BEGIN, END, FAIL, REQUEUE, ALL, TIME_LIMIT, TIME_LIMIT_90, TIME_LIMIT_80, TIME_LIMIT_50, ARRAY_TASKS, joined by commas"
        );
        assert!(MailTypes::parse("").is_err());
    }
}
