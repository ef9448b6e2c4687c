//! `report.html`: one self-contained page per run folder or `compare` folder (no script, no
//! network: plots are inline SVG, images inline PNG), for readers who will not read JSON.
//!
//! A run's page: its health at the top (collapsed, at chance, diverged), the training curves
//! and collapse diagnostics per epoch, the final metrics with Recall@k as a plot, the
//! robustness suite's table and ERS/ARS terms as bars (when `robustness.json` is there), and a
//! retrieval grid (a few queries' neighbours before and after the nearest-neighbour attack).
//! A `compare` folder's page: every experiment side by side, R@1 against ERS as a scatter.

pub mod grid;
pub mod plot;

use crate::atomic::write_atomic;
use crate::attack::engine::Pgd;
use crate::attack::robustness::Robustness;
use crate::compare::Row as CompareRow;
use crate::eval::Metrics;
use crate::train::RunReport;
use anyhow::{Context as _, Result, ensure};
use base64::Engine as _;
use burn::tensor::Device;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The file every report is written to, in the folder it describes.
pub const FILE: &str = crate::run_dir::REPORT;

/// What the report computes besides reading the folder.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// The test data, when not where the run's config says.
    pub data: Option<PathBuf>,
    /// Queries in the retrieval grid (0: no grid, and the model is not loaded).
    pub grid_queries: usize,
    /// The grid's attack budget.
    pub pgd: Pgd,
    pub seed: u64,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            data: None,
            grid_queries: 4,
            // robrank's rob28, the suite's budget on 28×28 images.
            pgd: Pgd {
                eps: 77.0 / 255.0,
                step: 3.0 / 255.0,
                steps: 32,
                norm: crate::attack::engine::Norm::Linf,
                random_start: false,
            },
            seed: 0,
        }
    }
}

/// The robustness suite's output as `rdml robustness` writes it into a run folder.
pub const ROBUSTNESS_FILE: &str = crate::attack::record::FILE;

/// Writes `dir/report.html` for a run folder or a `compare` folder; returns its path.
pub fn write(dir: &Path, opts: &ReportOptions, device: &Device) -> Result<PathBuf> {
    ensure!(dir.is_dir(), "{}: no such folder", dir.display());
    if dir.join("compare.json").is_file() {
        write_compare(dir)
    } else {
        write_run(dir, opts, device)
    }
}

/// A finished run's report (see the module doc).
pub fn write_run(dir: &Path, opts: &ReportOptions, device: &Device) -> Result<PathBuf> {
    let run = finished_run(dir)?;
    let mut page = Page::new(&format!("rdml report: {}", run.config.name));
    page.health(&run);
    page.summary(dir, &run);
    page.curves(&run)?;
    if let Some(m) = &run.final_metrics {
        page.metrics(m)?;
    }
    match read_robustness(dir)? {
        Some((_, _, Some(stale))) => page.note(
            "Robustness",
            &format!(
                "{ROBUSTNESS_FILE} was computed on other weights ({stale}): not shown. The run was \
                 retrained or replaced since; `rdml robustness --model {}` scores this model.",
                dir.display()
            ),
        ),
        Some((r, budget, None)) => page.robustness(&r, &budget)?,
        None => page.note(
            "Robustness",
            &format!(
                "No {ROBUSTNESS_FILE} in this folder: `rdml robustness --model {}` runs the ERS suite and adds it here.",
                dir.display()
            ),
        ),
    }
    if opts.grid_queries > 0 {
        match grid_rows(dir, opts, device) {
            Ok(rows) => page.grid(&rows, &opts.pgd),
            Err(e) => page.note(
                "Retrieval grid",
                &format!("Not drawn: {e:#}. Pass `--data DIR` to `rdml report` where the test data is elsewhere."),
            ),
        }
    }
    let path = dir.join(FILE);
    write_atomic(&path, page.finish().as_bytes())?;
    Ok(path)
}

