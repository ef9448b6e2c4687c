//! A run folder: claimed by a marker file, held by a lock while one process writes it, never
//! clobbered without being asked, and a checkpoint swap after which a kill at any moment leaves
//! a complete checkpoint to resume from.
//!
//! rdml deletes only what it wrote: the run's own files, in a folder that carries its marker
//! (or, for runs written before the marker existed, a `run.json` that rdml wrote).

pub mod files;
pub mod log;
mod own;
pub mod record;
mod recover;
mod replace;
pub mod seal;
pub mod status;

pub use crate::owned::{new_token, remove_file};
pub use files::*;
pub use log::RunLog;
pub use own::{
    is_bookkeeping_name, is_run_folder_resolved, refuse_bookkeeping_name, refuse_own_folder, resolve_as_created,
};
pub use record::{keep_record, put, put_json};
pub use replace::settle_interrupted;
pub use status::{
    RunStatus, check_finished, check_unchanged, checkpoint_problem, finished_run_json, model_digest, status,
};

use anyhow::{Context, Result, bail, ensure};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The marker file that makes a folder an rdml run (JSON: the version that claimed it).
pub const MARKER: &str = ".rdml-run";
const CKPT: &str = "checkpoint";
const CKPT_TMP: &str = "checkpoint.tmp";
const CKPT_OLD: &str = "checkpoint.old";
use replace::REPLACED;
/// Every file a run writes besides its checkpoint folders: the only ones `--overwrite` removes.
const RUN_FILES: &[&str] = &[
    MODEL,
    CONFIG,
    RUN,
    LOG,
    "report.json",
    ROBUSTNESS,
    CERTIFY,
    REPORT,
    GRID,
    IMPORT,
    record::FILES,
];

/// How `train` may treat what is already in its output folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A new run: the folder must be new, empty, or a run with no finished epoch.
    New,
    /// Continue from the newest complete checkpoint.
    Resume,
    /// Replace the run in the folder (only rdml's own files are removed).
    Overwrite,
}

/// What a folder holds, as far as a run is concerned.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    /// No folder, or an empty one.
    Nothing,
    /// A folder with other content and no marker: not rdml's to write into.
    Foreign,
    /// An rdml run with no complete checkpoint (stopped in its first epoch).
    Started,
    /// An rdml run with `epochs_done` epochs in its newest complete checkpoint.
    Resumable { epochs_done: usize },
    /// A finished rdml run (`run.json` says completed).
    Finished { epochs: usize },
}

/// A claimed run folder; the lock on its marker is held while this lives.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
    _lock: File,
}

/// Removes `p` if it exists: a folder recursively, a file or a link (never its target).
fn remove(p: &Path) -> Result<()> {
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return Ok(());
    };
    crate::fault::point("remove", p);
    let r = if m.is_dir() {
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_file(p)
    };
    r.with_context(|| format!("cannot remove {}", p.display()))
}

/// The epochs of a complete checkpoint folder: `state.json` is written last, so a folder whose
/// `state.json` parses holds every file.
fn checkpoint_epochs(dir: &Path) -> Option<usize> {
    if is_link(dir) {
        return None;
    }
    let v: serde_json::Value = crate::read::record(&dir.join(STATE))?;
    v.get("epochs_done")?.as_u64().map(|e| e as usize)
}

/// A `run.json` written by rdml: `(completed, epochs)`.
fn run_json(dir: &Path) -> Option<(bool, usize)> {
    status(dir).map(|s| (s.completed, s.epochs.len()))
}

/// Whether `dir` is an rdml run folder (its marker, or a `run.json` that rdml wrote).
pub fn is_run_folder(dir: &Path) -> bool {
    dir.join(MARKER).exists() || run_json(dir).is_some()
}

/// Whether `name` is a file or folder a run writes for itself (its results, checkpoints,
/// marker): the names no output option may take inside a run folder.
pub fn is_own_file(name: &str) -> bool {
    RUN_FILES
        .iter()
        .chain(&[CKPT, CKPT_TMP, CKPT_OLD, MARKER])
        .any(|n| *n == name)
}

/// Whether `name` is a folder a run keeps for itself (its checkpoints, a replaced run's stash):
/// nothing but rdml writes inside it.
pub fn is_own_folder(name: &str) -> bool {
    [CKPT, CKPT_TMP, CKPT_OLD, REPLACED].contains(&name)
}

