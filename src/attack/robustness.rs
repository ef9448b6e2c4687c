//! A suite run's table: ERS (robrank's `pjswipe.py`) and ARS (CA-TRIDE, Section 3.4 and
//! Appendix B) aggregated from the terms of the attacks that produced each column.

use super::column::Column;
use super::registry;
use super::result::{AttackResult, MeanStd};
use super::unit::Attack;
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// robrank's ERS suite, in its column order.
pub const ERS_SUITE: [&str; 9] = ["CA+", "CA-", "QA+", "QA-", "TMA", "ES", "LTM", "GTM", "GTT"];

pub fn ers_suite() -> Result<Vec<Box<dyn Attack>>> {
    ERS_SUITE.iter().map(|s| registry::attack(s)).collect()
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
    let suite = ers_suite().unwrap_or_default();
    let t: Vec<f64> = raw
        .iter()
        .filter_map(|(c, v)| {
            suite.iter().find_map(|a| {
                let column = a.ers_columns().into_iter().find(|col| col.is_named(c))?;
                a.ers_term(column, *v)
            })
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
