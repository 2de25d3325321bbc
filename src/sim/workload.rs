//! Simulator inputs: workload profiles, traces and the GPU set, parsed from the CSV formats
//! of the reference traces (`offset_s,workload` and `workload_profiles.csv`). A trace may
//! have a third column, `user`: who submits the row (`carma trace gen --users`).
//!
//! Parsing is strict and names the file and line of the first error, because a silently
//! skipped row would change a reproduction without anyone noticing.

use std::collections::BTreeMap;

/// One workload: what the simulator knows as truth about a job, and what each estimator
/// would have told the scheduler.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// The workload's name, unique in the file: what trace rows refer to it by.
    pub workload: String,
    /// The model the workload trains (the `model` column; the workload's name when absent).
    pub model: String,
    /// Training batch size (the `batch_size` column; 0 when absent).
    pub batch_size: u32,
    /// GPUs one job of the workload uses.
    pub gpus: u32,
    /// Run time with the GPU(s) to itself, ms.
    pub exclusive_ms: u64,
    /// Its size class from the file (`light`, `medium` or `heavy`); trace generation draws by it.
    pub class: String,
    /// Actual peak memory per GPU, MiB (the simulator's truth).
    pub mem_actual_mib: u64,
    /// What the Horus formula estimated for its peak memory per GPU, MiB.
    pub est_horus_mib: u64,
    /// What a FakeTensor trace estimated for its peak memory per GPU, MiB.
    pub est_faketensor_mib: u64,
    /// What GPUMemNet told the original system (the upper edge of its bucket), MiB.
    pub est_gpumemnet_mib: u64,
    /// Standalone SM activity, 0..1.
    pub smact: f64,
    /// How often the workload checkpoints when it is requeueable, in exclusive-run ms (the
    /// optional `checkpoint_every_minutes` column); `None`: the model's `checkpoint-every-s`.
    pub checkpoint_every_ms: Option<u64>,
    /// What a resume from its checkpoint costs, ms (the optional `restart_cost_minutes`
    /// column); `None`: the model's `restart-cost-s`.
    pub restart_cost_ms: Option<u64>,
}

/// One trace row: a submission `offset_ms` after the first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRow {
    /// Time of the submission after the trace's first, ms.
    pub offset_ms: u64,
    /// The [`Profile`] the submission runs, by workload name.
    pub workload: String,
    /// Who submits it (the optional `user` column); `None`: the simulator's own user.
    pub user: Option<String>,
}

/// Most rows read from one trace or profile file.
pub const TRACE_ROWS_MAX: usize = 1_000_000;

/// The GPUs to simulate, e.g. `4xA100-40GB`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuSet {
    /// How many GPUs, 1 to 64.
    pub count: u32,
    /// The GPU model name as given, memory suffix included (`A100-40GB`).
    pub name: String,
    /// Memory of each GPU, from the name's `-<N>GB` suffix, MiB.
    pub memory_total_mib: u64,
}

/// Parses `workload_profiles.csv`.
pub fn parse_profiles(origin: &str, text: &str) -> Result<BTreeMap<String, Profile>, String> {
    let mut rows = csv_rows(origin, text)?;
    let header = rows.next().ok_or_else(|| format!("{origin}: empty file"))?.1;
    let col = |name: &str| {
        header.iter().position(|h| h == name).ok_or_else(|| format!("{origin}: no column {name:?}"))
    };
    let c = [
        col("workload")?,
        col("gpus")?,
        col("exclusive_minutes")?,
        col("class")?,
        col("mem_actual_mib")?,
        col("est_horus_mib")?,
        col("est_faketensor_mib")?,
        col("est_gpumemnet_mib")?,
        col("smact_assumed")?,
    ];
    let model_col = header.iter().position(|h| h == "model");
    let batch_col = header.iter().position(|h| h == "batch_size");
    let every_col = header.iter().position(|h| h == "checkpoint_every_minutes");
    let restart_col = header.iter().position(|h| h == "restart_cost_minutes");
    let mut profiles = BTreeMap::new();
    for (line, cells) in rows {
        let at = |i: usize| cells.get(c[i]).map(String::as_str).unwrap_or("");
        let num = |i: usize| -> Result<f64, String> {
            at(i)
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("{origin}:{line}: {:?} is not a non-negative number", at(i)))
        };
        let optional = |col: Option<usize>| col.and_then(|i| cells.get(i)).map(String::as_str).unwrap_or("");
        let batch_size = match optional(batch_col) {
            "" => 0,
            text => text
                .parse::<u32>()
                .map_err(|_| format!("{origin}:{line}: batch size {text:?} is not a whole number"))?,
        };
        let model = match optional(model_col) {
            "" => at(0).to_string(),
            text => text.to_string(),
        };
        let minutes = |col: Option<usize>, least: f64| -> Result<Option<u64>, String> {
            match optional(col) {
                "" => Ok(None),
                text => text
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= least && *v < 14_400.0)
                    .map(|v| Some((v * 60_000.0).round() as u64))
                    .ok_or_else(|| {
                        format!("{origin}:{line}: {text:?} is not a number of minutes in [{least}, 14400)")
                    }),
            }
        };
        let profile = Profile {
            checkpoint_every_ms: minutes(every_col, 0.1)?,
            restart_cost_ms: minutes(restart_col, 0.0)?,
            workload: at(0).to_string(),
            model,
            batch_size,
            gpus: num(1)? as u32,
            exclusive_ms: (num(2)? * 60_000.0).round() as u64,
            class: at(3).to_string(),
            mem_actual_mib: num(4)?.round() as u64,
            est_horus_mib: num(5)?.round() as u64,
            est_faketensor_mib: num(6)?.round() as u64,
            est_gpumemnet_mib: num(7)?.round() as u64,
            smact: num(8)?.min(1.0),
        };
        if profile.workload.is_empty() || profile.gpus == 0 || profile.exclusive_ms == 0 {
            return Err(format!("{origin}:{line}: empty workload, 0 GPUs or 0 minutes"));
        }
        profiles.insert(profile.workload.clone(), profile);
    }
    Ok(profiles)
}

