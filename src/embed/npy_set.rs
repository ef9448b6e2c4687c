//! `embed`'s NumPy `.npy` set: `NAME.npy` with `NAME.labels.npy`, `NAME.ids.npy` and
//! `NAME.split.npy` beside it, and `NAME.set.json`, its manifest (each member's size and CRC-32).
//!
//! Four files cannot be renamed at once, so the set changes through a ledger of its own
//! (`.NAME.npy.rdml.json`, [`crate::owned`]): the new members and manifest are staged, then
//! swapped in together, and the next command settles a change a kill interrupted: the set is
//! the old one byte for byte or the new one whole. A file of the set's names that rdml did not
//! write (or that changed since) is never replaced, `--overwrite` or not.

use super::Format;
use crate::owned::Ledger;
use anyhow::{Context as _, Result};
use std::path::{Path, PathBuf};

const WHAT: &str = "⟨out⟩";

/// The files `path` stands for (the `.npy` form writes four).
pub fn files(path: &Path) -> Result<Vec<PathBuf>> {
    Ok(match Format::of(path)? {
        Format::Npy => {
            // Its members and ledger are named after it, as text: refused before any work
            // rather than written under a name the user did not give.
            anyhow::ensure!(
                path.file_name().and_then(|n| n.to_str()).is_some(),
                "⟨out⟩ {}: a .npy set's file name must be UTF-8 text (its members are named after it); \
                 rename it, or write a .safetensors or .npz file",
                path.display()
            );
            let stem = path.with_extension("");
            let side = |s: &str| PathBuf::from(format!("{}.{s}.npy", stem.display()));
            vec![path.to_path_buf(), side("labels"), side("ids"), side("split")]
        }
        _ => vec![path.to_path_buf()],
    })
}

/// Every file `write` writes for `path`: the members, and for a `.npy` set its manifest.
pub fn output_files(path: &Path) -> Result<Vec<PathBuf>> {
    let mut v = files(path)?;
    if v.len() > 1 {
        v.push(manifest_path(path));
    }
    Ok(v)
}

/// `NAME.set.json` beside `NAME.npy`: the `.npy` set's manifest (each member's size and CRC-32).
pub fn manifest_path(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}.set.json", path.with_extension("").display()))
}

fn folder(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

fn name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The set's ledger, settled; a set an earlier version wrote is adopted when its manifest
/// proves every member.
fn ledger(path: &Path) -> Result<Ledger> {
    let mut l = Ledger::open(folder(path), &format!(".{}.rdml.json", name(path)), WHAT)?;
    if l.names().next().is_none() && verify_set(path).is_ok() {
        let manifest = manifest_path(path);
        let v: serde_json::Value = serde_json::from_slice(&crate::read::bookkeeping(&manifest)?)?;
        for m in v["members"].as_array().into_iter().flatten() {
            let (Some(f), Some(crc), Some(n)) = (m["file"].as_str(), m["crc32"].as_str(), m["bytes"].as_u64()) else {
                continue;
            };
            l.adopt(f, &format!("crc32:{crc}:{n}"));
        }
        let bytes = crate::read::bookkeeping(&manifest)?;
        l.adopt(&name(&manifest), &crate::owned::digest(&bytes));
    }
    Ok(l)
}

/// Checks, before any work, that `path` may be written (see [`crate::output`]; a `.npy` set's
/// files must each be new or, with `overwrite`, one rdml wrote).
pub fn check_out(path: &Path, overwrite: bool) -> Result<()> {
    let all = output_files(path)?;
    crate::output::check_files(&all, overwrite).context(WHAT)?;
    if all.len() > 1 {
        let names: Vec<String> = all.iter().map(|p| name(p)).collect();
        ledger(path)?.check_free(names.iter().map(String::as_str), WHAT)?;
    }
    Ok(())
}

/// Writes the set's `members` (path, bytes) and its manifest, as one change.
pub(super) fn write(path: &Path, members: Vec<(PathBuf, Vec<u8>)>, meta: &[(&str, String)]) -> Result<()> {
    let mut change = ledger(path)?.begin()?;
    let mut listed = vec![];
    for (file, bytes) in &members {
        change.stage(&name(file), bytes)?;
        listed.push(serde_json::json!({"file": name(file), "bytes": bytes.len(), "crc32": format!("{:08x}", crc32fast::hash(bytes))}));
    }
    let meta: serde_json::Map<String, serde_json::Value> =
        meta.iter().map(|(k, v)| (k.to_string(), v.clone().into())).collect();
    let mut manifest = serde_json::to_string_pretty(&serde_json::json!({"members": listed, "meta": meta}))?;
    manifest.push('\n');
    change.stage(&name(&manifest_path(path)), manifest.as_bytes())?;
    change.commit(&[], WHAT)?;
    Ok(())
}

/// Checks that the `.npy` set at `path` is complete and consistent: its manifest exists and
/// every member has the size and CRC-32 it lists.
pub fn verify_set(path: &Path) -> Result<()> {
    let manifest = manifest_path(path);
    let bytes = crate::read::bookkeeping(&manifest).with_context(|| {
        format!(
            "{}: no manifest: the set is incomplete (its writing was interrupted)",
            manifest.display()
        )
    })?;
    let v: serde_json::Value = crate::read::json(&bytes, &manifest, "the set cannot be verified: write it again")?;
    let members = v["members"]
        .as_array()
        .with_context(|| format!("{}: no members", manifest.display()))?;
    let dir = folder(path);
    anyhow::ensure!(
        members.len() == files(path)?.len(),
        "{}: expected {} members",
        manifest.display(),
        files(path)?.len()
    );
    let expected: Vec<String> = files(path)?.iter().map(|p| name(p)).collect();
    for m in members {
        let name = m["file"].as_str().unwrap_or_default();
        // Only the names rdml gives a set's members: never `../x`, an absolute path, another file.
        anyhow::ensure!(
            expected.iter().any(|e| e == name),
            "{}: member '{}' is not one of the set's files ({}): the manifest is not as rdml wrote it; nothing \
             was read through it",
            manifest.display(),
            name.escape_debug(),
            expected.join(", ")
        );
        let bytes = crate::read::bytes(&dir.join(name), crate::read::Follow::NoLinks, crate::read::ANY)
            .with_context(|| format!("{name}: a member of the set is missing"))?;
        let crc = format!("{:08x}", crc32fast::hash(&bytes));
        anyhow::ensure!(
            Some(bytes.len() as u64) == m["bytes"].as_u64() && Some(crc.as_str()) == m["crc32"].as_str(),
            "{name}: not the file {} lists (another write replaced it): the set is inconsistent",
            manifest.display()
        );
    }
    Ok(())
}
