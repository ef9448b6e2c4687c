//! Writing results: atomic files (temporary file, then rename), JSON, and plain-text tables.

use crate::eval::Metrics;
use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` through a temporary file in the same folder, so that a reader never
/// sees a half-written file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let tmp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("out")
    ));
    {
        let mut f = std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        f.write_all(bytes)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.sync_all().ok();
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))?;
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
