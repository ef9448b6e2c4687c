//! `train --overwrite` of a run: the replaced run's files wait in `.rdml-replaced/` until the new
//! run has a complete checkpoint, so a failure or a kill before then gives the old run back.
//!
//! The move is journaled. Before the first file moves, the stash holds a journal naming its
//! phase and a token that the run's marker also holds: a stash is handled only when the two
//! match, so a folder of that name that rdml did not make is never touched (nothing is inferred
//! from a name). Phases: `moving` (old files on their way into the stash; the new run has
//! written nothing, so whatever is in the run folder is still the old run's), `moved` (every
//! old file stashed; run files in the folder are the new run's), `restoring` (an undo removed
//! the new run's files and is putting the old ones back), `done` (the new run stands; the
//! stash is being emptied). The next `train` into the folder finishes or undoes an
//! interrupted replacement first, and says which.

use super::{
    CKPT, CKPT_OLD, CKPT_TMP, MARKER, RUN_FILES, is_link, lock, remove, remove_leftovers, rename, sync_folder,
};
use anyhow::{Context, Result, bail};
use std::path::Path;

/// Where the replaced run's files wait.
pub(super) const REPLACED: &str = ".rdml-replaced";
/// The stash's journal.
pub(super) const JOURNAL: &str = ".rdml-journal.json";

/// Every name a run writes, checkpoints included: the names a replacement moves.
fn run_names() -> impl Iterator<Item = &'static str> {
    RUN_FILES.iter().copied().chain([CKPT, CKPT_TMP, CKPT_OLD])
}

/// The token a run's marker holds while a replacement is under way.
fn marker_token(dir: &Path) -> Option<String> {
    let v: serde_json::Value = crate::read::record(&dir.join(MARKER))?;
    v.get("replacing")?.as_str().map(str::to_string)
}

/// The stash's journal: `(token, phase)`.
fn journal(stash: &Path) -> Option<(String, String)> {
    let v: serde_json::Value = crate::read::record(&stash.join(JOURNAL))?;
    Some((
        v.get("token")?.as_str()?.to_string(),
        v.get("phase")?.as_str()?.to_string(),
    ))
}

fn write_journal(stash: &Path, token: &str, phase: &str) -> Result<()> {
    crate::atomic::write_json(
        &stash.join(JOURNAL),
        &serde_json::json!({"token": token, "phase": phase}),
    )
}

/// Moves the run's files into the stash (the marker already holds `token`).
pub(super) fn stash_run_files(dir: &Path, token: &str) -> Result<()> {
    let stash = dir.join(REPLACED);
    crate::fault::point("mkdir", &stash);
    std::fs::create_dir(&stash).with_context(|| format!("cannot create {}", stash.display()))?;
    write_journal(&stash, token, "moving")?;
    for n in run_names() {
        let p = dir.join(n);
        if std::fs::symlink_metadata(&p).is_ok() {
            rename(&p, &stash.join(n))?;
        }
    }
    sync_folder(dir)?;
    write_journal(&stash, token, "moved")
}

/// A replacement interrupted by a kill: finished (the new run had stood) or undone (the old run
/// comes back), under the run's lock, before anything else looks at the folder. A stash rdml
/// cannot prove it made is refused, never touched.
pub fn settle_interrupted(dir: &Path) -> Result<()> {
    let stash = dir.join(REPLACED);
    if std::fs::symlink_metadata(&stash).is_err() {
        return Ok(());
    }
    if !dir.join(MARKER).is_file() || is_link(&dir.join(MARKER)) {
        bail!(
            "{} is in a folder that is not an rdml run (no {MARKER}): it is left as it is",
            stash.display()
        );
    }
    let _lock = lock(dir)?;
    if !is_link(&stash) && std::fs::read_dir(&stash).is_ok_and(|d| d.flatten().all(|e| is_journal_temp(&e))) {
        // Made, then killed before its journal stood: nothing had moved.
        return drop_stash(&stash);
    }
    let ours = match (journal(&stash), marker_token(dir)) {
        (Some((token, phase)), Some(marker)) if token == marker && !is_link(&stash) => Some(phase),
        _ => None,
    };
    match ours.as_deref() {
        Some("done") => {
            discard(dir)?;
            crate::notes::note(format!(
                "{}: an interrupted replacement of the run was finished (the new run stands)",
                dir.display()
            ));
        }
        Some(phase @ ("moving" | "moved" | "restoring")) => {
            put_back_after(dir, phase == "moved")?;
            crate::notes::note(format!(
                "{}: a replacement of the run was interrupted before its first checkpoint; the run it replaced \
                 is back as it was",
                dir.display()
            ));
        }
        _ => bail!(
            "{} is not a replacement rdml can prove it made (no journal matching the run's marker): it is left \
             as it is; move it out of the run folder to go on",
            stash.display()
        ),
    }
    Ok(())
}

