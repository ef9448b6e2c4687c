//! The `out` folder of a model scored on the caller's images (`rdml.robustness(model, …,
//! out=…)`): its files are written through a ledger ([`crate::owned`], `.rdml-scored.json`), so
//! rdml replaces a file there only when it can prove it wrote it, and the record and its report
//! change together: a kill at any point leaves both old or both new once the next call settles
//! the folder.

use crate::owned::Ledger;
use anyhow::Result;
use std::path::{Path, PathBuf};

/// The ledger's name in the folder.
pub const MARKER: &str = ".rdml-scored.json";

/// Checks that `dir` may receive `names` (a new or empty folder, or one whose files of those
/// names rdml wrote); refuses a run folder, whose records are its own. Nothing is created: a call
/// refused later leaves nothing behind.
pub fn check(dir: &Path, names: &[&str]) -> Result<PathBuf> {
    crate::run_dir::refuse_own_folder(dir, dir).map_err(|e| crate::input_error(format!("out: {e:#}")))?;
    crate::ensure_input!(
        !crate::run_dir::is_run_folder_resolved(dir),
        "out: {} is an rdml run folder, whose robustness record is its own model's; choose another folder",
        dir.display()
    );
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return Ok(dir.to_path_buf());
    };
    crate::ensure_input!(
        meta.is_dir(),
        "out: {} exists and is not a folder (a file or a link); expected a folder for the record and report",
        dir.display()
    );
    Ledger::open(dir, MARKER, "out")?.check_free(names.iter().copied(), "out")?;
    Ok(dir.to_path_buf())
}

/// Writes `files` (name, bytes) into `dir` (created when missing) as one change, after [`check`]
/// again: a file that appeared or changed there since is not replaced.
pub fn write(dir: &Path, files: &[(&str, Vec<u8>)]) -> Result<()> {
    let names: Vec<&str> = files.iter().map(|f| f.0).collect();
    check(dir, &names)?;
    let mut change = Ledger::open(dir, MARKER, "out")?.begin()?;
    for (name, bytes) in files {
        change.stage(name, bytes)?;
    }
    change.commit(&[], "out")?;
    Ok(())
}