/// What `dir` holds.
pub fn inspect(dir: &Path) -> Result<Found> {
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Nothing),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", dir.display())),
    };
    ensure!(meta.is_dir(), "{} exists and is not a folder", dir.display());
    let report = run_json(dir);
    let ours = dir.join(MARKER).is_file() && !is_link(&dir.join(MARKER)) || report.is_some();
    if !ours {
        let empty = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .next()
            .is_none();
        return Ok(if empty { Found::Nothing } else { Found::Foreign });
    }
    if let Some(link) = [CKPT, CKPT_TMP, CKPT_OLD]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| is_link(p))
    {
        bail!(
            "{} is a symbolic link: rdml neither reads nor replaces a run's checkpoint through a link; \
             put the checkpoint folder itself there (or remove the link) and run again",
            link.display()
        );
    }
    // A run's own files are plain files: a pipe or a device there is named, never taken for a
    // file that is missing (a run "not finished", a model "removed").
    for name in [MARKER, RUN, CONFIG, MODEL] {
        crate::read::is_file(&dir.join(name), crate::read::Follow::Links)?;
    }
    if let Some((true, epochs)) = report {
        return Ok(Found::Finished { epochs });
    }
    Ok(match newest_checkpoint(dir) {
        Some((_, epochs_done)) => Found::Resumable { epochs_done },
        None => Found::Started,
    })
}

/// The newest complete checkpoint among the three names the swap uses.
fn newest_checkpoint(dir: &Path) -> Option<(PathBuf, usize)> {
    [CKPT, CKPT_TMP, CKPT_OLD]
        .iter()
        .filter_map(|n| {
            let p = dir.join(n);
            checkpoint_epochs(&p).map(|e| (p, e))
        })
        // The first of equals wins: `checkpoint/` before the others.
        .fold(None, |best: Option<(PathBuf, usize)>, c| match best {
            Some(b) if b.1 >= c.1 => Some(b),
            _ => Some(c),
        })
}

/// Temporary files of a run's interrupted writes: `.NAME.PID.tmp` (as [`crate::atomic`] names
/// them) or `.NAME.tmp` of a name the run writes, and `model.safetensors.tmp`; nothing else.
fn remove_leftovers(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let temp_of_own = name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".tmp"))
            .is_some_and(|n| {
                is_own_file(n)
                    || n.rsplit_once('.').is_some_and(|(own, pid)| {
                        is_own_file(own) && !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())
                    })
            });
        if (temp_of_own || name == "model.safetensors.tmp") && !e.file_type()?.is_dir() {
            remove(&e.path())?;
        }
    }
    Ok(())
}