/// Undoes a replacement in two passes, each repeatable after a kill: the new run's files go
/// (only once every old file was stashed: before that the folder's files are still the old
/// run's), the journal then says `restoring`, and the stashed files come back. A kill in the
/// second pass never removes a file put back (the journal no longer allows removals).
pub(super) fn put_back_after(dir: &Path, new_files_written: bool) -> Result<()> {
    let stash = dir.join(REPLACED);
    if new_files_written {
        // Every old file was stashed first: what bears a run's name here is the new run's, when
        // its record proves it (a checkpoint folder is rdml's whole).
        let record = super::record::ledger(dir)?;
        for n in run_names() {
            let p = dir.join(n);
            let ours = [CKPT, CKPT_TMP, CKPT_OLD, super::record::FILES].contains(&n) || record.owns(n);
            if std::fs::symlink_metadata(&p).is_ok() && !ours {
                bail!(
                    "{}: rdml did not write this file (it appeared while a replacement of the run was under way): \
                     it is left as it is; move it out of the run folder, and the next command puts the replaced \
                     run back",
                    p.display()
                );
            }
        }
        drop(record);
        for n in run_names() {
            remove(&dir.join(n))?;
        }
        remove_leftovers(dir)?;
        if let Some(token) = marker_token(dir).filter(|_| stash.is_dir()) {
            write_journal(&stash, &token, "restoring")?;
        }
    }
    for n in run_names() {
        let (here, kept) = (dir.join(n), stash.join(n));
        if std::fs::symlink_metadata(&kept).is_ok() && std::fs::symlink_metadata(&here).is_err() {
            rename(&kept, &here)?;
        }
    }
    sync_folder(dir)?;
    drop_stash(&stash)
}

/// The new run stands: the replaced run's files go, the journal saying so first.
pub(super) fn discard(dir: &Path) -> Result<()> {
    let stash = dir.join(REPLACED);
    if let Some(token) = marker_token(dir).filter(|_| stash.is_dir()) {
        write_journal(&stash, &token, "done")?;
    }
    for n in run_names() {
        remove(&stash.join(n))?;
    }
    drop_stash(&stash)
}

/// A temporary file of an interrupted journal write (`.NAME.PID.tmp`, as `atomic` names them).
fn is_journal_temp(e: &std::fs::DirEntry) -> bool {
    let name = e.file_name().to_string_lossy().into_owned();
    name.starts_with(&format!(".{JOURNAL}.")) && name.ends_with(".tmp") && e.file_type().is_ok_and(|t| t.is_file())
}

/// Removes the journal (and its temporary files) and the stash, which must be empty then;
/// anything else found in it is not rdml's and stays, with the folder.
fn drop_stash(stash: &Path) -> Result<()> {
    if let Ok(entries) = std::fs::read_dir(stash) {
        for e in entries.flatten().filter(is_journal_temp) {
            remove(&e.path())?;
        }
    }
    remove(&stash.join(JOURNAL))?;
    if std::fs::symlink_metadata(stash).is_err() {
        return Ok(());
    }
    crate::fault::point("remove", stash);
    if std::fs::remove_dir(stash).is_err() {
        crate::notes::note(format!(
            "{} holds files rdml did not put there; they are left as they are",
            stash.display()
        ));
    }
    Ok(())
}
