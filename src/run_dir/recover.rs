//! A run folder whose record of files (`.rdml-files.json`) is gone: rdml re-records the files it
//! can prove it wrote, from its own records agreeing with each other, and names the rest (which
//! stay the user's until moved away). The proofs:
//! - `run.json`: its epochs are the checkpoint's history (the checkpoint folder is rdml's whole);
//! - `config.toml`: it reads as the config `run.json` holds (floats to single precision);
//! - `model.safetensors`, `grid.json`, `robustness.json`: the model's digest is the one the
//!   records derived from it hold (each record written from those very weights);
//! - `log.jsonl`: every line an event rdml logs (rdml only appends to it);
//! - `report.html`: its seal holds for the page, the run's `run.json` and its model
//!   ([`super::seal`]).

use super::{CERTIFY, CKPT, CONFIG, GRID, LOG, MODEL, REPORT, ROBUSTNESS, RUN, STATE};
use crate::owned::Ledger;
use crate::read::{BOOKKEEPING, Follow, bytes};
use anyhow::Result;
use serde_json::Value;
use std::path::Path;

/// Whether two config values are the same, floats compared at single precision (TOML and JSON
/// print an `f32` field differently) and a JSON `null` the same as a key TOML leaves out.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => (x - y).abs() <= 1e-6 * x.abs().max(y.abs()).max(1e-30),
            _ => x == y,
        },
        (Value::Object(x), Value::Object(y)) => {
            let keys = x.keys().chain(y.keys());
            keys.into_iter()
                .all(|k| same(x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null)))
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same(v, w)),
        _ => a == b,
    }
}

/// The names among a run's files that rdml can prove it wrote, by the proofs above.
fn proven(dir: &Path) -> Vec<&'static str> {
    let mut out = vec![];
    let run = crate::read::record::<Value>(&dir.join(RUN));
    let history = crate::read::record::<Value>(&dir.join(CKPT).join(STATE)).and_then(|s| s.get("history").cloned());
    if let (Some(r), Some(h)) = (&run, &history)
        && r.get("epochs").is_some_and(|e| same(e, h))
    {
        out.push(RUN);
    }
    let config = crate::read::text(&dir.join(CONFIG), Follow::NoLinks, BOOKKEEPING)
        .ok()
        .and_then(|t| toml::from_str::<Value>(&t).ok());
    if let (Some(r), Some(c)) = (out.contains(&RUN).then_some(run.as_ref()).flatten(), &config)
        && r.get("config").is_some_and(|rc| same(rc, c))
    {
        out.push(CONFIG);
    }
    if let Ok(model) = super::model_digest(dir) {
        let derived: Vec<&'static str> = [GRID, ROBUSTNESS, CERTIFY]
            .into_iter()
            .filter(|n| {
                crate::read::record::<Value>(&dir.join(n))
                    .is_some_and(|v| v.get("model_digest") == Some(&Value::from(model.clone())))
            })
            .collect();
        if !derived.is_empty() {
            out.push(MODEL);
            out.extend(derived);
        }
    }
    let log = bytes(&dir.join(LOG), Follow::NoLinks, crate::read::ANY).ok();
    if log.is_some_and(|b| {
        String::from_utf8_lossy(&b)
            .lines()
            .all(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v.get("event").is_some_and(Value::is_string)))
    }) {
        out.push(LOG);
    }
    // The seal ties the page to run.json and the model; it proves the page only with them.
    if out.contains(&RUN)
        && out.contains(&MODEL)
        && bytes(&dir.join(REPORT), Follow::NoLinks, crate::read::ANY).is_ok_and(|b| super::seal::sealed(dir, &b))
    {
        out.push(REPORT);
    }
    out
}

/// Re-records in `l` the run files of `dir` rdml can prove it wrote, and says which were
/// re-recorded and which were not (those stay the user's: a command that would replace one
/// refuses until it is moved away).
pub(super) fn rerecord(dir: &Path, l: &mut Ledger, ledger_name: &str, files: &[&str]) -> Result<()> {
    let present: Vec<&str> = files
        .iter()
        .copied()
        .filter(|n| std::fs::symlink_metadata(dir.join(n)).is_ok())
        .collect();
    if present.is_empty() {
        return Ok(());
    }
    let proven = proven(dir);
    let (yes, no): (Vec<&str>, Vec<&str>) = present.iter().partition(|n| proven.contains(n));
    let logs: Vec<&str> = yes.iter().copied().filter(|n| *n == LOG).collect();
    let whole: Vec<&str> = yes.iter().copied().filter(|n| *n != LOG).collect();
    l.adopt_as_is(&whole)?;
    for n in logs {
        l.adopt_appended(n)?;
    }
    let mut said = format!(
        "{}: the run's record of its files ({}) was missing; rdml re-recorded the files its other records prove it \
         wrote ({})",
        dir.display(),
        ledger_name,
        if yes.is_empty() {
            "none".to_string()
        } else {
            yes.join(", ")
        }
    );
    if !no.is_empty() {
        said.push_str(&format!(
            "; not proven rdml's, so left as the user's: {} (move it out of the run folder for a command that \
             would replace it)",
            no.join(", ")
        ));
    }
    crate::notes::note(said);
    Ok(())
}
