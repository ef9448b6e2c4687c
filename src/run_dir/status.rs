//! What a run folder's records say: whether the run finished ([`status`], [`check_finished`]),
//! and which weights a derived record was computed on ([`model_digest`]).

use super::Found;
use super::files::{MODEL, RUN, is_link};
use anyhow::{Result, ensure};
use std::path::Path;

/// What a run's `run.json` says of it (the fields every version of rdml wrote).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct RunStatus {
    pub rdml_version: String,
    pub completed: bool,
    pub epochs: Vec<serde::de::IgnoredAny>,
}

/// `dir`'s run status, or `None` when it has no `run.json` written by rdml (a link is not read).
pub fn status(dir: &Path) -> Option<RunStatus> {
    let p = dir.join(RUN);
    if is_link(&p) {
        return None;
    }
    crate::read::record(&p)
}

/// Checks that `dir` holds a finished run with its weights: the one "is this run finished" of
/// every command that reads a run.
pub fn check_finished(dir: &Path) -> Result<RunStatus> {
    super::settle_interrupted(dir)?;
    let d = dir.display();
    // What the caller named is not a finished run: an input error (missing: not found).
    let not_run = |msg: String| Err(crate::input_error(msg));
    // A folder that cannot be read is the machine's; one that is not a run folder (a file, a
    // checkpoint through a link) is what the caller named.
    let found = super::inspect(dir).map_err(|e| {
        if e.chain().any(|c| c.is::<std::io::Error>()) {
            e
        } else {
            crate::input_error(format!("{e:#}"))
        }
    })?;
    match found {
        Found::Nothing if dir.exists() => return not_run(format!("{d}: not an rdml run folder (it is empty)")),
        Found::Nothing => return Err(crate::not_found(format!("{d}: no such folder"))),
        Found::Foreign => {
            return not_run(format!(
                "{d}: not an rdml run folder (no run.json; a run folder is what training writes into its ⟨out⟩, a compare folder holds compare.json)"
            ));
        }
        Found::Started => {
            return not_run(format!(
                "{d}: an rdml run that stopped before its first epoch ended: it has no checkpoint and no model yet; \
             train it again into the same folder (it starts anew)"
            ));
        }
        Found::Resumable { epochs_done } => {
            return not_run(format!(
                "{d}: an interrupted run, not finished ({epochs_done} epoch(s) done, kept in its checkpoint; no final model yet): \
             resume it (train with ⟨resume!⟩)"
            ));
        }
        Found::Finished { .. } => {}
    }
    let p = dir.join(RUN);
    let run =
        status(dir).ok_or_else(|| crate::input_error(format!("{}: not a run.json written by rdml", p.display())))?;
    crate::ensure_input!(
        crate::read::is_file(&dir.join(MODEL), crate::read::Follow::Links)?,
        "{d}: the run has no model.safetensors"
    );
    Ok(run)
}

/// A finished run's `run.json` as rdml wrote it (its resolved config, epochs and final
/// metrics), after [`check_finished`].
pub fn finished_run_json(dir: &Path) -> Result<String> {
    check_finished(dir)?;
    let p = dir.join(RUN);
    crate::read::text(&p, crate::read::Follow::NoLinks, crate::read::BOOKKEEPING)
}

/// The digest that names a run's weights in every record derived from them (robustness,
/// exported embeddings): `crc32:XXXXXXXX:BYTES` of `model.safetensors`. A record whose digest
/// is not the current model's was computed on other weights.
pub fn model_digest(dir: &Path) -> Result<String> {
    let p = dir.join(MODEL);
    let bytes = crate::read::bytes(&p, crate::read::Follow::NoLinks, crate::read::ANY)?;
    Ok(format!("crc32:{:08x}:{}", crc32fast::hash(&bytes), bytes.len()))
}

/// Checks that the model whose digest was `digest` is still `dir`'s before a record derived
/// from it is written there: a `train --overwrite` or `--resume` that finished meanwhile would
/// otherwise get the old weights' record.
pub fn check_unchanged(dir: &Path, digest: &str, record: &str) -> Result<()> {
    let now = model_digest(dir)?;
    ensure!(
        now == digest,
        "{}: the model changed while this ran (it was {digest}, it is {now}: retrained or \
         replaced meanwhile); {record} not written, since it describes the old weights",
        dir.display()
    );
    Ok(())
}

/// Why `dir` has no checkpoint to resume, in words: what is wrong with its `checkpoint/` state.
pub fn checkpoint_problem(dir: &Path) -> String {
    let p = dir.join(super::CKPT).join(super::STATE);
    let problem = match crate::read::is_file(&p, crate::read::Follow::NoLinks) {
        Err(e) => format!("{e:#}"),
        Ok(false) => format!("{} is missing", p.display()),
        Ok(true) => match crate::read::bookkeeping(&p) {
            Err(e) => format!("{e:#}"),
            Ok(b) => match serde_json::from_slice::<serde_json::Value>(&b) {
                Err(e) => format!("{}: {}", p.display(), crate::read::json_problem(&e)),
                Ok(v) if v.get("epochs_done").and_then(serde_json::Value::as_u64).is_none() => {
                    format!(
                        "{}: no epochs_done count: not a checkpoint state rdml wrote",
                        p.display()
                    )
                }
                Ok(_) => "its checkpoint is not complete".into(),
            },
        },
    };
    format!("{problem}; train the run anew with ⟨overwrite!⟩")
}
