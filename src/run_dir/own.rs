//! The rule between outputs and a run's own folders and names: no output goes into a folder a
//! run keeps for itself, or takes a name rdml keeps for its bookkeeping.

use super::{is_own_folder, is_run_folder};
use anyhow::Result;
use std::path::{Component, Path, PathBuf};

/// `path` as it will resolve once its missing folders are made (`create_dir_all`, then the
/// write): each existing prefix as the system resolves it (links followed), each missing folder
/// appended as it will be made, and a `..` after one undoing it, as it will once it is made
/// (`RUN/new/../checkpoint` is `RUN/checkpoint`; a link to a run's checkpoint, then a new
/// folder, is inside that checkpoint). `None` where the working folder cannot be read.
pub fn resolve_as_created(path: &Path) -> Option<PathBuf> {
    let mut at = std::env::current_dir().ok()?;
    for c in path.components() {
        match c {
            Component::Prefix(_) | Component::RootDir => at = PathBuf::from(c.as_os_str()),
            Component::CurDir => {}
            // `at` is resolved (no link in it), so its parent is the folder `..` names.
            Component::ParentDir => {
                at.pop();
            }
            Component::Normal(name) => {
                let next = at.join(name);
                at = next.canonicalize().unwrap_or(next);
            }
        }
    }
    Some(at)
}

/// The one rule between outputs and a run's own folders: `dir` (a folder an output fills, or the
/// folder an output file lands in) is not, and is not inside, a folder a run keeps for itself
/// (its checkpoints, a replaced run's stash), lexically or as it resolves (`..`, a link into a
/// run's checkpoint): the run's next `train --resume` or `--overwrite` would remove what was
/// written there. `shown` is the output as the user named it.
pub fn refuse_own_folder(dir: &Path, shown: &Path) -> Result<()> {
    refuse_up_from_missing(dir, shown)?;
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let resolved = resolve_as_created(dir);
    let lexical = dir.ancestors().take_while(|a| !a.as_os_str().is_empty());
    let ancestors: Vec<&Path> = lexical.chain(resolved.iter().flat_map(|r| r.ancestors())).collect();
    // By its name in its run first; then by what it holds (a checkpoint's trainer state and
    // weights, a stash's journal): a checkpoint reached under another name (a bind mount) is one.
    let by_name = ancestors.iter().find_map(|inner| {
        let name = inner.file_name().and_then(|n| n.to_str())?;
        let run = inner
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        (is_own_folder(name) && is_run_folder(run)).then(|| (*inner, format!("the rdml run in {}", run.display())))
    });
    let by_content = || {
        ancestors.iter().find_map(|inner| {
            let holds = |f: &str| inner.join(f).is_file();
            (holds(super::STATE) && holds("model.bpk") || holds(super::replace::JOURNAL)).then(|| {
                (
                    *inner,
                    "an rdml run (it holds a run's checkpoint or replaced run)".to_string(),
                )
            })
        })
    };
    if let Some((inner, whose)) = by_name.or_else(by_content) {
        return Err(crate::input_error(format!(
            "{} is inside {}, a folder {whose} keeps for itself (its checkpoint or a replaced run; the run's next \
             ⟨resume!⟩ or ⟨overwrite!⟩ would remove it); choose a path outside it",
            shown.display(),
            inner.display(),
        )));
    }
    refuse_bookkeeping_name(dir)
}

/// Refuses a path that goes up (`..`) out of a folder that does not exist yet (`RUN/new/..`): it
/// names one folder and, once its folders are made, is another (the run itself, or its
/// checkpoint), which every check made on the path as written would miss.
fn refuse_up_from_missing(dir: &Path, shown: &Path) -> Result<()> {
    let mut at = PathBuf::new();
    let mut missing: Option<PathBuf> = None;
    for c in dir.components() {
        if c == Component::ParentDir
            && let Some(m) = &missing
        {
            return Err(crate::input_error(format!(
                "{}: goes up ('..') out of {}, a folder that does not exist yet; name the folder without it",
                shown.display(),
                m.display()
            )));
        }
        at.push(c);
        let link = std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink());
        crate::ensure_input!(
            !link || std::fs::metadata(&at).is_ok(),
            "{}: {} is a symbolic link that leads nowhere (dangling or looping): rdml makes no folder through \
             it; remove it or name another path",
            shown.display(),
            at.display()
        );
        if missing.is_none() && c != Component::ParentDir && std::fs::symlink_metadata(&at).is_err() {
            missing = Some(at.clone());
        }
    }
    Ok(())
}

/// Whether `dir` is a run folder as written or as it will resolve once made (`RUN/new/..` is
/// `RUN`): an output folder that must not be a run's (a comparison's, a scored model's) asks this.
pub fn is_run_folder_resolved(dir: &Path) -> bool {
    is_run_folder(dir) || resolve_as_created(dir).is_some_and(|r| is_run_folder(&r))
}

/// Whether `name` is one rdml gives its own bookkeeping (a run's marker, a ledger, a journal, a
/// staging folder, a replaced run's stash: `.rdml-…`; an `.npy` set's ledger: `.NAME.rdml.json`).
pub fn is_bookkeeping_name(name: &str) -> bool {
    name.starts_with(".rdml-") || (name.starts_with('.') && name.ends_with(".rdml.json"))
}

/// Refuses an output named as rdml names its bookkeeping: writing it would pass for rdml's own
/// record of what it wrote.
pub fn refuse_bookkeeping_name(path: &Path) -> Result<()> {
    match path.file_name().and_then(|n| n.to_str()) {
        Some(name) if is_bookkeeping_name(name) => Err(crate::input_error(format!(
            "{}: '{name}' is a name rdml keeps for its own bookkeeping (a ledger, a marker, a staging folder); \
             choose another name",
            path.display()
        ))),
        _ => Ok(()),
    }
}
