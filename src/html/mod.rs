//! `report.html`: one self-contained page per run folder or `compare` folder (no script, no
//! network: plots are inline SVG, images inline PNG), for readers who will not read JSON.
//!
//! A run's page: its health at the top (collapsed, at chance, diverged), the training curves
//! and collapse diagnostics per epoch, the final metrics with Recall@k as a plot, the
//! robustness suite's table and ERS/ARS terms as bars (when `robustness.json` is there), and a
//! retrieval grid (a few queries' neighbours before and after the nearest-neighbour attack).
//! A `compare` folder's page: every experiment side by side, R@1 against ERS as a scatter.

pub mod page;
pub mod plot;

use page::Page;
pub use page::esc;

use crate::attack::budget::Pgd;
use crate::attack::robustness::Robustness;
use crate::compare::Row as CompareRow;
use crate::train::RunReport;
use anyhow::{Result, ensure};
use burn::tensor::Device;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The file every report is written to, in the folder it describes.
pub const FILE: &str = crate::run_dir::REPORT;

/// Queries in the report's retrieval grid unless asked otherwise.
pub const GRID_QUERIES: usize = 4;

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
            grid_queries: GRID_QUERIES,
            // robrank's rob28, the suite's budget on 28×28 images.
            pgd: Pgd {
                eps: 77.0 / 255.0,
                step: 3.0 / 255.0,
                steps: 32,
                norm: crate::attack::budget::Norm::Linf,
                random_start: false,
                start_radius: 1.0,
                project: true,
            },
            seed: 0,
        }
    }
}

/// The robustness suite's output as `rdml robustness` writes it into a run folder.
pub const ROBUSTNESS_FILE: &str = crate::attack::record::FILE;

/// Writes `dir/report.html` for a run folder or a `compare` folder from the folder's records
/// alone (no model is loaded); returns its path.
pub fn write(dir: &Path) -> Result<PathBuf> {
    if !dir.is_dir() {
        return Err(crate::not_found(format!("{}: no such folder", dir.display())));
    }
    if dir.join("compare.json").is_file() {
        write_compare(dir)
    } else {
        write_run(dir, Grid::Stored(crate::grid::read(dir)))
    }
}

/// Computes what a run's report shows and the folder lacks (its retrieval grid, on `device`,
/// when `opts.grid_queries > 0`), then writes `dir/report.html` as [`write()`] does.
pub fn refresh(dir: &Path, opts: &ReportOptions, device: &Device) -> Result<PathBuf> {
    if !dir.is_dir() {
        return Err(crate::not_found(format!("{}: no such folder", dir.display())));
    }
    if dir.join("compare.json").is_file() {
        return write_compare(dir);
    }
    finished_run(dir)?;
    let grid = match opts.grid_queries {
        0 => Grid::None,
        q => match crate::grid::current(dir, opts.data.as_deref(), q, &opts.pgd, opts.seed, device) {
            Ok(record) => Grid::Stored(Some(record)),
            Err(e) => Grid::Failed(format!("{e:#}")),
        },
    };
    write_run(dir, grid)
}

/// Writes a scored model's record and page into `dir` (checked by
/// [`crate::scoring::model::ModelScoring::robustness`] before the suite ran), together.
pub fn write_scored(dir: &Path, record: &crate::attack::record::RobustnessRecord, images: usize) -> Result<PathBuf> {
    let [json_name, page_name] = crate::scoring::model::OUT_FILES;
    let json = crate::atomic::json_bytes(record)?;
    let page = scored_page(record, images)?.into_bytes();
    crate::out_folder::write(dir, &[(json_name, json), (page_name, page)])?;
    Ok(dir.join(page_name))
}

/// The page of a model scored on the caller's own images (`rdml.robustness(model, …, out=…)`):
/// what was scored, then the suite's table as a run's report shows it.
pub fn scored_page(record: &crate::attack::record::RobustnessRecord, images: usize) -> Result<String> {
    let mut page = Page::new("rdml report: a model scored on its own images");
    page.note(
        "Model",
        &format!(
            "{} attacked through its embeddings and their gradient (method {}) on {images} images; each \
             query is ranked among {}.",
            if record.model.as_os_str().is_empty() {
                "A model outside rdml,".to_string()
            } else {
                format!("The rdml run {},", record.model.display())
            },
            record.method.as_deref().unwrap_or("white-box"),
            match record.gallery {
                Some(g) => format!("the {g} images of a gallery"),
                None => format!("the other {}", images.saturating_sub(1)),
            }
        ),
    );
    page.robustness(&record.table, &record.budget_words())?;
    Ok(page.finish())
}

/// What the report says of the retrieval grid.
enum Grid {
    /// Not asked for.
    None,
    /// The folder's record when it is the current model's (read once: it costs a digest of the
    /// weights).
    Stored(Option<crate::grid::GridRecord>),
    /// Its computation failed, for this reason.
    Failed(String),
}

