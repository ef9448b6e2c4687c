//! The report page: its style, escaping, and the sections a run's or a compare folder's page is
//! made of.

use super::plot;
use crate::attack::budget::Pgd;
use crate::attack::robustness::Robustness;
use crate::eval::Metrics;
use crate::grid;
use crate::train::RunReport;
use anyhow::Result;
use base64::Engine as _;
use std::fmt::Write as _;
use std::path::Path;

/// The PGD budget of a suite run's JSON (`pgd`), in words.
/// HTML-escapes text.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(crate) fn data_uri(png: &[u8]) -> String {
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

pub(crate) struct Page {
    pub(crate) body: String,
    title: String,
}

impl Page {
    pub(crate) fn new(title: &str) -> Self {
        Self {
            body: format!("<h1>{}</h1>", esc(title)),
            title: title.to_string(),
        }
    }

    pub(crate) fn section(&mut self, name: &str) {
        let _ = write!(self.body, "<h2>{}</h2>", esc(name));
    }

    pub(crate) fn banner(&mut self, text: &str) {
        let _ = write!(self.body, "<div class=banner>{}</div>", esc(text));
    }

    pub(crate) fn note(&mut self, section: &str, text: &str) {
        self.section(section);
        let _ = write!(self.body, "<p>{}</p>", esc(text));
    }

    pub(crate) fn figure(&mut self, svg: &str) {
        let _ = write!(self.body, "<figure>{svg}</figure>");
    }

    /// The run's health first: a reader must not miss a collapse or a divergence.
    pub(crate) fn health(&mut self, run: &RunReport) {
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

    pub(crate) fn summary(&mut self, dir: &Path, run: &RunReport) {
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

    pub(crate) fn curves(&mut self, run: &RunReport) -> Result<()> {
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
            let s = |f: &dyn Fn(&crate::eval::diagnostics::EpochDiagnostics) -> f64| -> Vec<(f64, f64)> {
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

    pub(crate) fn metrics(&mut self, m: &Metrics) -> Result<()> {
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

    pub(crate) fn robustness(&mut self, r: &Robustness, budget: &str) -> Result<()> {
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
                esc(row.column.name()),
                row.raw,
                row.ers_term,
                row.ars_term.map_or("-".into(), |v| format!("{v:.1}"))
            );
        }
        self.body.push_str("</table>");
        let cats: Vec<String> = r.rows.iter().map(|x| x.column.name().to_string()).collect();
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

    /// Certified Recall@1 by randomized smoothing ([`crate::certify`]): the record's setting, its
    /// radii asked, and the curve over every radius its queries were certified at.
    pub(crate) fn certified(&mut self, c: &crate::certify::record::CertifyRecord) -> Result<()> {
        self.section("Certified Recall@1 (randomized smoothing of the query)");
        let (answer, theorem, counts) = match c.method.as_str() {
            "center" => (
                "the centre's nearest item",
                "its smoothed embedding's centre moves less than its margin to another label \
                 (Kumar and Goldstein 2021, Theorem 1)",
                format!(
                    "Δ {}, {} copies pick the centre and {} check it, n {}",
                    c.delta.unwrap_or(f64::NAN),
                    c.select,
                    c.select,
                    c.samples
                ),
            ),
            _ => (
                "majority label",
                "(Cohen et al. 2019, Theorem 1)",
                format!("n₀ {}, n {}", c.select, c.samples),
            ),
        };
        let _ = write!(
            self.body,
            "<p>{} smoothing: σ {} (pixels of [0, 1] images), {counts}, α {}, seed {}: {} queries ({} lone, \
             left out). Smoothed Recall@1 ({answer}, no certificate) <b>{:.1}</b>; abstained {:.1} %. \
             The top-1 of a certified query keeps its label for any ℓ2 perturbation of the query below its \
             radius: {theorem}, with probability at least 1 − α; the gallery is not perturbed.</p>",
            if c.method == "center" { "Centre" } else { "Cohen's" },
            c.sigma,
            c.alpha,
            c.seed,
            c.queries_used,
            c.lone,
            c.clean,
            c.abstained
        );
        self.body
            .push_str("<table><tr><th>ℓ2 radius</th><th>certified Recall@1</th></tr>");
        for (r, v) in &c.certified {
            let v = v.as_f64().map_or("-".into(), |v| format!("{v:.1}"));
            let _ = write!(self.body, "<tr><td>{}</td><td>{v}</td></tr>", esc(r));
        }
        self.body.push_str("</table>");
        if c.certified_radii.is_empty() && c.certified.values().any(|v| v.as_f64().is_some_and(|v| v > 0.0)) {
            self.body
                .push_str("<p>The record holds no query's radius (an earlier rdml wrote it): no curve.</p>");
            return Ok(());
        }
        let top = c.certified_radii.first().copied().unwrap_or(0.0).max(1e-6) * 1.05;
        let pts: Vec<(f64, f64)> = (0..=40)
            .map(|i| {
                let r = top * f64::from(i) / 40.0;
                (r, c.certified_at(r))
            })
            .collect();
        self.figure(&plot::lines(
            "Certified Recall@1 over the ℓ2 radius",
            "radius (ℓ2, pixels of [0, 1])",
            "certified Recall@1 (%)",
            &[("certified".into(), pts)],
        )?);
        Ok(())
    }

    pub(crate) fn grid(&mut self, rows: &[grid::GridRow], pgd: &Pgd) {
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

    pub(crate) fn finish(self) -> String {
        format!(
            "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>{}</title><style>{STYLE}</style></head><body>{}<p style=\"color:#888\">Written by rdml {}.</p></body></html>\n",
            esc(&self.title),
            self.body,
            env!("CARGO_PKG_VERSION")
        )
    }
}
