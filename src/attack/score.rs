//! A suite run's results: each attack's typed scores, and ERS (robrank's `pjswipe.py`) and ARS
//! (CA-TRIDE, Section 3.4 and Appendix B) aggregated from the attacks' own terms.

use super::column::{Column, Score};
use super::registry;
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// One attack's outcome: its scores (percentages, except TMA's cosine and ES:D's distance), each
/// averaged over the items attacked.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttackResult {
    /// The attack's spec ([`registry::attack`] reads it back).
    pub attack: String,
    /// How the images were moved ([`registry::method`]).
    #[serde(default = "white_box")]
    pub method: String,
    #[serde(with = "super::column::flat_scores")]
    pub scores: Vec<Score>,
    pub queries: usize,
    pub seconds: f64,
}

fn white_box() -> String {
    "white-box".into()
}

impl AttackResult {
    pub fn get(&self, column: Column) -> Option<f64> {
        self.scores.iter().find(|s| s.name == column).map(|s| s.value)
    }

    /// The score of the column named `name` ("CA+", "R@1:clean").
    pub fn score(&self, name: &str) -> Option<f64> {
        Column::parse(name).ok().and_then(|c| self.get(c))
    }
}

/// One ranking trial's ARS term (CA-TRIDE, Eq. 27/29/30): `100·(1 − |r − r₀| / |g − r₀|)`, the
/// absolute value as the equations bound each term (at most 100: a rank the attack moved away
/// from its goal counts as moved, not as more robust than untouched). The goal `g` is 0 for the
/// "+" attacks and 100 for the "−" attacks (ranks in percent): Eq. 29 writes `|r − r̃|/r` for
/// CA−, but only goal 100 reproduces the paper's own Table 1 (HM, CUB: CA− 37.7 → 62.9).
pub fn ars_rank_term(raise: bool, init: f64, adv: f64) -> f64 {
    let goal = if raise { 0.0 } else { 100.0 };
    if (goal - init).abs() < 1e-12 {
        return 0.0;
    }
    100.0 * (1.0 - (adv - init).abs() / (goal - init).abs())
}

/// One row of the robustness table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    pub column: Column,
    pub raw: f64,
    pub ers_term: f64,
    pub ars_term: Option<f64>,
}

/// The ERS/ARS table of a suite run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Robustness {
    pub rows: Vec<Row>,
    pub ers: f64,
    pub ars: f64,
    pub results: Vec<AttackResult>,
}

/// ERS from raw columns named as robrank prints them, each term from the suite attack that
/// reports the column; unknown names count for nothing.
pub fn ers(raw: &[(&str, f64)]) -> f64 {
    let suite = super::suite::ers_suite().unwrap_or_default();
    let t: Vec<f64> = raw
        .iter()
        .filter_map(|(c, v)| {
            let column = Column::parse(c).ok()?;
            suite.iter().find_map(|a| a.ers_term(column, *v))
        })
        .collect();
    t.iter().sum::<f64>() / t.len().max(1) as f64
}

/// The ERS/ARS table of the results: each attack's raw ERS columns with its ERS and ARS terms
/// (TMA and ES:D have no ARS term; recall attacks count attacked over clean Recall@1).
pub fn aggregate(results: Vec<AttackResult>) -> Result<Robustness> {
    let mut rows = vec![];
    for r in &results {
        let attack = registry::attack(&r.attack)?;
        for column in attack.ers_columns() {
            let Some(raw) = r.get(column) else { continue };
            let Some(ers_term) = attack.ers_term(column, raw) else {
                continue;
            };
            rows.push(Row {
                column,
                raw,
                ers_term,
                ars_term: attack.ars_term(column, r),
            });
        }
    }
    let ers = rows.iter().map(|r| r.ers_term).sum::<f64>() / rows.len().max(1) as f64;
    let ars_terms: Vec<f64> = rows.iter().filter_map(|r| r.ars_term).collect();
    let ars = ars_terms.iter().sum::<f64>() / ars_terms.len().max(1) as f64;
    Ok(Robustness {
        rows,
        ers,
        ars,
        results,
    })
}

/// A quantity over repeated runs: mean and sample standard deviation (0 for one run).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct MeanStd {
    pub mean: f64,
    pub std: f64,
    pub runs: usize,
}

impl MeanStd {
    pub fn of(values: &[f64]) -> Self {
        let n = values.len();
        let mean = values.iter().sum::<f64>() / n.max(1) as f64;
        let var = if n > 1 {
            values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        Self {
            mean,
            std: var.sqrt(),
            runs: n,
        }
    }
}

/// Each column's mean ± std over repeated runs of one attack (the papers' "average of five
/// random seeds"), in the first run's column order.
pub fn spread(results: &[AttackResult]) -> Vec<(Column, MeanStd)> {
    let Some(first) = results.first() else {
        return vec![];
    };
    first
        .scores
        .iter()
        .map(|s| {
            let v: Vec<f64> = results.iter().filter_map(|r| r.get(s.name)).collect();
            (s.name, MeanStd::of(&v))
        })
        .collect()
}

/// ERS, ARS and each raw column as mean ± std over repeated suite runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RobustnessSpread {
    pub ers: MeanStd,
    pub ars: MeanStd,
    pub raw: Vec<(Column, MeanStd)>,
}

pub fn robustness_spread(runs: &[Robustness]) -> RobustnessSpread {
    let raw = runs
        .first()
        .map(|r| {
            r.rows
                .iter()
                .map(|row| {
                    let v: Vec<f64> = runs
                        .iter()
                        .filter_map(|x| x.rows.iter().find(|y| y.column == row.column).map(|y| y.raw))
                        .collect();
                    (row.column, MeanStd::of(&v))
                })
                .collect()
        })
        .unwrap_or_default();
    RobustnessSpread {
        ers: MeanStd::of(&runs.iter().map(|r| r.ers).collect::<Vec<_>>()),
        ars: MeanStd::of(&runs.iter().map(|r| r.ars).collect::<Vec<_>>()),
        raw,
    }
}

/// The seed of repeat `k` of a run seeded `seed` (far from the suite's per-attack offsets).
pub fn repeat_seed(seed: u64, k: usize) -> u64 {
    seed.wrapping_add(k as u64 * 1_000_003)
}
