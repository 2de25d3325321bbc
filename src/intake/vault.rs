//! Root's private copies of accepted submissions (their environment values, job script and
//! summary text), kept in one root-only redb file, `private/vault.redb`, keyed by task id.
//!
//! **Why one file and not one file per task.** Each private copy must be durable before its
//! user's spool file is removed, or a crash could lose a submission. As a file each, that was
//! one new file and one `fdatasync` per accepted submission: on ext4, a 4,000-file burst tick
//! spent 1.1 s of its 1.1 s in syncs (reports/trust-boundary/README.md, section 2). Here a
//! tick's copies go in one transaction, committed once with `Durability::Immediate`: a burst
//! costs one commit, whatever its size. Not `syncfs`: that waits for whatever any user left
//! dirty on the same filesystem.
//!
//! The file is created by the tick itself, `0600`, with `O_NOFOLLOW` inside root's `0700`
//! `private/`, and checked on its descriptor (a regular file of this uid, one link) before
//! redb sees it. Every call into redb runs under `journal::guard`, so a damaged vault is an
//! error naming the file, never a panic. Only a process that holds `carma.lock` opens it (the
//! tick, and the verbs that write the journal), so opens never contend but with a forked
//! reader of this very process (see `journal::store::open_writable`), which is waited out.
//!
//! Private copies written by carma before the vault (`private/<id>.toml`, one file each) are
//! still read, and removed with their task.

use std::ffi::OsStr;
use std::path::PathBuf;

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};

use super::fd;
use crate::error::{Error, Result};
use crate::home::Home;
use crate::id::TaskId;

const COPIES: TableDefinition<&str, &[u8]> = TableDefinition::new("copies");
/// The vault's name inside `private/`.
pub const VAULT_FILE: &str = "vault.redb";
/// redb's page cache: a tick reads a few copies and writes one batch.
const CACHE_BYTES: usize = 2 * 1024 * 1024;

/// The open vault.
pub(super) struct Vault {
    db: Database,
    path: PathBuf,
}

/// One tick's changes to the vault, committed together.
#[derive(Debug, Default)]
pub(super) struct Batch<'a> {
    /// Copies of newly accepted submissions (replace any copy under the same id: one left by
    /// a journal that was since salvaged back before that task).
    pub put: Vec<(&'a TaskId, &'a [u8])>,
    /// Copies for tasks the journal already has (a tick died between its commit and
    /// settling): written only where no copy exists, so a file left later changes nothing.
    pub recover: Vec<(&'a TaskId, &'a [u8])>,
    /// Tasks that have ended: their copies go.
    pub forget: Vec<&'a TaskId>,
}

impl Batch<'_> {
    pub(super) fn is_empty(&self) -> bool {
        self.put.is_empty() && self.recover.is_empty() && self.forget.is_empty()
    }
}

impl Vault {
    /// Opens root's vault, creating it (and `private/`) when missing.
    pub(super) fn open(home: &Home) -> Result<Vault> {
        let path = home.private_dir().join(VAULT_FILE);
        let shown = path.display().to_string();
        let err = |e: std::io::Error| Error::io(format!("cannot open the private store {shown}"), e);
        let dir = super::rooms::private_dir(home)?;
        let mut waited_ms = 0;
        loop {
            let file = fd::open_rw_at(&dir, OsStr::new(VAULT_FILE), 0o600).map_err(err)?;
            let stat = fd::fstat(&file).map_err(err)?;
            if !stat.is_file() || stat.uid != crate::access::uid::effective() || stat.nlink != 1 {
                return Err(err(std::io::Error::other(format!(
                    "it is {} owned by uid {} with {} links, not this process's own file; move it away",
                    stat.kind(),
                    stat.uid,
                    stat.nlink
                ))));
            }
            let mut builder = redb::Builder::new();
            builder.set_cache_size(CACHE_BYTES);
            let opened = crate::journal::guard::guard(&path, || {
                Ok(builder.create_file(file).map_err(|e| e.to_string()))
            })
            .map_err(|_| {
                err(std::io::Error::other(
                    "the file is damaged; move it away (tasks not yet launched must then be resubmitted)",
                ))
            })?;
            match opened {
                Ok(db) => return Ok(Vault { db, path }),
                Err(e) if e.contains("already open") && waited_ms < 10_000 => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    waited_ms += 5;
                }
                Err(e) => return Err(err(std::io::Error::other(e))),
            }
        }
    }

    /// Applies `batch` in one transaction, durable when this returns.
    pub(super) fn commit(&self, batch: &Batch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.guarded("write", || {
            let mut txn = self.db.begin_write().map_err(other)?;
            txn.set_durability(Durability::Immediate).map_err(other)?;
            {
                let mut table = txn.open_table(COPIES).map_err(other)?;
                for (id, bytes) in &batch.put {
                    table.insert(id.as_str(), *bytes).map_err(other)?;
                }
                for (id, bytes) in &batch.recover {
                    if table.get(id.as_str()).map_err(other)?.is_none() {
                        table.insert(id.as_str(), *bytes).map_err(other)?;
                    }
                }
                for id in &batch.forget {
                    table.remove(id.as_str()).map_err(other)?;
                }
            }
            txn.commit().map_err(other)
        })
    }

    /// The bytes of `id`'s private copy, if the vault has one.
    pub(super) fn get(&self, id: &TaskId) -> Result<Option<Vec<u8>>> {
        self.guarded("read", || {
            let txn = self.db.begin_read().map_err(other)?;
            let table = match txn.open_table(COPIES) {
                Ok(table) => table,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(other(e)),
            };
            Ok(table.get(id.as_str()).map_err(other)?.map(|value| value.value().to_vec()))
        })
    }

    /// Runs `work` against redb; an error or a panic (a damaged file) names the vault.
    fn guarded<T>(&self, what: &str, work: impl FnOnce() -> std::io::Result<T>) -> Result<T> {
        let shown = self.path.display().to_string();
        let outcome = crate::journal::guard::guard(&self.path, || Ok(work()));
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(Error::io(format!("cannot {what} the private store {shown}"), e)),
            // A panic inside redb: the file is damaged.
            Err(_) => Err(Error::io(
                format!("cannot {what} the private store {shown}"),
                std::io::Error::other(
                    "the file is damaged; move it away (tasks not yet launched must then be resubmitted)",
                ),
            )),
        }
    }
}

