//! Scoring a suite run: each attack's named scores, ERS (robrank's `pjswipe.py`) and ARS
//! (CA-TRIDE, Section 3.4 and Appendix B) aggregated into one table.

use super::kind::AttackKind;
use serde::{Deserialize, Serialize};

/// One attack's outcome: named scores (percentages, except TMA's cosine and ES:D's distance),
/// each with its clean value (the same selection at ε = 0).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttackResult {
    pub attack: AttackKind,
    pub scores: Vec<Score>,
    pub queries: usize,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Score {
    pub name: String,
    pub value: f64,
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

impl AttackResult {
    pub fn score(&self, name: &str) -> Option<f64> {
        self.scores.iter().find(|s| s.name == name).map(|s| s.value)
    }
}

/// One row of the robustness table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    pub column: String,
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

/// ERS term of a raw column (robrank's `pjswipe.py`): CA+ and QA+ doubled, CA−, QA−, TMA and ES:D
/// inverted, ES:D over the maximal chord 2 of the unit sphere.
pub fn ers_term(column: &str, raw: f64) -> Option<f64> {
    Some(match column {
        "CA+" | "QA+" => 2.0 * raw,
        "CA-" | "QA-" => 100.0 - raw,
        "TMA" => 100.0 * (1.0 - raw),
        "ES:D" => 100.0 * (2.0 - raw) / 2.0,
        "ES:R" | "LTM" | "GTM" | "GTT" => raw,
        _ => return None,
    })
}

/// ERS from the ten raw columns in robrank's order.
pub fn ers(raw: &[(&str, f64)]) -> f64 {
    let t: Vec<f64> = raw.iter().filter_map(|(c, v)| ers_term(c, *v)).collect();
    t.iter().sum::<f64>() / t.len().max(1) as f64
}

/// Aggregates the nine ERS attacks into the table: ten ERS columns and eight ARS terms
/// (TMA and ES:D have none; recall attacks are attacked/clean Recall@1).
pub fn aggregate(results: Vec<AttackResult>) -> Robustness {
    let mut rows = vec![];
    for r in &results {
        let clean = r.score("R@1:clean");
        let names: Vec<&str> = match r.attack {
            AttackKind::Es => vec!["ES:D", "ES:R"],
            k => vec![k.name()],
        };
        for col in names {
            let Some(raw) = r.score(col) else { continue };
            let Some(ers_term) = ers_term(col, raw) else { continue };
            let ars_term = match col {
                "CA+" | "CA-" | "QA+" | "QA-" => r.score("ARS"),
                "ES:R" | "LTM" | "GTM" => clean.map(|c| if c > 0.0 { 100.0 * raw / c } else { 0.0 }),
                "GTT" => Some(raw),
                _ => None,
            };
            rows.push(Row {
                column: col.to_string(),
                raw,
                ers_term,
                ars_term,
            });
        }
    }
    let ers = rows.iter().map(|r| r.ers_term).sum::<f64>() / rows.len().max(1) as f64;
    let ars_terms: Vec<f64> = rows.iter().filter_map(|r| r.ars_term).collect();
    let ars = ars_terms.iter().sum::<f64>() / ars_terms.len().max(1) as f64;
    Robustness {
        rows,
        ers,
        ars,
        results,
    }
}