impl RunDir {
    /// Claims `dir` for a run started as `start`; nothing is removed or written unless the
    /// folder is rdml's and `start` allows it.
    pub fn open(dir: &Path, start: Start) -> Result<Self> {
        refuse_own_folder(dir, dir)?;
        replace::settle_interrupted(dir)?;
        let found = inspect(dir)?;
        let d = dir.display();
        match (&found, start) {
            (Found::Foreign, _) => bail!(
                "{d} is not empty and is not an rdml run folder (no {MARKER} file): rdml writes a run only into a new or empty folder, or one of its own runs; choose another ⟨out⟩"
            ),
            (Found::Finished { epochs }, Start::New) => bail!(
                "{d} holds a finished run ({epochs} epochs): pass ⟨resume!⟩ to continue it (with more ⟨epochs⟩), ⟨overwrite!⟩ to replace it, or choose another ⟨out⟩"
            ),
            (Found::Resumable { epochs_done }, Start::New) => bail!(
                "{d} holds an interrupted run ({epochs_done} epochs done): pass ⟨resume!⟩ to continue it, ⟨overwrite!⟩ to replace it, or choose another ⟨out⟩"
            ),
            (Found::Nothing | Found::Started, Start::Resume) => bail!(
                "{d}: no checkpoint to resume (the run was stopped before its first epoch ended, or never started); start it again without ⟨resume!⟩"
            ),
            _ => {}
        }
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {d}"))?;
        let lock = lock(dir)?;
        if !matches!(found, Found::Nothing) {
            record::check_ours(dir)?;
        }
        let mut f = &lock;
        let token = new_token();
        let mut marker = serde_json::json!({"rdml_version": env!("CARGO_PKG_VERSION"), "ledger": record::FILES});
        if start == Start::Overwrite && !matches!(found, Found::Nothing) {
            marker["replacing"] = token.clone().into();
        }
        crate::fault::point("write", &dir.join(MARKER));
        f.set_len(0)?;
        writeln!(f, "{marker}").with_context(|| format!("cannot write {}", dir.join(MARKER).display()))?;
        let run = Self {
            path: dir.to_path_buf(),
            _lock: lock,
        };
        run.remove_leftovers()?;
        match (found, start) {
            // A run killed in its first epoch has nothing to keep.
            (Found::Started, Start::New) => run.remove_run_files()?,
            // A replaced run is kept aside until the new one has a complete checkpoint (a new or
            // empty folder has none: its marker holds no token, so nothing is stashed).
            (Found::Nothing, Start::Overwrite) => {}
            (_, Start::Overwrite) => replace::stash_run_files(dir, &token)?,
            _ => run.settle_checkpoint()?,
        }
        Ok(run)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    fn remove_leftovers(&self) -> Result<()> {
        remove_leftovers(&self.path)
    }

    /// A replacement that failed: the new run's files go, the replaced run's come back.
    pub fn abandon_replacement(&self) -> Result<()> {
        if self.file(REPLACED).is_dir() {
            replace::put_back_after(&self.path, true)?;
        }
        Ok(())
    }

    fn remove_run_files(&self) -> Result<()> {
        for n in RUN_FILES.iter().chain(&[CKPT, CKPT_TMP, CKPT_OLD]) {
            remove(&self.file(n))?;
        }
        Ok(())
    }

    /// Makes `checkpoint/` the newest complete checkpoint and removes the other two names.
    /// Each step leaves that checkpoint under some name, so a kill here loses nothing either.
    pub fn settle_checkpoint(&self) -> Result<()> {
        let (ck, tmp, old) = (self.file(CKPT), self.file(CKPT_TMP), self.file(CKPT_OLD));
        match newest_checkpoint(&self.path) {
            Some((best, _)) if best == tmp => {
                remove(&old)?;
                if ck.exists() {
                    rename(&ck, &old)?;
                }
                rename(&tmp, &ck)?;
            }
            Some((best, _)) if best == old => {
                remove(&tmp)?;
                remove(&ck)?;
                rename(&old, &ck)?;
            }
            _ => remove(&tmp)?,
        }
        remove(&old)
    }

    /// The folder of the newest complete checkpoint, after [`settle_checkpoint`](Self::settle_checkpoint).
    pub fn checkpoint(&self) -> Option<PathBuf> {
        newest_checkpoint(&self.path).map(|c| c.0)
    }

    /// Writes a new checkpoint with `write` (into an empty folder; it must write `state.json`
    /// last) and swaps it in: `checkpoint/` → `checkpoint.old/`, `checkpoint.tmp/` →
    /// `checkpoint/`, then `checkpoint.old/` is removed. Killed at any moment, the folder keeps
    /// a complete checkpoint under one of the three names; resume takes the newest.
    pub fn save_checkpoint(&self, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
        let (ck, tmp, old) = (self.file(CKPT), self.file(CKPT_TMP), self.file(CKPT_OLD));
        remove(&tmp)?;
        crate::fault::point("mkdir", &tmp);
        std::fs::create_dir(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        crate::fault::point("write", &tmp);
        write(&tmp)?;
        sync_folder(&tmp)?;
        remove(&old)?;
        if ck.exists() {
            rename(&ck, &old)?;
        }
        rename(&tmp, &ck)?;
        remove(&old)?;
        // The new run stands: the run it replaced goes.
        if self.file(REPLACED).is_dir() {
            replace::discard(&self.path)?;
        }
        Ok(())
    }
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    crate::fault::point("rename", to);
    std::fs::rename(from, to).with_context(|| format!("cannot move {} to {}", from.display(), to.display()))
}

/// Flushes every file of `dir` and the folder itself to the disk, so that a complete
/// `state.json` after a power cut still means complete files.
fn sync_folder(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_file() {
            File::open(e.path())?.sync_all()?;
        }
    }
    File::open(dir)?.sync_all().ok();
    Ok(())
}

/// The top-level keys (dotted) where two TOML documents differ, for messages that say what
/// changed.
pub fn config_diff(a: &str, b: &str) -> Vec<String> {
    fn walk(prefix: &str, a: Option<&toml::Value>, b: Option<&toml::Value>, out: &mut Vec<String>) {
        match (a, b) {
            (Some(toml::Value::Table(x)), Some(toml::Value::Table(y))) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&p, x.get(k), y.get(k), out);
                }
            }
            (x, y) if x != y => out.push(prefix.to_string()),
            _ => {}
        }
    }
    let (Ok(x), Ok(y)) = (a.parse::<toml::Table>(), b.parse::<toml::Table>()) else {
        return vec!["(unreadable config)".into()];
    };
    let mut out = vec![];
    walk("", Some(&toml::Value::Table(x)), Some(&toml::Value::Table(y)), &mut out);
    out
}

#[cfg(test)]
mod tests;
