//! `log.jsonl`: one JSON object per line (`start`, `batch`, `epoch` events), appended by every
//! attempt at a run. Each line carries its attempt number, and each attempt opens with a `start`
//! record saying from which epoch it continues and how many batch records of earlier attempts
//! it supersedes (those of the epochs the interrupted attempt had not finished). A reader keeps,
//! for each epoch, the records of the last attempt that wrote it.

use super::files::open_nofollow;
use anyhow::{Context, Result};
use std::fs::File;
use std::io::Write;
use std::path::Path;

pub struct RunLog {
    file: File,
    attempt: u64,
}

impl RunLog {
    /// Opens the log for an attempt that starts after `from_epoch` finished epochs.
    pub fn open(path: &Path, from_epoch: usize) -> Result<Self> {
        let old = match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_file() => crate::read::bytes(path, crate::read::Follow::NoLinks, crate::read::ANY)?,
            _ => vec![],
        };
        let text = String::from_utf8_lossy(&old);
        let (mut starts, mut superseded) = (0u64, 0usize);
        for v in text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        {
            match v.get("event").and_then(|e| e.as_str()) {
                Some("start") => starts += 1,
                Some("batch") if v.get("epoch").and_then(|e| e.as_u64()).unwrap_or(0) as usize > from_epoch => {
                    superseded += 1
                }
                _ => {}
            }
        }
        // Logs of versions before the start record: their one attempt was the first.
        let attempt = if starts == 0 && !old.is_empty() { 2 } else { starts + 1 };
        if let Some(dir) = path.parent() {
            super::record::will_append_log(if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            })?;
        }
        crate::fault::point("write", path);
        let mut file = open_nofollow(path, true)?;
        // A kill in the middle of a line leaves it unterminated: end it, so the next record is
        // a line of its own.
        if !old.is_empty() && !old.ends_with(b"\n") {
            writeln!(file).with_context(|| format!("cannot write {}", path.display()))?;
        }
        let mut log = Self { file, attempt };
        log.write(serde_json::json!({
            "event": "start",
            "from_epoch": from_epoch,
            "superseded_batch_records": superseded,
            "rdml_version": env!("CARGO_PKG_VERSION"),
        }))?;
        Ok(log)
    }

    /// Appends one record, tagged with the attempt.
    pub fn write(&mut self, mut record: serde_json::Value) -> Result<()> {
        if let Some(o) = record.as_object_mut() {
            o.insert("attempt".into(), self.attempt.into());
        }
        crate::fault::point("write", Path::new(super::LOG));
        writeln!(self.file, "{record}").context("cannot write log.jsonl")
    }
}
