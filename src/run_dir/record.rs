//! The record of the files rdml wrote into a run folder: a ledger ([`crate::owned`]) that holds
//! each file's digest, journaled with every write. rdml stashes, replaces or removes a run's file
//! only when the record proves that rdml wrote it and that it has not changed since: a file of a
//! run's name that the record does not hold with its current bytes is the user's, and a command
//! that would replace it refuses before any work. Checkpoint folders are rdml's whole: rdml makes
//! them, and no output of any command may be written inside one ([`crate::output`]).

use super::{LOG, MARKER, RUN_FILES, status};
use crate::owned::Ledger;
use anyhow::Result;
use std::path::Path;

/// The run folder's ledger.
pub const FILES: &str = ".rdml-files.json";
const WHAT: &str = "the run folder";

/// Whether the run in `dir` was written by a version that kept no record: its marker does not
/// name the ledger (or it has no marker and rdml's `run.json`).
fn predates_record(dir: &Path) -> bool {
    match crate::read::bookkeeping(&dir.join(MARKER)) {
        Ok(b) => serde_json::from_slice::<serde_json::Value>(&b)
            .ok()
            .and_then(|v| v.get("ledger").cloned())
            .is_none(),
        Err(_) => status(dir).is_some(),
    }
}

/// The run's record, with a change a killed command left settled (waiting for another process's
/// write, which is one short change). A run an earlier version wrote has its files recorded as
/// they are, once, with a note: they are the run's by its marker, the only proof that version kept.
pub fn ledger(dir: &Path) -> Result<Ledger> {
    let mut l = Ledger::open_locked(dir, FILES, WHAT, true)?;
    if !l.exists() && !predates_record(dir) {
        let names: Vec<&str> = RUN_FILES.iter().copied().filter(|n| *n != FILES).collect();
        super::recover::rerecord(dir, &mut l, FILES, &names)?;
    } else if !l.exists() {
        let names: Vec<&str> = RUN_FILES.iter().copied().filter(|n| *n != FILES).collect();
        let adopted = l.adopt_as_is(&names)?;
        if !adopted.is_empty() {
            crate::notes::note(format!(
                "{}: a run written before rdml recorded its files; its {} are recorded as the run's from now on",
                dir.display(),
                adopted.join(", ")
            ));
        }
    }
    Ok(l)
}

/// Refuses, before any work, a run folder holding a file of a run's name that rdml cannot prove
/// it wrote: the command would replace it.
pub fn check_ours(dir: &Path) -> Result<()> {
    let l = ledger(dir)?;
    for n in RUN_FILES.iter().filter(|n| **n != FILES) {
        let p = dir.join(n);
        if std::fs::symlink_metadata(&p).is_ok() && !l.owns(n) {
            return Err(crate::input_error(format!(
                "{}: rdml did not write this file (or it changed since rdml did): it is left as it is, and the run \
                 is not touched; move it out of the run folder and run again",
                p.display()
            )));
        }
    }
    Ok(())
}

/// Writes the run's file `name`, journaled in the record: a kill leaves the old file or the new one.
pub fn put(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    debug_assert!(RUN_FILES.contains(&name), "{name} is not a run's file");
    ledger(dir)?.put(name, bytes, WHAT)?;
    Ok(())
}

/// [`put`] of `value` as pretty JSON with a final newline.
pub fn put_json<T: serde::Serialize>(dir: &Path, name: &str, value: &T) -> Result<()> {
    put(dir, name, &crate::atomic::json_bytes(value)?)
}

/// Keeps a scoring record (`robustness.json`, `certify.json`) in the run folder, the one rule of
/// every job that scores a run: refused when the model changed since it was read (`digest`; the
/// numbers describe other weights), a warning when the folder cannot take it (the record is still
/// the caller's). Returns whether it was written.
pub fn keep_record<T: serde::Serialize>(dir: &Path, digest: Option<&str>, name: &str, record: &T) -> Result<bool> {
    if let Some(d) = digest {
        status::check_unchanged(dir, d, name)?;
    }
    match put_json(dir, name, record) {
        Ok(()) => Ok(true),
        Err(e) => {
            crate::notes::warn(format!("the run folder's {name} not written: {e:#}"));
            Ok(false)
        }
    }
}

/// Records, before the first append, that rdml is about to append to the run's log.
pub fn will_append_log(dir: &Path) -> Result<()> {
    ledger(dir)?.will_append(LOG, WHAT)
}
