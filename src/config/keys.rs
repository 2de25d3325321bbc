//! Which config keys a `config.toml` knows: `carma init` run again (an upgrade) names the
//! keys of this version an older file neither sets nor documents.

use super::DEFAULT_CONFIG_TOML;

/// The `[section] key` names a config text documents or sets: every `key = value` line and
/// every commented `# key = value` line, under the last `[section]` header.
pub fn documented_keys(text: &str) -> std::collections::BTreeSet<String> {
    let mut section = String::new();
    let mut keys = std::collections::BTreeSet::new();
    for line in text.lines().map(str::trim) {
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = header.trim().to_string();
            continue;
        }
        let line = line.strip_prefix('#').map_or(line, str::trim_start);
        let Some((key, _)) = line.split_once(" = ") else { continue };
        if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            keys.insert(format!("[{section}] {key}"));
        }
    }
    keys
}

/// The keys this carma documents ([`DEFAULT_CONFIG_TOML`]) that `existing` (an older
/// carma's `config.toml`) neither sets nor documents: new since that file was written, so
/// their defaults apply (`carma init` says which).
pub fn keys_new_since(existing: &str) -> Vec<String> {
    let known = documented_keys(existing);
    documented_keys(DEFAULT_CONFIG_TOML).into_iter().filter(|k| !known.contains(k)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: `carma init` names exactly the keys an older file lacks.
    #[test]
    fn keys_new_since_an_older_file_are_named() {
        assert!(keys_new_since(DEFAULT_CONFIG_TOML).is_empty());
        let older =
            DEFAULT_CONFIG_TOML.replace("# requeues-max = 5\n", "").replace("# admin-group = \"\"\n", "");
        assert_eq!(keys_new_since(&older), ["[access] admin-group", "[limits] requeues-max"]);
        let set = older.replace("[access]\n", "[access]\nadmin-group = \"lab\"\n");
        assert_eq!(keys_new_since(&set), ["[limits] requeues-max"], "a key set, not documented, is known");
        assert!(documented_keys(DEFAULT_CONFIG_TOML).contains("[sched.fair-share] half-life-ms"));
    }
}
