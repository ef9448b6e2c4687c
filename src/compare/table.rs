//! The comparison's tables: the per-run rows and, with several seeds, each experiment's
//! mean ± std, as Markdown (`compare.md`, the terminal) and JSON (`compare.json`); the HTML
//! report takes its cells from here.

use super::{CompareOptions, Row, SeedSummary, summaries};
use crate::attack::result::MeanStd;
use crate::config::Experiment;
use crate::eval::health::Verdict;
use crate::owned::Ledger;
use anyhow::Result;

impl SeedSummary {
    /// `name (seed, seed, …)`, the label of its table row.
    pub fn label(&self) -> String {
        let seeds = self.seeds.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        format!("{} ({seeds})", self.name)
    }

    /// The table's cells after the name (as [`Row::cells`], each as mean ± std).
    pub fn cells(&self) -> [String; 9] {
        let ms = |m: &MeanStd, digits: usize| format!("{:.digits$} ± {:.digits$}", m.mean, m.std);
        [
            self.defense.clone(),
            self.loss.clone(),
            ms(&self.recall_at_1, 4),
            ms(&self.map_at_r, 4),
            self.nmi.as_ref().map_or("-".into(), |m| ms(m, 4)),
            ms(&self.ers, 1),
            ms(&self.ars, 1),
            ms(&self.train_seconds, 0),
            self.epochs.to_string(),
        ]
    }
}

impl Row {
    /// The table's cells after the name, formatted (Markdown and the HTML report share them).
    pub fn cells(&self) -> [String; 9] {
        [
            self.defense.clone(),
            self.loss.clone(),
            format!("{:.4}", self.recall_at_1),
            format!("{:.4}", self.map_at_r),
            self.nmi.map_or("-".into(), |v| format!("{v:.4}")),
            format!("{:.1}", self.ers),
            format!("{:.1}", self.ars),
            format!("{:.0}", self.train_seconds),
            self.epochs.to_string(),
        ]
    }
}

/// The table's column names after `experiment`.
pub const COLUMNS: [&str; 9] = [
    "defense", "loss", "R@1", "MAP@R", "NMI", "ERS", "ARS", "train s", "epochs",
];

/// The names of the experiments whose model collapsed or ranks at chance.
pub fn unhealthy(rows: &[Row]) -> Vec<&str> {
    rows.iter()
        .filter(|r| r.verdict.is_some_and(|v| !v.is_healthy()))
        .map(|r| r.name.as_str())
        .collect()
}

/// A Markdown table: `first` heads the label column, then [`COLUMNS`]; one `(label, cells)` per row.
fn markdown_table(first: &str, rows: impl Iterator<Item = (String, [String; 9])>) -> String {
    let mut s = format!(
        "| {first} | {} |\n|---|{}\n",
        COLUMNS.join(" | "),
        "---|".repeat(COLUMNS.len())
    );
    for (label, cells) in rows {
        s.push_str(&format!("| {label} | {} |\n", cells.join(" | ")));
    }
    s
}

/// The Markdown table of the rows.
pub fn markdown(rows: &[Row]) -> String {
    markdown_table(
        "experiment",
        rows.iter().map(|r| {
            let flag = match r.verdict {
                Some(Verdict::Collapsed) => " (COLLAPSED)",
                Some(Verdict::AtChance) => " (AT CHANCE)",
                _ => "",
            };
            (format!("{}{flag}", r.name), r.cells())
        }),
    )
}

/// The Markdown table of each experiment's mean ± std over its seeds.
pub fn markdown_summary(summaries: &[SeedSummary]) -> String {
    markdown_table(
        "experiment (seeds)",
        summaries.iter().map(|m| {
            let flag = if m.unhealthy.is_empty() {
                String::new()
            } else {
                format!(" ({} unhealthy)", m.unhealthy.len())
            };
            (format!("{}{flag}", m.label()), m.cells())
        }),
    )
}

/// The summaries of the experiments whose seeds have all run (`None` with one seed).
fn summaries_so_far(rows: &[Row], configs: &[Experiment], seeds: usize) -> Option<Vec<SeedSummary>> {
    let done = rows.len() / seeds.max(1);
    (seeds > 1).then(|| summaries(&configs[..done.min(configs.len())], rows, seeds))
}

/// `compare.md`: the per-run table, preceded by the mean ± std table when there are seeds.
pub fn tables(rows: &[Row], configs: &[Experiment], seeds: usize) -> String {
    render(rows, summaries_so_far(rows, configs, seeds).as_deref(), seeds)
}

fn render(rows: &[Row], sums: Option<&[SeedSummary]>, seeds: usize) -> String {
    match sums {
        Some(sums) => format!(
            "Mean ± sample std over {seeds} training seeds:\n\n{}\nEach run:\n\n{}",
            markdown_summary(sums),
            markdown(rows)
        ),
        None => markdown(rows),
    }
}

pub(super) fn write_tables(
    rows: &[Row],
    configs: &[Experiment],
    opts: &CompareOptions,
    scoring: &crate::scoring::options::Resolved,
) -> Result<()> {
    let sums = summaries_so_far(rows, configs, opts.seeds);
    let json = serde_json::json!({
        "profile": scoring.profile.name(), "pgd": scoring.pgd, "method": scoring.method_spec,
        "queries": scoring.queries, "seed": scoring.seed, "robrank_compat": scoring.robrank_compat,
        "seeds": opts.seeds, "summary": sums, "rows": rows
    });
    let mut change = Ledger::open(&opts.out, LEDGER, WHAT)?.begin()?;
    change.stage(TABLES[0], serde_json::to_string_pretty(&json)?.as_bytes())?;
    change.stage(TABLES[1], render(rows, sums.as_deref(), opts.seeds).as_bytes())?;
    change.commit(&[], WHAT)?;
    Ok(())
}

/// The tables' files, and the ledger that records them ([`crate::owned`]): both change together,
/// and a file of those names that rdml did not write is never replaced.
const TABLES: [&str; 2] = ["compare.json", "compare.md"];
/// The ledger of a comparison's folder.
pub const LEDGER: &str = ".rdml-compare.json";
const WHAT: &str = "⟨out⟩";

/// Checks, before the first run trains, that `out` can take the comparison: a folder (new, or
/// not a run: the runs go into it), whose `compare.json` and `compare.md`, if any, rdml wrote.
pub(super) fn check_out(out: &std::path::Path) -> Result<()> {
    crate::run_dir::refuse_own_folder(out, out)?;
    anyhow::ensure!(
        !crate::run_dir::is_run_folder_resolved(out),
        "⟨out⟩ {}: is an rdml run folder; the comparison's runs and tables go into a folder of their own",
        out.display()
    );
    if let Ok(m) = std::fs::symlink_metadata(out) {
        anyhow::ensure!(
            m.is_dir(),
            "⟨out⟩ {}: exists and is not a folder (a file or a link); expected the comparison's folder",
            out.display()
        );
    }
    crate::atomic::check_writable(&out.join(TABLES[0]))?;
    Ledger::open(out, LEDGER, WHAT)?.check_free(TABLES.into_iter().chain([REPORT]), WHAT)
}

/// The comparison's page (rendered by [`crate::html`] from `compare.json`), written through the
/// folder's ledger: a `report.html` rdml did not write is never replaced.
pub fn write_report(out: &std::path::Path, page: &[u8]) -> Result<std::path::PathBuf> {
    let mut change = Ledger::open(out, LEDGER, WHAT)?.begin()?;
    change.stage(REPORT, page)?;
    change.commit(&[], WHAT)?;
    Ok(out.join(REPORT))
}

const REPORT: &str = "report.html";
