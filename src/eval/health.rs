//! Is the evaluated model usable at all? The verdict rests on what the model outputs on the test
//! split, not on the training loss: a loss pinned at its margin can mean a collapse or merely a
//! margin larger than any distance (a margin of 10⁶ on the unit sphere), and a collapse can
//! happen within one epoch. Two signals, both scale-free:
//! - **collapsed**: the test embeddings (nearly) coincide, their mean distance to their centroid
//!   below [`COLLAPSE_SPREAD`] of their mean norm (or not finite);
//! - **at chance**: Recall@1 no better than a random ranking would give, within three binomial
//!   standard deviations of the queries (the chance level is `Σ_q (same-class gallery items of
//!   q) / (gallery size)` over the scored queries).

use super::knn::Embeddings;
use serde::{Deserialize, Serialize};

/// Relative spread below which the embeddings count as one point.
pub const COLLAPSE_SPREAD: f64 = 1e-3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Healthy,
    AtChance,
    Collapsed,
}

impl Verdict {
    pub fn is_healthy(self) -> bool {
        self == Verdict::Healthy
    }
    /// One line for the terminal and the report.
    pub fn describe(&self, h: &Health) -> String {
        match self {
            Verdict::Healthy => "healthy".into(),
            Verdict::Collapsed => format!(
                "COLLAPSED: the test embeddings coincide (spread {:.2e} of their norm); the model maps every image to the same point",
                h.spread
            ),
            Verdict::AtChance => format!(
                "AT CHANCE: Recall@1 {:.4} is no better than a random ranking ({:.4})",
                h.recall_at_1, h.chance_recall_at_1
            ),
        }
    }
}

/// The signals and the verdict of one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// Mean distance of the embeddings to their centroid over their mean norm.
    pub spread: f64,
    pub recall_at_1: f64,
    pub chance_recall_at_1: f64,
    pub verdict: Verdict,
}

/// Mean distance to the centroid over the mean norm; NaN if a value is not finite.
pub fn spread(e: &Embeddings) -> f64 {
    if e.n == 0 || e.data.iter().any(|v| !v.is_finite()) {
        return f64::NAN;
    }
    let mut c = vec![0f64; e.dim];
    for row in e.data.chunks_exact(e.dim) {
        c.iter_mut().zip(row).for_each(|(c, &v)| *c += v as f64);
    }
    c.iter_mut().for_each(|c| *c /= e.n as f64);
    let (mut dist, mut norm) = (0.0, 0.0);
    for row in e.data.chunks_exact(e.dim) {
        dist += row
            .iter()
            .zip(&c)
            .map(|(&v, c)| (v as f64 - c).powi(2))
            .sum::<f64>()
            .sqrt();
        norm += row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
    }
    if norm == 0.0 { 0.0 } else { dist / norm }
}

/// The expected Recall@1 of a random ranking, over the queries that have a same-class item in
/// their gallery (as Recall@k counts them). `gallery` `None`: every query against the others.
pub fn chance_recall_at_1(qlabels: &[u32], gallery: Option<&[u32]>) -> f64 {
    let count = |labels: &[u32]| {
        let mut m = std::collections::HashMap::<u32, usize>::new();
        labels.iter().for_each(|&l| *m.entry(l).or_default() += 1);
        m
    };
    let (g, size, own) = match gallery {
        Some(g) => (count(g), g.len(), 0),
        None => (count(qlabels), qlabels.len().saturating_sub(1), 1),
    };
    let (mut sum, mut n) = (0.0, 0usize);
    for l in qlabels {
        let same = g.get(l).copied().unwrap_or(0).saturating_sub(own);
        if same > 0 && size > 0 {
            sum += same as f64 / size as f64;
            n += 1;
        }
    }
    if n == 0 { 0.0 } else { sum / n as f64 }
}

/// The verdict from the test embeddings, the chance level and the measured Recall@1 over
/// `queries` scored queries.
pub fn judge(e: &Embeddings, recall_at_1: f64, chance: f64, queries: usize) -> Health {
    let s = spread(e);
    let sd = (chance * (1.0 - chance) / queries.max(1) as f64).sqrt();
    let verdict = if s.is_nan() || s < COLLAPSE_SPREAD {
        Verdict::Collapsed
    } else if recall_at_1 <= chance + 3.0 * sd {
        Verdict::AtChance
    } else {
        Verdict::Healthy
    };
    Health {
        spread: s,
        recall_at_1,
        chance_recall_at_1: chance,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chance_level_by_hand() {
        // Classes of 2, 2 and 1: queries 0–3 have one same-class item among 4 others; 4 is lone.
        assert!((chance_recall_at_1(&[0, 0, 1, 1, 2], None) - 0.25).abs() < 1e-12);
        // Against a gallery of 4 with 3 of class 0: a class-0 query has 3/4, class 1 has 1/4.
        let c = chance_recall_at_1(&[0, 1, 2], Some(&[0, 0, 0, 1]));
        assert!((c - 0.5).abs() < 1e-12, "{c}");
    }

    #[test]
    fn verdicts() {
        let e = |data: Vec<f32>| Embeddings::new(data, 3, 2).unwrap();
        let spread_out = e(vec![1.0, 0.0, 0.0, 1.0, -1.0, 0.0]);
        assert_eq!(judge(&spread_out, 0.9, 0.1, 1000).verdict, Verdict::Healthy);
        // 0.1 + 3·√(0.09/1000) = 0.1285
        assert_eq!(judge(&spread_out, 0.128, 0.1, 1000).verdict, Verdict::AtChance);
        assert_eq!(judge(&spread_out, 0.129, 0.1, 1000).verdict, Verdict::Healthy);
        let one_point = e(vec![0.6, 0.8, 0.6, 0.8, 0.6, 0.8 + 1e-5]);
        assert_eq!(judge(&one_point, 0.9, 0.1, 1000).verdict, Verdict::Collapsed);
        let nan = Embeddings {
            data: vec![f32::NAN; 6],
            n: 3,
            dim: 2,
        };
        assert_eq!(judge(&nan, 0.9, 0.1, 1000).verdict, Verdict::Collapsed);
    }
}
