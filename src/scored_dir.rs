//! The `out` folder of a model scored on the caller's images (`rdml.robustness(model, …,
//! out=…)`): rdml replaces a file there only when it can prove it wrote it. A marker
//! (`.rdml-scored.json`) lists, for each file rdml writes, the digests it may have; a change is
//! journaled: the marker first admits the old and the new digest, then each file is replaced
//! (temporary file and rename), then the marker keeps the new digest alone. A kill at any point
//! leaves every file old or new, and the next call recognises both.

use anyhow::{Context as _, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The marker's name in the folder.
pub const MARKER: &str = ".rdml-scored.json";

type Digests = BTreeMap<String, Vec<String>>;

fn digest(bytes: &[u8]) -> String {
    format!("crc32:{:08x}:{}", crc32fast::hash(bytes), bytes.len())
}

fn read_marker(dir: &Path) -> Result<Digests> {
    let p = dir.join(MARKER);
    if !p.exists() {
        return Ok(Digests::new());
    }
    let bytes = std::fs::read(&p).with_context(|| format!("cannot read {}", p.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        crate::input_error(format!(
            "out: {} is not a marker rdml wrote ({e}); choose another folder",
            p.display()
        ))
    })
}

fn write_marker(dir: &Path, d: &Digests) -> Result<()> {
    crate::atomic::write_json(&dir.join(MARKER), d)
}

/// Checks that `dir` may receive `names` (a new or empty folder, or one whose files of those
/// names rdml wrote); refuses a run folder, whose records are its own. Nothing is created: a call
/// refused later leaves nothing behind.
pub fn check(dir: &Path, names: &[&str]) -> Result<PathBuf> {
    if let Ok(meta) = std::fs::symlink_metadata(dir) {
        crate::ensure_input!(
            meta.is_dir(),
            "out: {} exists and is not a folder (a file or a link); expected a folder for the record and report",
            dir.display()
        );
        crate::ensure_input!(
            !crate::run_dir::is_run_folder(dir),
            "out: {} is an rdml run folder, whose robustness record is its own model's; choose another folder",
            dir.display()
        );
    } else {
        return Ok(dir.to_path_buf());
    }
    let known = read_marker(dir)?;
    for name in names {
        let p = dir.join(name);
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if !meta.is_file() {
            return Err(crate::input_error(format!(
                "out: {} exists and is not a regular file; rdml does not replace it",
                p.display()
            )));
        }
        let now = digest(&std::fs::read(&p).with_context(|| format!("cannot read {}", p.display()))?);
        crate::ensure_input!(
            known.get(*name).is_some_and(|d| d.contains(&now)),
            "out: {} exists and rdml did not write it (or it changed since); choose another folder or move it away",
            p.display()
        );
    }
    Ok(dir.to_path_buf())
}

/// Writes `files` (name, bytes) into `dir` (created when missing), journaled as the module says,
/// after [`check`] again: a file that appeared or changed there since is not replaced.
pub fn write(dir: &Path, files: &[(&str, Vec<u8>)]) -> Result<()> {
    let names: Vec<&str> = files.iter().map(|f| f.0).collect();
    check(dir, &names)?;
    std::fs::create_dir_all(dir).with_context(|| format!("out: cannot create {}", dir.display()))?;
    let mut known = read_marker(dir)?;
    for (name, bytes) in files {
        let old = std::fs::read(dir.join(name)).ok().map(|b| digest(&b));
        let entry = known.entry(name.to_string()).or_default();
        entry.retain(|d| Some(d) == old.as_ref());
        entry.push(digest(bytes));
    }
    write_marker(dir, &known)?;
    for (name, bytes) in files {
        crate::atomic::write_atomic(&dir.join(name), bytes)?;
    }
    for (name, bytes) in files {
        known.insert(name.to_string(), vec![digest(bytes)]);
    }
    write_marker(dir, &known)
}
