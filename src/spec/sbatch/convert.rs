//! Slurm's value forms, read as Slurm reads them: time limits, memory sizes and output file
//! patterns.

/// Parses a Slurm time limit: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`
/// (a bare number is minutes), into ms; `None` for no limit (`UNLIMITED`, `INFINITE`, `0`).
pub fn slurm_time_ms(text: &str) -> Result<Option<u64>, String> {
    let hint = "use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS";
    let trimmed = text.trim();
    if ["UNLIMITED", "INFINITE"].contains(&trimmed.to_ascii_uppercase().as_str()) {
        return Ok(None);
    }
    let bad = || format!("time {text:?} is not a Slurm time; {hint}");
    let number = |part: &str| -> Result<u64, String> {
        if part.is_empty() || part.len() > 9 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        part.parse::<u64>().map_err(|_| bad())
    };
    let (days, clock) = match trimmed.split_once('-') {
        Some((days, clock)) => (Some(number(days)?), clock),
        None => (None, trimmed),
    };
    let parts = clock.split(':').map(number).collect::<Result<Vec<u64>, String>>()?;
    let seconds = match (days, parts.as_slice()) {
        (None, [m]) => m * 60,
        (None, [m, s]) => m * 60 + s,
        (None, [h, m, s]) | (Some(_), [h, m, s]) => h * 3600 + m * 60 + s,
        (Some(_), [h]) => h * 3600,
        (Some(_), [h, m]) => h * 3600 + m * 60,
        _ => return Err(bad()),
    } + days.unwrap_or(0) * 86_400;
    Ok((seconds > 0).then_some(seconds * 1000))
}

/// Parses a Slurm memory size into MiB: a whole number with an optional unit K, M, G or T
/// (either case, with or without `B` or `iB`, all powers of 1024); a bare number is MiB.
/// `0` asks for all of the node's memory.
pub fn slurm_memory_mib(text: &str) -> Result<u64, String> {
    let hint = "use a number with K, M, G or T, e.g. 16G or 500M (a bare number is MiB)";
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let value: u64 = number
        .parse()
        .ok()
        .filter(|_| number.len() <= 12)
        .ok_or_else(|| format!("memory {text:?} is not a size; {hint}"))?;
    let unit = unit.to_ascii_uppercase();
    let kib_per_unit: u64 = match unit.trim_end_matches("IB").trim_end_matches('B') {
        "" | "M" => 1024,
        "K" => 1,
        "G" => 1024 * 1024,
        "T" => 1024 * 1024 * 1024,
        _ => return Err(format!("memory {text:?} has an unknown unit; {hint}")),
    };
    let kib =
        value.checked_mul(kib_per_unit).ok_or_else(|| format!("memory {text:?} is too large; {hint}"))?;
    Ok(kib.div_ceil(1024))
}

/// A Slurm output pattern in carma's template words: `%j %x %u %%` are carma's own, `%A`
/// (the array's id) becomes `{array}` and `%a` (the array index) `{index}`, filled in for
/// each task at submit; `%N` is this server's name. Returns a note for what is not kept.
pub fn output_template(text: &str, node: &str) -> Result<(String, Option<String>), String> {
    let mut out = String::with_capacity(text.len() + 8);
    let mut dropped = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut width = String::new();
        while let Some(digit) = chars.next_if(char::is_ascii_digit) {
            width.push(digit);
        }
        if !width.is_empty() {
            dropped.push(format!("%{width}"));
        }
        match chars.next() {
            Some('j' | 'J') => out.push_str("%j"),
            Some('x') => out.push_str("%x"),
            Some('u') => out.push_str("%u"),
            Some('%') => out.push_str("%%"),
            Some('A') => out.push_str("{array}"),
            Some('a') => out.push_str("{index}"),
            Some('N') => out.push_str(&node.replace('%', "%%")),
            Some('n' | 't') => out.push('0'),
            Some('s') => out.push_str("batch"),
            Some(other) => {
                return Err(format!("%{other} is not a Slurm file pattern; use %A %a %j %x %u %N or %%"));
            }
            None => return Err("ends with a lone %; write %% for a percent sign".into()),
        }
    }
    let note = (!dropped.is_empty()).then(|| format!("zero-padding ({}) is not applied", dropped.join(", ")));
    Ok((out, note))
}