/// Parses a trace (`offset_s,workload`), checking every workload has a profile.
pub fn parse_trace(
    origin: &str,
    text: &str,
    profiles: &BTreeMap<String, Profile>,
) -> Result<Vec<TraceRow>, String> {
    let mut rows = csv_rows(origin, text)?;
    let header = rows.next().ok_or_else(|| format!("{origin}: empty file"))?.1;
    let with_user = match header.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["offset_s", "workload"] => false,
        ["offset_s", "workload", "user"] => true,
        _ => {
            return Err(format!(
                "{origin}: header must be offset_s,workload or offset_s,workload,user, got {}",
                header.join(",")
            ));
        }
    };
    let mut trace = Vec::new();
    for (line, cells) in rows {
        let offset_s: f64 =
            cells[0].parse().ok().filter(|v: &f64| v.is_finite() && *v >= 0.0).ok_or_else(|| {
                format!("{origin}:{line}: offset {:?} is not a number of seconds", cells[0])
            })?;
        let workload = cells.get(1).cloned().unwrap_or_default();
        if !profiles.contains_key(&workload) {
            return Err(format!("{origin}:{line}: workload {workload:?} has no profile"));
        }
        let user = match cells.get(2).map(String::as_str) {
            _ if !with_user => None,
            Some(name) if crate::access::users::is_user_name(name) => Some(name.to_string()),
            other => {
                return Err(format!(
                    "{origin}:{line}: user {:?} is not a user name (letters, digits, ., _ and -)",
                    other.unwrap_or("")
                ));
            }
        };
        trace.push(TraceRow { offset_ms: (offset_s * 1000.0).round() as u64, workload, user });
    }
    // A stable sort keeps the file's order for equal offsets.
    trace.sort_by_key(|r| r.offset_ms);
    Ok(trace)
}

/// Rows of a simple CSV (no quoting), with 1-based line numbers; blank lines skipped.
fn csv_rows(origin: &str, text: &str) -> Result<impl Iterator<Item = (usize, Vec<String>)>, String> {
    let count = text.lines().count();
    if count > TRACE_ROWS_MAX + 1 {
        return Err(format!("{origin}: {count} lines, more than {TRACE_ROWS_MAX}"));
    }
    Ok(text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l.split(',').map(|c| c.trim().to_string()).collect())))
}

impl GpuSet {
    /// Parses `NxNAME`, where NAME ends in `-<memory>GB` (e.g. `4xA100-40GB`, `16xH100-80GB`).
    pub fn parse(text: &str) -> Result<GpuSet, String> {
        let bad = || format!("GPU set {text:?}: use COUNTxNAME-MEMGB, e.g. 4xA100-40GB");
        let (count, name) = text.split_once('x').ok_or_else(bad)?;
        let count: u32 = count.parse().ok().filter(|c| (1..=64).contains(c)).ok_or_else(bad)?;
        let gb: u64 = name
            .rsplit_once('-')
            .and_then(|(_, mem)| mem.strip_suffix("GB"))
            .and_then(|gb| gb.parse().ok())
            .filter(|gb| (1..=1024).contains(gb))
            .ok_or_else(bad)?;
        Ok(GpuSet { count, name: name.to_string(), memory_total_mib: gb * 1024 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILES: &str = "workload,model,batch_size,gpus,exclusive_minutes,class,mem_actual_mib,est_horus_mib,est_faketensor_mib,est_gpumemnet_mib,smact_assumed\n\
        small,m,32,1,2.0,light,1776,1114.08,37.1,8000,0.1\n\
        big,m,8,2,60,heavy,27902,40000,40000,40000,0.8\n";

    #[test]
    fn profiles_and_trace_parse() {
        let profiles = parse_profiles("p.csv", PROFILES).expect("profiles");
        assert_eq!(profiles["small"].exclusive_ms, 120_000);
        assert_eq!(profiles["big"].gpus, 2);
        assert_eq!((profiles["big"].model.as_str(), profiles["big"].batch_size), ("m", 8));
        let trace = parse_trace("t.csv", "offset_s,workload\n5,big\n0,small\n", &profiles).expect("trace");
        assert_eq!(trace[0], TraceRow { offset_ms: 0, workload: "small".into(), user: None });
        let error = parse_trace("t.csv", "offset_s,workload\n0,nope\n", &profiles).expect_err("unknown");
        assert_eq!(error, "t.csv:2: workload \"nope\" has no profile");
        let users = parse_trace("t.csv", "offset_s,workload,user\n0,small,alice\n1,big,bob\n", &profiles);
        assert_eq!(users.expect("users")[1].user.as_deref(), Some("bob"));
        let error = parse_trace("t.csv", "offset_s,workload,user\n0,small,\n", &profiles).expect_err("empty");
        assert_eq!(error, "t.csv:2: user \"\" is not a user name (letters, digits, ., _ and -)");
    }

    #[test]
    fn gpu_set_parses() {
        let set = GpuSet::parse("4xA100-40GB").expect("parses");
        assert_eq!((set.count, set.memory_total_mib), (4, 40960));
        assert!(GpuSet::parse("4A100").is_err());
        assert!(GpuSet::parse("0xA100-40GB").is_err());
    }
}
