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
fn lock(dir: &Path, what: &str) -> Result<Option<std::fs::File>> {
    let Ok(f) = std::fs::File::open(dir) else {
        return Ok(None);
    };
    match f.try_lock() {
        Ok(()) => Ok(Some(f)),
        Err(std::fs::TryLockError::WouldBlock) => Err(crate::input_error(format!(
            "{what}: another rdml process is writing {}; wait for it or choose another folder",
            dir.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("cannot lock {}", dir.display())),
    }
}

fn current_digest(p: &Path) -> Option<String> {
    std::fs::symlink_metadata(p).ok().filter(|m| m.is_file())?;
    std::fs::read(p).ok().map(|b| digest(&b))
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
        let lock = lock(dir, what)?;
        let path = dir.join(name);
        let state = match std::fs::symlink_metadata(&path) {
            Err(_) => State::default(),
            Ok(m) if !m.is_file() => bail!(
                "{what}: {} is not a file rdml wrote (a link or a folder); it is left as it is: choose another folder",
                path.display()
            ),
            Ok(_) => {
                let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
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
                    Err(e) => bail!(
                        "{what}: {} is not a ledger rdml wrote ({e}); it is left as it is: choose another folder",
                        path.display()
                    ),
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
            .is_some_and(|d| current_digest(&self.dir.join(name)).as_ref() == Some(d))
    }

    /// The recorded names, for a writer that removes its earlier files.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.state.files.keys().map(String::as_str)
    }

    /// Records `name` as rdml's when its bytes are `digest` now (a set an earlier version wrote,
    /// proved by its own manifest).
    pub fn adopt(&mut self, name: &str, digest: &str) {
        if plain(name) && current_digest(&self.dir.join(name)).as_deref() == Some(digest) {
            self.state.files.insert(name.to_string(), digest.to_string());
        }
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

    fn staging(&self, p: &Pending) -> Result<PathBuf> {
        anyhow::ensure!(
            plain(&p.staging) && p.staging.starts_with(".rdml-staging-"),
            "{}: its staging folder '{}' is not one rdml names",
            self.dir.join(&self.name).display(),
            p.staging
        );
        Ok(self.dir.join(&p.staging))
    }

    /// Finishes (from `swapping`) or undoes (from `writing`) an interrupted change.
    fn settle(&mut self, what: &str) -> Result<()> {
        let Some(p) = self.state.pending.clone() else {
            return Ok(());
        };
        let staging = self.staging(&p)?;
        // A note goes straight to the terminal: its option in the command line's words (the
        // folders Python writes name theirs as a keyword already).
        let what = crate::field::render(what, crate::field::Words::CommandLine);
        if p.phase == Phase::Swapping {
            self.swap(&p, &staging)?;
            eprintln!(
                "note: {what}: {}: an interrupted write of {} files was finished (the new files stand)",
                self.dir.display(),
                p.writes.len()
            );
        } else {
            remove_staging(&staging)?;
            self.state.pending = None;
            self.save()?;
            eprintln!(
                "note: {what}: {}: an interrupted write was undone (the earlier files are as they were)",
                self.dir.display()
            );
        }
        Ok(())
    }

    /// The swap, repeatable from any point: staged files renamed into place, removed ones gone,
    /// then the ledger records the new set.
    fn swap(&mut self, p: &Pending, staging: &Path) -> Result<()> {
        for (name, new) in p.writes.iter().filter(|(n, _)| plain(n)) {
            let staged = staging.join(name);
            if std::fs::symlink_metadata(&staged).is_err() {
                continue;
            }
            // The place must still be empty, rdml's, or already the new file: one the user put
            // or changed there meanwhile is not replaced (the change stays pending).
            let target = self.dir.join(name);
            let now = std::fs::symlink_metadata(&target).ok().map(|_| current_digest(&target));
            let free = match now {
                None => true,
                Some(d) => d.is_some() && (d.as_ref() == Some(new) || d.as_ref() == self.state.files.get(name)),
            };
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
                crate::run_dir::remove_file(&self.dir.join(name))?;
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
            self.lock = lock(&self.dir, "the folder")?;
        }
        let staging = format!(".rdml-staging-{}", crate::run_dir::new_token());
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

/// Removes a staging folder the ledger named (its files are all rdml's: nothing else writes there).
fn remove_staging(staging: &Path) -> Result<()> {
    let Ok(m) = std::fs::symlink_metadata(staging) else {
        return Ok(());
    };
    if !m.is_dir() {
        bail!(
            "{} is not the folder rdml staged files in; it is left as it is",
            staging.display()
        );
    }
    for e in std::fs::read_dir(staging).with_context(|| format!("cannot read {}", staging.display()))? {
        crate::run_dir::remove_file(&e?.path())?;
    }
    crate::fault::point("remove", staging);
    std::fs::remove_dir(staging).with_context(|| format!("cannot remove {}", staging.display()))
}

/// A change under way: files staged, nothing in place yet.
#[derive(Debug)]
pub struct Change {
    ledger: Ledger,
    staging: PathBuf,
    staged: BTreeMap<String, String>,
}

impl Change {
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Writes `bytes` as the new `name` (staged: in place at [`commit`](Self::commit)).
    pub fn stage(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        anyhow::ensure!(plain(name), "'{name}' is not a plain file name");
        let p = self.staging.join(name);
        crate::fault::point("write", &p);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&p)
            .with_context(|| format!("cannot create {}", p.display()))?;
        // Synced: past the point of no return a power cut must not roll half a file forward.
        std::io::Write::write_all(&mut f, bytes)
            .and_then(|()| f.sync_all())
            .with_context(|| format!("cannot write {}", p.display()))?;
        self.staged.insert(name.to_string(), digest(bytes));
        Ok(())
    }

    /// Puts the staged files in place and removes those of `removes` rdml wrote (one the user
    /// changed stays), after checking again that no staged name became the user's meanwhile;
    /// `what` names the folder's use.
    pub fn commit(mut self, removes: &[String], what: &str) -> Result<Ledger> {
        if let Err(e) = self.ledger.check_free(self.staged.keys().map(String::as_str), what) {
            let _ = remove_staging(&self.staging);
            self.ledger.state.pending = None;
            let _ = self.ledger.save();
            return Err(e);
        }
        let mut p = self
            .ledger
            .state
            .pending
            .take()
            .context("a change without its journal")?;
        if let Ok(d) = std::fs::File::open(&self.staging) {
            let _ = d.sync_all();
        }
        p.phase = Phase::Swapping;
        p.writes = std::mem::take(&mut self.staged);
        p.removes = removes.iter().filter(|n| self.ledger.owns(n)).cloned().collect();
        self.ledger.state.pending = Some(p.clone());
        self.ledger.save()?;
        self.ledger.swap(&p, &self.staging)?;
        Ok(self.ledger)
    }

    /// Gives the change up: the staged files go, the folder is as it was.
    pub fn abandon(mut self) -> Result<Ledger> {
        remove_staging(&self.staging)?;
        self.ledger.state.pending = None;
        self.ledger.save()?;
        Ok(self.ledger)
    }
}

#[cfg(test)]
mod tests;
