//! Results as plain-text tables for the terminal: metrics, one attack, the ERS/ARS table.

use crate::eval::Metrics;

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
pub fn attack_table(r: &crate::attack::result::AttackResult) -> String {
    r.scores
        .iter()
        .map(|s| format!("  {:<13} {:>8.3}\n", s.name.name(), s.value))
        .collect()
}

/// The ERS/ARS table of a suite run, for the terminal (without its closing ERS/ARS line).
pub fn robustness_table(r: &crate::attack::robustness::Robustness) -> String {
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
pub fn spread_table(rows: &[(crate::attack::column::Column, crate::attack::result::MeanStd)]) -> String {
    rows.iter()
        .map(|(c, m)| format!("  {:<13} {:>8.3} ± {:.3}\n", c.name(), m.mean, m.std))
        .collect()
}

/// The raw ERS columns as mean ± std over repeated suite runs, for the terminal.
pub fn robustness_spread_table(s: &crate::attack::robustness::RobustnessSpread) -> String {
    let mut out = format!("{:<6} {:>9} {:>9}\n", "column", "raw mean", "std");
    for (c, m) in &s.raw {
        out.push_str(&format!("{:<6} {:>9.3} {:>9.3}\n", c.name(), m.mean, m.std));
    }
    out
}

/// Each attacked item's own values, one line per item (`-` where an item has none), for the
/// terminal.
pub fn per_query_table(p: &crate::attack::per_query::PerQuery) -> String {
    let mut s = format!("{:>6}", "item");
    for (c, _) in &p.values {
        s.push_str(&format!(" {:>14}", c.name()));
    }
    s.push('\n');
    for (i, item) in p.item.iter().enumerate() {
        s.push_str(&format!("{item:>6}"));
        for (_, v) in &p.values {
            let cell = v.get(i).copied().flatten().map_or("-".into(), |v| format!("{v:.3}"));
            s.push_str(&format!(" {cell:>14}"));
        }
        s.push('\n');
    }
    s
}