/// A finished run's report (see the module doc).
fn write_run(dir: &Path, grid: Grid) -> Result<PathBuf> {
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
                 retrained or replaced since; `rdml robustness` (Python: `Run.robustness()`) on {} scores this model.",
                dir.display()
            ),
        ),
        Some((r, budget, None)) => page.robustness(&r, &budget)?,
        None => page.note(
            "Robustness",
            &format!(
                "No {ROBUSTNESS_FILE} in this folder: `rdml robustness` (Python: `Run.robustness()`) on {} runs the ERS suite and adds it here.",
                dir.display()
            ),
        ),
    }
    certified(dir, &mut page)?;
    match grid {
        Grid::None => {}
        Grid::Failed(e) => page.note(
            "Retrieval grid",
            &format!(
                "Not drawn: {}. Give the test data's folder to `rdml report` (Python: `rdml.open(run, data=…)`) where it is elsewhere.",
                crate::field::render(&e, crate::field::Words::Plain)
            ),
        ),
        Grid::Stored(Some(g)) => page.grid(&g.rows, &g.pgd),
        Grid::Stored(None) => page.note(
            "Retrieval grid",
            &format!(
                "No {} of this model in the folder: `rdml report {}` computes it.",
                crate::grid::FILE,
                dir.display()
            ),
        ),
    }
    let page = crate::run_dir::seal::seal(dir, page.finish().into_bytes());
    crate::run_dir::put(dir, FILE, &page)?;
    Ok(dir.join(FILE))
}

/// The run's certification ([`crate::certify`]) when it has one: its curve, or why it is not
/// shown (computed on other weights, or not a record rdml can read).
fn certified(dir: &Path, page: &mut Page) -> Result<()> {
    let p = dir.join(crate::run_dir::CERTIFY);
    match crate::read::is_file(&p, crate::read::Follow::NoLinks) {
        Ok(true) => {}
        Ok(false) => return Ok(()),
        Err(e) => {
            crate::notes::warn(format!("{e:#}; the report leaves certified Recall@1 out"));
            return Ok(());
        }
    }
    let todo = "the report leaves it out; move it aside and certify the model again to have it";
    let rec: crate::certify::record::CertifyRecord = match crate::read::json(&crate::read::bookkeeping(&p)?, &p, todo) {
        Ok(r) => r,
        Err(e) => {
            crate::notes::warn(format!("{e:#}"));
            return Ok(());
        }
    };
    let now = crate::run_dir::model_digest(dir)?;
    match &rec.model_digest {
        Some(d) if *d != now => page.note(
            "Certified Recall@1",
            &format!(
                "{} was computed on other weights (its model was {d}, the run's is {now}): not shown.",
                crate::run_dir::CERTIFY
            ),
        ),
        _ => page.certified(&rec)?,
    }
    Ok(())
}

/// `run.json` of a finished run, or an error naming what is missing.
fn finished_run(dir: &Path) -> Result<RunReport> {
    crate::run_dir::check_finished(dir)?;
    let p = dir.join(crate::run_dir::RUN);
    serde_json::from_slice(&crate::read::bookkeeping(&p)?).map_err(|e| {
        crate::input_error(format!(
            "{}: not a run.json rdml can read ({}); it is left as it is: train the run again with ⟨overwrite!⟩, or \
             choose another run",
            p.display(),
            crate::read::json_problem(&e)
        ))
    })
}

/// The suite's table, its budget in words when recorded, and why it is stale when it was
/// computed on other weights than the run's model now (records from before the digest was
/// recorded are taken as they are).
fn read_robustness(dir: &Path) -> Result<Option<(Robustness, String, Option<String>)>> {
    let p = dir.join(ROBUSTNESS_FILE);
    if !p.is_file() {
        return Ok(None);
    }
    let rec: crate::attack::record::RobustnessRecord = match serde_json::from_slice(&crate::read::bookkeeping(&p)?) {
        Ok(r) => r,
        Err(e) => {
            crate::notes::warn(format!(
                "{}: not a robustness record rdml can read ({}): the report leaves robustness out; move the file \
                 aside and score the model's robustness again to have it",
                p.display(),
                crate::read::json_problem(&e)
            ));
            return Ok(None);
        }
    };
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
    let redo = "run the comparison again into a new folder";
    let v: serde_json::Value = crate::read::json(&crate::read::bookkeeping(&p)?, &p, redo)?;
    let rows: Vec<CompareRow> = serde_json::from_value(v.get("rows").cloned().unwrap_or_default()).map_err(|_| {
        crate::input_error(format!(
            "{}: its rows are not the compare rows rdml writes; {redo}",
            p.display()
        ))
    })?;
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
    crate::compare::write_report(dir, page.finish().as_bytes())
}