fn other(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intake::Private;

    fn spool_text(value: &str) -> Vec<u8> {
        let mut submission = crate::spec::Submission::bare(crate::spec::TaskSpec {
            name: "t".into(),
            command: vec!["true".into()],
            workdir: "/tmp".into(),
            gpus: 1,
            ..crate::spec::TaskSpec::default()
        });
        submission.env.insert("TOKEN".into(), value.into());
        submission.spec.env_names = vec!["TOKEN".into()];
        submission.to_spool_toml().into_bytes()
    }

    /// Goal: one commit puts new copies, recovers only where no copy exists (a file left
    /// after settling changes nothing), and forgets ended tasks; a copy kept as a file by
    /// carma before the vault is still read and forgotten.
    #[test]
    fn a_batch_puts_recovers_only_missing_copies_and_forgets() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("home")).without_view();
        home.init("").unwrap();
        let (a, b, legacy) = (TaskId::generate(1), TaskId::generate(2), TaskId::generate(3));
        let (first, later) = (spool_text("first"), spool_text("later"));
        {
            let vault = Vault::open(&home).unwrap();
            vault.commit(&Batch { put: vec![(&a, &first)], ..Batch::default() }).unwrap();
            let recover = vec![(&a, later.as_slice()), (&b, later.as_slice())];
            vault.commit(&Batch { recover, ..Batch::default() }).unwrap();
            assert_eq!(vault.get(&a).unwrap().unwrap(), first, "recovery never replaces a copy");
            assert_eq!(vault.get(&b).unwrap().unwrap(), later, "recovery writes a missing copy");
        }
        std::fs::write(home.private_dir().join(format!("{legacy}.toml")), spool_text("old")).unwrap();
        let private = Private::new(&home);
        assert_eq!(private.read(&a).unwrap().env["TOKEN"], "first");
        assert_eq!(private.read(&legacy).unwrap().env["TOKEN"], "old");
        private.forget(&[a.clone(), legacy.clone()]);
        assert!(private.read(&a).unwrap_err().contains("cannot be read"), "a's copy is gone");
        assert!(!home.private_dir().join(format!("{legacy}.toml")).exists(), "the old file is gone");
        assert_eq!(private.read(&b).unwrap().env["TOKEN"], "later");
        let mode = std::fs::metadata(home.private_dir().join(VAULT_FILE)).unwrap();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777, 0o600);
    }

    /// Goal: a link in the vault's place is never followed (`O_NOFOLLOW`), whatever it points at.
    #[test]
    fn a_link_in_place_of_the_vault_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().join("home")).without_view();
        home.init("").unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"not a vault").unwrap();
        std::os::unix::fs::symlink(&target, home.private_dir().join(VAULT_FILE)).unwrap();
        let error = Vault::open(&home).err().expect("refused").to_string();
        assert!(error.starts_with("cannot open the private store"), "{error}");
        assert_eq!(std::fs::read(&target).unwrap(), b"not a vault");
    }
}
