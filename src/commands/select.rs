//! Which tasks a verb chooses: `queue`'s filters, which `cancel` shares as scancel has them
//! (`--me`, `--user`, `--state`, `--name`, `--all`).

use crate::access::users;
use crate::error::Error;

/// The squeue codes of ended tasks (TO: Slurm's TIMEOUT, a failure at the time limit).
const ENDED: [&str; 4] = ["CD", "F", "CA", "TO"];

/// What the filters keep.
pub(super) struct Filter {
    /// Ended tasks too (`--all`, or a `--state` that names an ended state).
    pub(super) all: bool,
    users: Option<Vec<u32>>,
    states: Option<Vec<&'static str>>,
    name: Option<String>,
}

impl Filter {
    /// The filter of `--all`, `--me`, `--user`, `--state` and `--name` (queue's, and cancel's
    /// as scancel has them).
    pub(super) fn new(
        all: bool,
        me: bool,
        user: Option<&str>,
        state: Option<&str>,
        name: Option<String>,
    ) -> Result<Filter, Error> {
        let mut users = None;
        if me {
            users = Some(vec![crate::access::uid::effective()]);
        }
        if let Some(names) = user {
            let mut uids = users.unwrap_or_default();
            for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                let uid = users::uid_of(name).or_else(|| name.parse().ok()).ok_or_else(|| {
                    Error::BadInput(format!("--user {name}: no such user; give a login name or a uid"))
                })?;
                uids.push(uid);
            }
            users = Some(uids);
        }
        let states = state.map(parse_states).transpose()?;
        // Asking for ended states shows them without --all.
        let all = all || states.as_ref().is_some_and(|s| s.iter().any(|s| ENDED.contains(s)));
        Ok(Filter { all, users, states, name })
    }

    /// Whether a task in state `code` (squeue's), of `owner`, named `name`, is kept.
    pub(super) fn keeps(&self, code: &str, owner: u32, name: &str) -> bool {
        let ended = ENDED.contains(&code);
        // A submission still in the spool is pending, as sbatch's job is from the moment
        // sbatch returns: `--state pending` right after submit finds it.
        let pending_in_spool = code == "SU" && self.states.as_ref().is_some_and(|s| s.contains(&"PD"));
        (self.all || !ended)
            && self.users.as_ref().is_none_or(|u| u.contains(&owner))
            && (pending_in_spool || self.states.as_ref().is_none_or(|s| s.contains(&code)))
            && self.name.as_deref().is_none_or(|pattern| matches_name(pattern, name))
    }
}

/// `pending,running` or Slurm's codes `PD,R` into state codes.
fn parse_states(text: &str) -> Result<Vec<&'static str>, Error> {
    let known: [(&str, &str); 9] = [
        ("submitted", "SU"),
        ("pending", "PD"),
        ("placed", "CF"),
        ("running", "R"),
        ("suspended", "S"),
        ("finished", "CD"),
        ("failed", "F"),
        ("cancelled", "CA"),
        ("timeout", "TO"),
    ];
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            let lower = s.to_ascii_lowercase();
            known
                .iter()
                .find(|(word, code)| *word == lower || code.eq_ignore_ascii_case(s) || (lower == "completed" && *code == "CD"))
                .map(|(_, code)| *code)
                .ok_or_else(|| {
                    Error::BadInput(format!(
                        "--state {s}: unknown state; use submitted, pending, placed, running, suspended, finished, failed, cancelled or timeout (or SU, PD, CF, R, S, CD, F, CA, TO)"
                    ))
                })
        })
        .collect()
}

/// A name pattern: `*` and `?` globs, else a substring.
fn matches_name(pattern: &str, name: &str) -> bool {
    if !pattern.contains(['*', '?']) {
        return name.contains(pattern);
    }
    fn glob(p: &[char], n: &[char]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some('*'), _) => glob(&p[1..], n) || (!n.is_empty() && glob(p, &n[1..])),
            (Some('?'), Some(_)) => glob(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => glob(&p[1..], &n[1..]),
            _ => false,
        }
    }
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    glob(&p, &n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_by_substring_or_glob() {
        assert!(matches_name("resnet", "resnet50-imagenet"));
        assert!(matches_name("res*net", "resnet"));
        assert!(matches_name("lr-?", "lr-3"));
        assert!(!matches_name("lr-?", "lr-10"));
        assert!(!matches_name("bert*", "resnet"));
    }

    /// Goal: `--state pending` keeps a submission still in the spool (as sbatch's job is
    /// PENDING at once); `--state submitted` keeps only those, and ended states stay hidden.
    #[test]
    fn pending_includes_what_is_still_in_the_spool() {
        let pending = Filter::new(false, false, None, Some("pending"), Some("sweep*".into())).unwrap();
        assert!(pending.keeps("SU", 0, "sweep-1") && pending.keeps("PD", 0, "sweep-2"));
        assert!(!pending.keeps("R", 0, "sweep-3") && !pending.keeps("SU", 0, "other"));
        let submitted = Filter::new(false, false, None, Some("SU"), None).unwrap();
        assert!(submitted.keeps("SU", 0, "x") && !submitted.keeps("PD", 0, "x"));
        let timeout = Filter::new(false, false, None, Some("timeout"), None).unwrap();
        assert!(timeout.all && timeout.keeps("TO", 0, "x") && !timeout.keeps("F", 0, "x"));
    }

    #[test]
    fn states_take_words_and_squeue_codes() {
        assert_eq!(parse_states("pending,R").unwrap(), ["PD", "R"]);
        assert_eq!(parse_states("suspended,S").unwrap(), ["S", "S"]);
        assert_eq!(parse_states("completed").unwrap(), ["CD"]);
        assert_eq!(
            parse_states("sleeping").unwrap_err().to_string(),
            "--state sleeping: unknown state; use submitted, pending, placed, running, suspended, finished, failed, cancelled or timeout (or SU, PD, CF, R, S, CD, F, CA, TO)"
        );
    }
}
