//! Writing results: atomic files (temporary file, then rename), JSON, and plain-text tables.

use crate::eval::Metrics;
use anyhow::{Context, Result, ensure};
use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` through a temporary file in the same folder, so that a reader never
/// sees a half-written file. The temporary file is created exclusively (never through a link
/// planted under its name) and removed if the write fails; the rename replaces a link at `path`
/// rather than writing through it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    check_writable(path)?;
    let tmp = temp_name(path);
    let _ = std::fs::remove_file(&tmp);
    let written = (|| -> Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .with_context(|| format!("cannot create a file in {}", parent(path).display()))?;
        f.write_all(bytes)
            .with_context(|| format!("cannot write {}", path.display()))?;
        f.sync_all().ok();
        std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

fn parent(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// `.NAME.PID.tmp` beside `path`: hidden, and distinct per process.
fn temp_name(path: &Path) -> std::path::PathBuf {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("out");
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

/// Checks, before any work, that `path` can be written as a file: its folder exists (or can be
/// made) and `path` is not a folder. Commands call it on their `--out` before computing.
pub fn check_writable(path: &Path) -> Result<()> {
    ensure!(
        !path.as_os_str().is_empty() && path.file_name().is_some(),
        "{}: expected a file name",
        path.display()
    );
    ensure!(!path.is_dir(), "{} is a folder; expected a file name", path.display());
    let dir = parent(path);
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    ensure!(dir.is_dir(), "{} is not a folder", dir.display());
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        let ok = unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0;
        ensure!(ok, "{}: permission denied (cannot write files there)", dir.display());
    }
    Ok(())
}

pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut s = serde_json::to_string_pretty(value)?;
    s.push('\n');
    write_atomic(path, s.as_bytes())
}

/// A two-column table of the metrics, for the terminal.
pub fn metrics_table(m: &Metrics) -> String {
    let mut rows: Vec<(String, String)> = vec![];
    for (k, v) in &m.retrieval.recall {
        rows.push((format!("Recall@{k}"), format!("{v:.4}")));
    }
    rows.push(("MAP@R".into(), format!("{:.4}", m.retrieval.map_at_r)));
    rows.push((
        "mAP@10 (robrank's \"mAP@R\")".into(),
        format!("{:.4}", m.retrieval.map_at_10),
    ));
    rows.push(("mAP".into(), format!("{:.4}", m.retrieval.map)));
    rows.push(("R-precision".into(), format!("{:.4}", m.retrieval.r_precision)));
    if let Some(v) = m.nmi {
        rows.push(("NMI".into(), format!("{v:.4}")));
    }
    if let Some(v) = m.pi_ratio {
        rows.push(("π_ratio".into(), format!("{v:.4}")));
    }
    rows.push((
        "queries (lone)".into(),
        format!("{} ({})", m.retrieval.queries, m.retrieval.lone_queries),
    ));
    let w = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in rows {
        out.push_str(&format!("  {k:<w$}  {v:>10}\n"));
    }
    out
}

/// One attack's scores, one per line, for the terminal.
pub fn attack_table(r: &crate::attack::score::AttackResult) -> String {
    r.scores
        .iter()
        .map(|s| format!("  {:<13} {:>8.3}\n", s.name.name(), s.value))
        .collect()
}

/// The ERS/ARS table of a suite run, for the terminal (without its closing ERS/ARS line).
pub fn robustness_table(r: &crate::attack::score::Robustness) -> String {
    let mut s = format!("{:<6} {:>9} {:>9} {:>9}\n", "column", "raw", "ERS term", "ARS term");
    for row in &r.rows {
        s.push_str(&format!(
            "{:<6} {:>9.3} {:>9.1} {:>9}\n",
            row.column.name(),
            row.raw,
            row.ers_term,
            row.ars_term.map(|v| format!("{v:.1}")).unwrap_or("-".into())
        ));
    }
    s
}

/// Each column's mean ± std over repeated runs of one attack, for the terminal.
pub fn spread_table(rows: &[(crate::attack::column::Column, crate::attack::score::MeanStd)]) -> String {
    rows.iter()
        .map(|(c, m)| format!("  {:<13} {:>8.3} ± {:.3}\n", c.name(), m.mean, m.std))
        .collect()
}

/// The raw ERS columns as mean ± std over repeated suite runs, for the terminal.
pub fn robustness_spread_table(s: &crate::attack::score::RobustnessSpread) -> String {
    let mut out = format!("{:<6} {:>9} {:>9}\n", "column", "raw mean", "std");
    for (c, m) in &s.raw {
        out.push_str(&format!("{:<6} {:>9.3} {:>9.3}\n", c.name(), m.mean, m.std));
    }
    out
}
