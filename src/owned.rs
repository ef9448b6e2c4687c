//! The files rdml wrote into a folder that is not a run (saved examples, a comparison's tables, a
//! scored model's record, an `embed` `.npy` set), recorded in a ledger, and a journaled change of
//! several of them at once.
//!
//! rdml replaces or removes a file there only when the ledger records it with the digest the file
//! has now: whatever is not recorded is the user's and stays. A change of several files is
//! journaled in the ledger: the new files are written into a staging folder the ledger names
//! (phase `writing`); then the ledger lists every file to write and remove (phase `swapping`, the
//! point of no return); then each staged file is renamed into place and each removed file goes;
//! then the ledger records the new set. The next command that opens the ledger finishes a change
//! that had reached `swapping` and undoes one that had not, and says which: the folder then holds
//! the old set byte for byte or the new one whole.

use anyhow::{Context as _, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A file's digest as the ledger records it: CRC-32 and length.
pub fn digest(bytes: &[u8]) -> String {
    format!("crc32:{:08x}:{}", crc32fast::hash(bytes), bytes.len())
}

/// The record of a file rdml appends to (a run's log): the digest of the bytes it held when rdml
/// last began appending. The file is rdml's while it still begins with them.
pub fn prefix_digest(bytes: &[u8]) -> String {
    format!("prefix:{}", digest(bytes))
}

/// Whether the file at `p` is what `recorded` describes (its whole bytes, or its first bytes for
/// a [`prefix_digest`]).
fn matches(p: &Path, recorded: &str) -> bool {
    let Some(prefix) = recorded.strip_prefix("prefix:") else {
        return current_digest(p).as_deref() == Some(recorded);
    };
    let Some(len) = prefix.rsplit(':').next().and_then(|l| l.parse::<usize>().ok()) else {
        return false;
    };
    crate::read::bytes(p, crate::read::Follow::NoLinks, crate::read::ANY)
        .is_ok_and(|b| b.len() >= len && digest(&b[..len]) == prefix)
}

/// A token tying a stash to its run (written to the run's marker and to the stash's journal), or
/// a staging folder to its ledger: distinct per process and moment.
pub fn new_token() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}-{:x}", t, std::process::id())
}