fn grid_rows(dir: &Path, opts: &ReportOptions, device: &Device) -> Result<Vec<grid::GridRow>> {
    let ctx = crate::target::Target::open(dir, opts.data.as_deref(), 0, device)?.context(device, false)?;
    grid::rows(&ctx, &opts.pgd, opts.grid_queries, opts.seed)
}

/// `run.json` of a finished run, or an error naming what is missing.
fn finished_run(dir: &Path) -> Result<RunReport> {
    crate::run_dir::check_finished(dir)?;
    let p = dir.join(crate::run_dir::RUN);
    serde_json::from_slice(&std::fs::read(&p).with_context(|| format!("cannot read {}", p.display()))?)
        .with_context(|| format!("{}: not a run.json written by rdml", p.display()))
}

/// The suite's table, its budget in words when recorded, and why it is stale when it was
/// computed on other weights than the run's model now (records from before the digest was
/// recorded are taken as they are).
fn read_robustness(dir: &Path) -> Result<Option<(Robustness, String, Option<String>)>> {
    let p = dir.join(ROBUSTNESS_FILE);
    if !p.is_file() {
        return Ok(None);
    }
    let rec: crate::attack::record::RobustnessRecord = serde_json::from_slice(&std::fs::read(&p)?)
        .with_context(|| format!("{}: not a robustness record", p.display()))?;
    let stale = match &rec.model_digest {
        Some(d) => {
            let now = crate::run_dir::model_digest(dir)?;
            (*d != now).then(|| format!("its model was {d}, the run's is {now}"))
        }
        None => None,
    };
    let words = rec.budget_words();
    Ok(Some((rec.table, words, stale)))
}

/// The `compare` folder's report.
/// The header cells of a compare table: `first`, [`crate::compare::COLUMNS`], then `after`.
fn compare_header(first: &str, after: &str) -> String {
    let cols: String = crate::compare::COLUMNS
        .iter()
        .map(|c| format!("<th>{}</th>", esc(c)))
        .collect();
    format!("<th>{}</th>{cols}{after}", esc(first))
}

pub fn write_compare(dir: &Path) -> Result<PathBuf> {
    let p = dir.join("compare.json");
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&p).with_context(|| format!("cannot read {}", p.display()))?)
            .with_context(|| format!("{}: not JSON", p.display()))?;
    let rows: Vec<CompareRow> = serde_json::from_value(v.get("rows").cloned().unwrap_or_default())
        .with_context(|| format!("{}: `rows` is not a list of compare rows", p.display()))?;
    ensure!(!rows.is_empty(), "{}: no experiment finished yet", p.display());
    let mut page = Page::new("rdml report: compare");
    let sick = crate::compare::unhealthy(&rows);
    if !sick.is_empty() {
        page.banner(&format!("Collapsed or at chance: {}", sick.join(", ")));
    }
    let recorded: Option<Pgd> = v.get("pgd").and_then(|p| serde_json::from_value(p.clone()).ok());
    let pgd = crate::attack::record::pgd_words(recorded.as_ref());
    let _ = write!(
        page.body,
        "<p>{} experiment(s) in <code>{}</code>; the robustness suite ({}) on {} queries, {}.</p>",
        rows.len(),
        esc(&dir.display().to_string()),
        esc(v.get("method").and_then(|m| m.as_str()).unwrap_or("white-box")),
        v.get("queries").and_then(|q| q.as_u64()).unwrap_or(0),
        esc(&pgd)
    );
    let summary: Vec<crate::compare::SeedSummary> =
        serde_json::from_value(v.get("summary").cloned().unwrap_or_default()).unwrap_or_default();
    if !summary.is_empty() {
        page.section("Mean ± sample std over training seeds");
        let mut t = format!("<table><tr>{}</tr>", compare_header("experiment (seeds)", ""));
        for m in &summary {
            let cells: String = m.cells().iter().map(|c| format!("<td>{}</td>", esc(c))).collect();
            let _ = write!(t, "<tr><td>{}</td>{cells}</tr>", esc(&m.label()));
        }
        t.push_str("</table>");
        page.body.push_str(&t);
    }
    page.section("Experiments");
    let mut t = format!("<table><tr>{}</tr>", compare_header("experiment", "<th>report</th>"));
    for r in &rows {
        let name = r
            .run
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let flag = match r.verdict {
            Some(v) if !v.is_healthy() => format!(" <b class=bad>({v:?})</b>"),
            _ => String::new(),
        };
        let cells: String = r.cells().iter().map(|c| format!("<td>{}</td>", esc(c))).collect();
        let _ = write!(
            t,
            "<tr><td>{}{flag}</td>{cells}<td><a href=\"{}/{FILE}\">{}</a></td></tr>",
            esc(&r.name),
            esc(&name),
            esc(&name)
        );
    }
    t.push_str("</table>");
    page.body.push_str(&t);
    let pts: Vec<(String, f64, f64)> = rows.iter().map(|r| (r.name.clone(), r.recall_at_1, r.ers)).collect();
    page.figure(&plot::scatter(
        "Clean R@1 against ERS (one point per experiment)",
        "Recall@1 (clean)",
        "ERS",
        &pts,
    )?);
    let path = dir.join(FILE);
    write_atomic(&path, page.finish().as_bytes())?;
    Ok(path)
}

