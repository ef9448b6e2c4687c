//! One attack's results: its typed scores, ARS's rank term, and a quantity over repeated runs.

use super::column::{Column, Score};
use serde::{Deserialize, Serialize};

/// One attack's outcome: its scores (percentages, except TMA's cosine and ES:D's distance), each
/// averaged over the items attacked.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttackResult {
    /// The attack's spec ([`super::registry::attack`] reads it back).
    pub attack: String,
    /// How the images were moved ([`super::registry::method`]).
    #[serde(default = "white_box")]
    pub method: String,
    #[serde(with = "super::column::flat_scores")]
    pub scores: Vec<Score>,
    pub queries: usize,
    pub seconds: f64,
    /// Each attacked item's own values, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_query: Option<super::per_query::PerQuery>,
    /// What crossed between rdml and a model held outside it, over the call (none for rdml's
    /// own networks, where nothing crosses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<super::oracle::Crossed>,
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
        self.scores.iter().find(|s| s.name.is_named(name)).map(|s| s.value)
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

/// The seed of repeat `k` of a run seeded `seed` (far from the suite's per-attack offsets).
pub fn repeat_seed(seed: u64, k: usize) -> u64 {
    seed.wrapping_add(k as u64 * 1_000_003)
}