/// Removes a file if it exists (never a folder, never through a link: the link goes).
pub fn remove_file(p: &Path) -> Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => bail!("{} is a folder; expected a file", p.display()),
        Ok(_) => {
            crate::fault::point("remove", p);
            std::fs::remove_file(p).with_context(|| format!("cannot remove {}", p.display()))
        }
        Err(_) => Ok(()),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Phase {
    Writing,
    Swapping,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pending {
    staging: String,
    phase: Phase,
    #[serde(default)]
    writes: BTreeMap<String, String>,
    #[serde(default)]
    removes: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct State {
    files: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pending: Option<Pending>,
}

/// The ledger as earlier versions wrote it (`.rdml-scored.json`): each name's admissible digests.
#[derive(Deserialize)]
#[serde(untagged)]
enum OnDisk {
    Now(State),
    Before(BTreeMap<String, Vec<String>>),
}

/// A folder's ledger, read and settled; the folder is locked while it lives (so a second rdml
/// process never takes a live change for an interrupted one).
#[derive(Debug)]
pub struct Ledger {
    dir: PathBuf,
    name: String,
    state: State,
    lock: Option<std::fs::File>,
}

/// An advisory lock on the folder itself (none while the folder does not exist yet).
fn lock(dir: &Path, what: &str, wait: bool) -> Result<Option<std::fs::File>> {
    let Ok(f) = std::fs::File::open(dir) else {
        return Ok(None);
    };
    if wait {
        f.lock().with_context(|| format!("cannot lock {}", dir.display()))?;
        return Ok(Some(f));
    }
    match f.try_lock() {
        Ok(()) => Ok(Some(f)),
        Err(std::fs::TryLockError::WouldBlock) => Err(crate::input_error(format!(
            "{what}: another rdml process is writing {}; wait for it or choose another folder",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("cannot lock {}", dir.display())),
    }
}

/// The digest of the plain file at `p` (none for a link, a FIFO, a device, a folder: never
/// rdml's).
fn current_digest(p: &Path) -> Option<String> {
    crate::read::bytes(p, crate::read::Follow::NoLinks, crate::read::ANY)
        .ok()
        .map(|b| digest(&b))
}

/// Whether `name` is a plain file name (no folder, no `..`): the only names a ledger holds.
fn plain(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\'])
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    crate::fault::point("rename", to);
    std::fs::rename(from, to).with_context(|| format!("cannot move {} to {}", from.display(), to.display()))
}

impl Ledger {
    /// Reads the ledger `name` of `dir` (none yet: an empty one), and settles a change a killed
    /// command left; `what` names the folder's use in messages (`--save-examples`, `out`).
    pub fn open(dir: &Path, name: &str, what: &str) -> Result<Self> {
        Self::open_locked(dir, name, what, false)
    }

    /// [`open`](Self::open), waiting for another process's lock when `wait` (a folder whose
    /// writers hold it only for one short change: a run folder).
    pub fn open_locked(dir: &Path, name: &str, what: &str, wait: bool) -> Result<Self> {
        let lock = lock(dir, what, wait)?;
        let path = dir.join(name);
        if lock.is_some() {
            crate::atomic::remove_leftovers(&path);
        }
        let state = match std::fs::symlink_metadata(&path) {
            Err(_) => State::default(),
            Ok(m) if !m.is_file() => bail!(
                "{what}: {} is {}, not a ledger rdml wrote; it is left as it is: choose another folder",
                path.display(),
                crate::read::kind(&m).unwrap_or("not a plain file")
            ),
            Ok(_) => {
                let bytes = crate::read::bookkeeping(&path)?;
                match serde_json::from_slice::<OnDisk>(&bytes) {
                    Ok(OnDisk::Now(s)) => s,
                    Ok(OnDisk::Before(d)) => State {
                        files: d
                            .into_iter()
                            .filter(|(n, _)| plain(n))
                            .filter_map(|(n, ok)| {
                                let now = current_digest(&dir.join(&n))?;
                                ok.contains(&now).then_some((n, now))
                            })
                            .collect(),
                        pending: None,
                    },
                    Err(_) => {
                        let why = if serde_json::from_slice::<serde_json::Value>(&bytes).is_ok() {
                            "JSON, but not a ledger's layout"
                        } else {
                            "damaged: not JSON"
                        };
                        return Err(crate::input_error(format!(
                            "{what}: {} is not a ledger rdml wrote ({why}); it is left as it is: move it aside (rdml then \
                             re-records the files of a run it can prove it wrote; in another folder its files are \
                             the user's until moved away), or choose another folder",
                            path.display()
                        )));
                    }
                }
            }
        };
        let mut state = state;
        // Only plain names are rdml's (a name with a folder in it was not written by rdml).
        state.files.retain(|n, _| plain(n));
        let mut l = Self {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            state,
            lock,
        };
        l.settle(what)?;
        Ok(l)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether rdml wrote `name` here and it has not changed since.
    pub fn owns(&self, name: &str) -> bool {
        self.state
            .files
            .get(name)
            .is_some_and(|d| matches(&self.dir.join(name), d))
    }

    /// Whether the ledger file exists (a folder rdml has recorded files in).
    pub fn exists(&self) -> bool {
        std::fs::symlink_metadata(self.dir.join(&self.name)).is_ok()
    }

    /// Records that rdml is about to append to `name` (absent, or rdml's): from here on the file
    /// is rdml's while it begins with the bytes it holds now. Saved before the first append, so
    /// a kill after it leaves a file the ledger still proves.
    pub fn will_append(&mut self, name: &str, what: &str) -> Result<()> {
        self.check_free([name], what)?;
        let p = self.dir.join(name);
        let now = match std::fs::symlink_metadata(&p) {
            Ok(_) => crate::read::bytes(&p, crate::read::Follow::NoLinks, crate::read::ANY)?,
            Err(_) => vec![],
        };
        self.state.files.insert(name.to_string(), prefix_digest(&now));
        self.save()
    }

    /// Writes `bytes` as `name` (absent, or rdml's), journaled: a kill leaves the old file or
    /// the new one, both proved by the ledger.
    pub fn put(self, name: &str, bytes: &[u8], what: &str) -> Result<Self> {
        let mut change = self.begin()?;
        change.stage(name, bytes)?;
        change.commit(&[], what)
    }

    /// The recorded names, for a writer that removes its earlier files.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.state.files.keys().map(String::as_str)
    }

    /// Refuses when one of `names` exists and rdml cannot prove it wrote it.
    pub fn check_free<'a>(&self, names: impl IntoIterator<Item = &'a str>, what: &str) -> Result<()> {
        for n in names {
            let p = self.dir.join(n);
            if std::fs::symlink_metadata(&p).is_ok() && !self.owns(n) {
                return Err(crate::input_error(format!(
                    "{what}: {} exists and rdml did not write it (or it changed since): it is left as it is; \
                     move it away or choose another folder",
                    p.display()
                )));
            }
        }
        Ok(())
    }

    fn save(&self) -> Result<()> {
        crate::atomic::write_json(&self.dir.join(&self.name), &self.state)
    }

    /// The staging folder a pending change names, proven rdml's before anything in it is moved
    /// or removed: named as rdml names them, inside the folder, and a real folder (rdml creates
    /// it with `create_dir`; a link, to a user's folder or anywhere, was not made by rdml).
    fn staging(&self, p: &Pending) -> Result<PathBuf> {
        let ledger = self.dir.join(&self.name);
        crate::ensure_input!(
            plain(&p.staging) && p.staging.starts_with(".rdml-staging-"),
            "{}: its staging folder '{}' is not one rdml names: nothing was moved; remove the ledger's \
             \"pending\" entry (or the ledger) to go on",
            ledger.display(),
            p.staging
        );
        let staging = self.dir.join(&p.staging);
        if let Ok(m) = std::fs::symlink_metadata(&staging) {
            crate::ensure_input!(
                m.is_dir(),
                "{}: the staging folder its unfinished change names, {}, is {} and not the folder rdml made: \
                 nothing was moved or removed; it is left as it is (remove it to let rdml settle the change)",
                ledger.display(),
                staging.display(),
                if m.file_type().is_symlink() {
                    "a symbolic link"
                } else {
                    "not a folder"
                }
            );
        }
        Ok(staging)
    }

    /// Finishes (from `swapping`) or undoes (from `writing`) an interrupted change.
    fn settle(&mut self, what: &str) -> Result<()> {
        let Some(p) = self.state.pending.clone() else {
            return Ok(());
        };
        let staging = self.staging(&p)?;
        if p.phase == Phase::Swapping {
            self.swap(&p, &staging, false)?;
            crate::notes::note(format!(
                "{what}: {}: an interrupted write of {} files was finished (the new files stand)",
                self.dir.display(),
                p.writes.len()
            ));
        } else {
            remove_staging(&staging)?;
            self.state.pending = None;
            self.save()?;
            crate::notes::note(format!(
                "{what}: {}: an interrupted write was undone (the earlier files are as they were)",
                self.dir.display()
            ));
        }
        Ok(())
    }

    /// The swap, repeatable from any point: staged files renamed into place, removed ones gone,
    /// then the ledger records the new set.
    /// `just_staged`: this process wrote the staged files a moment ago under the folder's lock,
    /// so they are not read back to prove them (an interrupted change's are).
    fn swap(&mut self, p: &Pending, staging: &Path, just_staged: bool) -> Result<()> {
        for (name, new) in p.writes.iter().filter(|(n, _)| plain(n)) {
            let staged = staging.join(name);
            if std::fs::symlink_metadata(&staged).is_err() {
                continue;
            }
            // Only the file rdml staged moves: a plain file with the digest the journal holds.
            crate::ensure_input!(
                just_staged || current_digest(&staged).as_ref() == Some(new),
                "{}: {} is not the file rdml staged (a link, another kind of file, or other bytes): nothing \
                 more was moved; it is left as it is (remove it to let rdml settle the change)",
                self.dir.join(&self.name).display(),
                staged.display()
            );
            // The place must still be empty, rdml's, or already the new file: one the user put
            // or changed there meanwhile is not replaced (the change stays pending).
            let target = self.dir.join(name);
            let free = std::fs::symlink_metadata(&target).is_err()
                || current_digest(&target).as_ref() == Some(new)
                || self.owns(name);
            if !free {
                bail!(
                    "{} changed since rdml began replacing it: it is left as it is, and so is the change \
                     (in {}); move the file away to let it finish",
                    target.display(),
                    staging.display()
                );
            }
            rename(&staged, &target)?;
        }
        for name in p.removes.iter().filter(|n| plain(n)) {
            if self.owns(name) {
                remove_file(&self.dir.join(name))?;
            }
            self.state.files.remove(name);
        }
        // Before the ledger forgets the change: a kill between the two must not orphan it.
        remove_staging(staging)?;
        self.state.files.extend(
            p.writes
                .iter()
                .filter(|(n, _)| plain(n))
                .map(|(n, d)| (n.clone(), d.clone())),
        );
        self.state.pending = None;
        self.save()
    }

    /// Starts a change: the ledger names its staging folder first, so a kill from here on
    /// leaves nothing the next command cannot prove it made.
    pub fn begin(mut self) -> Result<Change> {
        std::fs::create_dir_all(&self.dir).with_context(|| format!("cannot create {}", self.dir.display()))?;
        if self.lock.is_none() {
            self.lock = lock(&self.dir, "the folder", false)?;
        }
        let staging = format!(".rdml-staging-{}", new_token());
        self.state.pending = Some(Pending {
            staging: staging.clone(),
            phase: Phase::Writing,
            writes: BTreeMap::new(),
            removes: vec![],
        });
        self.save()?;
        let dir = self.dir.join(staging);
        crate::fault::point("mkdir", &dir);
        std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Change {
            ledger: self,
            staging: dir,
            staged: BTreeMap::new(),
        })
    }
}

mod adopt;
mod change;
pub use change::Change;
use change::remove_staging;

#[cfg(test)]
mod tests;