/// The PGD budget of a suite run's JSON (`pgd`), in words.
/// HTML-escapes text.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn data_uri(png: &[u8]) -> String {
    format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(png)
    )
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em;color:#222}\
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:1.6em}\
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}\
td:first-child,th:first-child{text-align:left}.banner{background:#fdd;border:2px solid #c00;padding:.6em;font-weight:bold}\
.ok{background:#e6f4e6;border:1px solid #8c8;padding:.4em}.bad{color:#c00}figure{display:inline-block;margin:.5em}\
.grid td{border:none;padding:1px;text-align:center;font-size:11px}.grid img{width:46px;height:46px;image-rendering:pixelated;border:3px solid transparent}\
.grid img.same{border-color:#2a2}.grid img.wrong{border-color:#d22}.grid .sep{width:18px}code{background:#f4f4f4}";

struct Page {
    body: String,
    title: String,
}

impl Page {
    fn new(title: &str) -> Self {
        Self {
            body: format!("<h1>{}</h1>", esc(title)),
            title: title.to_string(),
        }
    }

    fn section(&mut self, name: &str) {
        let _ = write!(self.body, "<h2>{}</h2>", esc(name));
    }

    fn banner(&mut self, text: &str) {
        let _ = write!(self.body, "<div class=banner>{}</div>", esc(text));
    }

    fn note(&mut self, section: &str, text: &str) {
        self.section(section);
        let _ = write!(self.body, "<p>{}</p>", esc(text));
    }

    fn figure(&mut self, svg: &str) {
        let _ = write!(self.body, "<figure>{svg}</figure>");
    }

    /// The run's health first: a reader must not miss a collapse or a divergence.
    fn health(&mut self, run: &RunReport) {
        let diverged = run.epochs.iter().find(|e| !e.mean_loss.is_finite());
        if let Some(e) = diverged {
            self.banner(&format!(
                "DIVERGED: the training loss is {} from epoch {} on; the numbers below describe a broken model.",
                e.mean_loss, e.epoch
            ));
        }
        match run.final_metrics.as_ref().and_then(|m| m.health) {
            Some(h) if !h.verdict.is_healthy() => self.banner(&h.verdict.describe(&h)),
            Some(_) if diverged.is_none() => {
                let _ = write!(
                    self.body,
                    "<div class=ok>Healthy: the test embeddings are spread and Recall@1 is above chance.</div>"
                );
            }
            _ => {}
        }
        let inseparable: Vec<String> = run
            .epochs
            .iter()
            .filter(|e| e.diagnostics.as_ref().is_some_and(|d| d.collapsed))
            .map(|e| e.epoch.to_string())
            .collect();
        if !inseparable.is_empty() {
            self.banner(&format!(
                "Training batches inseparable (separability ≤ 0 in every batch, or NaN) in epoch(s) {}.",
                inseparable.join(", ")
            ));
        }
    }

    fn summary(&mut self, dir: &Path, run: &RunReport) {
        let c = &run.config;
        let rows = [
            ("run folder", dir.display().to_string()),
            ("data set", format!("{:?}", c.data.dataset)),
            (
                "model",
                format!("{:?}, embedding {}", c.model.arch, c.model.embedding_dim),
            ),
            ("loss", c.loss.name().to_string()),
            ("defense", c.defense.as_ref().map_or("none", |d| d.name()).to_string()),
            ("epochs", run.epochs.len().to_string()),
            ("training time", format!("{:.0} s", run.train_seconds)),
            ("rdml", run.rdml_version.clone()),
        ];
        self.section("Run");
        self.body.push_str("<table>");
        for (k, v) in rows {
            let _ = write!(self.body, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
        }
        self.body.push_str("</table>");
    }

    fn curves(&mut self, run: &RunReport) -> Result<()> {
        self.section("Training");
        let loss: Vec<(f64, f64)> = run.epochs.iter().map(|e| (e.epoch as f64, e.mean_loss)).collect();
        self.figure(&plot::lines(
            "Mean training loss",
            "epoch",
            "loss",
            &[("loss".into(), loss)],
        )?);
        let with_m: Vec<(f64, &Metrics)> = run
            .epochs
            .iter()
            .filter_map(|e| e.metrics.as_ref().map(|m| (e.epoch as f64, m)))
            .collect();
        if !with_m.is_empty() {
            let r1 = with_m
                .iter()
                .map(|(e, m)| (*e, m.recall_at(1).unwrap_or(f64::NAN)))
                .collect();
            let mapr = with_m.iter().map(|(e, m)| (*e, m.retrieval.map_at_r)).collect();
            self.figure(&plot::lines(
                "Test R@1 and MAP@R",
                "epoch",
                "",
                &[("recall@1".into(), r1), ("map@r".into(), mapr)],
            )?);
        }
        let diag: Vec<_> = run
            .epochs
            .iter()
            .filter_map(|e| e.diagnostics.as_ref().map(|d| (e.epoch as f64, d)))
            .collect();
        if !diag.is_empty() {
            let s = |f: &dyn Fn(&crate::defense::diagnostics::EpochDiagnostics) -> f64| -> Vec<(f64, f64)> {
                diag.iter().map(|(e, d)| (*e, f(d))).collect()
            };
            self.figure(&plot::lines(
                "Collapse diagnostics (training batches)",
                "epoch",
                "",
                &[
                    ("mean distance".into(), s(&|d| d.mean_distance)),
                    ("separability".into(), s(&|d| d.separability)),
                    ("hardness".into(), s(&|d| d.hardness)),
                    ("collapseness".into(), s(&|d| d.collapseness)),
                ],
            )?);
        }
        Ok(())
    }

    fn metrics(&mut self, m: &Metrics) -> Result<()> {
        self.section("Test metrics");
        self.body.push_str("<table><tr><th>metric</th><th>value</th></tr>");
        for (k, v) in crate::eval::flat::named(m) {
            let _ = write!(self.body, "<tr><td>{}</td><td>{v:.4}</td></tr>", esc(&k));
        }
        let _ = write!(
            self.body,
            "<tr><td>queries (lone)</td><td>{} ({})</td></tr></table>",
            m.retrieval.queries, m.retrieval.lone_queries
        );
        let pts: Vec<(f64, f64)> = m.retrieval.recall.iter().map(|(k, v)| (*k as f64, *v)).collect();
        self.figure(&plot::lines("Recall@k", "k", "recall", &[("recall@k".into(), pts)])?);
        Ok(())
    }

    fn robustness(&mut self, r: &Robustness, budget: &str) -> Result<()> {
        self.section("Robustness (robrank's ERS suite)");
        let queries = r.results.first().map_or(0, |x| x.queries);
        let _ = write!(
            self.body,
            "<p><b>ERS {:.1}</b> &nbsp; <b>ARS {:.1}</b> &nbsp; ({queries} queries; {})</p>",
            r.ers,
            r.ars,
            esc(budget)
        );
        self.body
            .push_str("<table><tr><th>column</th><th>raw</th><th>ERS term</th><th>ARS term</th></tr>");
        for row in &r.rows {
            let _ = write!(
                self.body,
                "<tr><td>{}</td><td>{:.3}</td><td>{:.1}</td><td>{}</td></tr>",
                esc(&row.column.name()),
                row.raw,
                row.ers_term,
                row.ars_term.map_or("-".into(), |v| format!("{v:.1}"))
            );
        }
        self.body.push_str("</table>");
        let cats: Vec<String> = r.rows.iter().map(|x| x.column.name()).collect();
        self.figure(&plot::bars(
            "ERS and ARS terms per attack (higher is more robust)",
            "term",
            &cats,
            &[
                ("ERS term".into(), r.rows.iter().map(|x| Some(x.ers_term)).collect()),
                ("ARS term".into(), r.rows.iter().map(|x| x.ars_term).collect()),
            ],
            100.0,
        )?);
        Ok(())
    }

    fn grid(&mut self, rows: &[grid::GridRow], pgd: &Pgd) {
        self.section("Retrieval grid");
        let _ = write!(
            self.body,
            "<p>Each row: a test query and its {} nearest test items; then the nearest-neighbour attack's query (ε {:.4}, {} steps of {:.4}), its perturbation (amplified: grey is no change) and its {} nearest items. Green: same class as the query; red: another class.</p>",
            grid::TOP,
            pgd.eps,
            pgd.steps,
            pgd.step,
            grid::TOP
        );
        if rows.is_empty() {
            self.body
                .push_str("<p>No test query has a same-class nearest neighbour: nothing to attack.</p>");
            return;
        }
        self.body.push_str("<table class=grid>");
        let img = |png: &[u8], class: &str, title: &str| {
            format!(
                "<td><img class=\"{class}\" src=\"{}\" alt=\"{}\" title=\"{}\"></td>",
                data_uri(png),
                esc(title),
                esc(title)
            )
        };
        let cell = |c: &grid::Cell| {
            img(
                &c.png,
                if c.same_label { "same" } else { "wrong" },
                &format!("item {} (class {})", c.index, c.label),
            )
        };
        for r in rows {
            self.body.push_str("<tr>");
            self.body.push_str(&img(
                &r.query.png,
                "",
                &format!("query {} (class {})", r.query.index, r.query.label),
            ));
            r.before.iter().for_each(|c| self.body.push_str(&cell(c)));
            self.body.push_str("<td class=sep></td>");
            self.body.push_str(&img(
                &r.adversarial,
                "",
                &format!("adversarial query {}", r.query.index),
            ));
            self.body.push_str(&img(
                &r.perturbation,
                "",
                &format!(
                    "perturbation, L∞ {:.4}, amplified ×{:.1}",
                    r.linf,
                    0.5 / r.linf.max(1e-12)
                ),
            ));
            r.after.iter().for_each(|c| self.body.push_str(&cell(c)));
            self.body.push_str("</tr>");
        }
        let _ = write!(
            self.body,
            "<tr><td>query</td><td colspan={}>before the attack</td><td></td><td>attacked</td><td>δ</td><td colspan={}>after the attack</td></tr></table>",
            grid::TOP,
            grid::TOP
        );
    }

    fn finish(self) -> String {
        format!(
            "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>{}</title><style>{STYLE}</style></head><body>{}<p style=\"color:#888\">Written by rdml {}.</p></body></html>\n",
            esc(&self.title),
            self.body,
            env!("CARGO_PKG_VERSION")
        )
    }
}
