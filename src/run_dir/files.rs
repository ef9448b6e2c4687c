//! The files of a run folder: their names, and the one check of a path rdml reads or writes
//! there (never through a symbolic link), and the run's lock on its marker.

use anyhow::{Context, Result, bail, ensure};
use std::fs::{File, OpenOptions};
use std::path::Path;

/// The trained weights (saved from the evaluation-mode model).
pub const MODEL: &str = "model.safetensors";
/// The resolved experiment config the run trained with.
pub const CONFIG: &str = "config.toml";
/// The run's record: per-epoch metrics and whether it completed ([`super::status()`]).
pub const RUN: &str = "run.json";
/// One JSON line per event (start, epoch, end) of every attempt.
pub const LOG: &str = "log.jsonl";
/// The robustness suite's last table ([`crate::attack::record`]).
pub const ROBUSTNESS: &str = "robustness.json";
/// The certification's last record ([`crate::certify::record`]).
pub const CERTIFY: &str = "certify.json";
/// The self-contained report page.
pub const REPORT: &str = "report.html";
/// The report's retrieval grid, computed on the run's model ([`crate::grid`]).
pub const GRID: &str = "grid.json";
/// What `rdml import` read into the run (`model::import::ImportRecord`).
pub const IMPORT: &str = "import.json";
/// A checkpoint's trainer state, beside its weights.
pub const STATE: &str = "state.json";

/// Whether `p` is a symbolic link (`symlink_metadata`: the link itself, not its target).
pub fn is_link(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

/// Opens a file for writing without following a symbolic link in its last component
/// (`O_NOFOLLOW`): a link planted in a shared folder must not redirect rdml's writes.
pub fn open_nofollow(path: &Path, append: bool) -> Result<File> {
    let mut o = OpenOptions::new();
    o.create(true).write(true);
    if append {
        o.append(true);
    } else {
        o.truncate(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NOFOLLOW);
    }
    o.open(path).with_context(|| {
        if is_link(path) {
            format!(
                "{} is a symbolic link; rdml does not write through links",
                path.display()
            )
        } else {
            format!("cannot open {}", path.display())
        }
    })
}

/// Takes the run's lock (its marker file, created when missing).
pub(super) fn lock(dir: &Path) -> Result<File> {
    let d = dir.display();
    let marker = dir.join(super::MARKER);
    ensure!(
        !is_link(&marker),
        "{} is a symbolic link; rdml does not write through links",
        marker.display()
    );
    crate::read::is_file(&marker, crate::read::Follow::NoLinks)?;
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&marker)
        .with_context(|| format!("cannot create {}", marker.display()))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            bail!("another rdml process is writing the run in {d}; wait for it or choose another ⟨out⟩")
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("cannot lock {}", marker.display()));
        }
    }
    Ok(lock)
}
