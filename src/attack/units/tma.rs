//! Targeted mismatch attack (TMA, robrank): a query is moved toward the embedding of a random
//! test item; reported as the cosine similarity reached.

use crate::attack::column::Column;
use crate::attack::context::Context;
use crate::attack::objective::Objective;
use crate::attack::objective::targets::TowardCosine;
use crate::attack::tally::Tally;
use crate::attack::unit::{Attack, Plan};
use crate::eval::knn::Embeddings;
use anyhow::Result;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Cosine similarity of the attacked embedding to its target (not a percentage).
pub const TMA: Column = Column::named("TMA");

pub struct Tma;

impl Attack for Tma {
    fn spec(&self) -> String {
        "TMA".into()
    }

    fn plan(&self, ctx: &Context, items: &[usize], rng: &mut ChaCha8Rng) -> Result<Box<dyn Plan>> {
        let targets: Vec<usize> = (0..items.len()).map(|_| rng.random_range(0..ctx.ranked_n())).collect();
        Ok(Box::new(TmaPlan {
            objective: TowardCosine {
                target: ctx.ranked_rows(&targets),
            },
            targets,
        }))
    }

    fn ers_columns(&self) -> Vec<Column> {
        vec![TMA]
    }

    /// robrank's `pjswipe.py`: `100 · (1 − cos)`. ARS has no TMA term (CA-TRIDE, Appendix B).
    fn ers_term(&self, column: Column, raw: f64) -> Option<f64> {
        (column == TMA).then_some(100.0 * (1.0 - raw))
    }
}

struct TmaPlan {
    targets: Vec<usize>,
    objective: TowardCosine,
}

impl Plan for TmaPlan {
    fn objective(&self) -> &dyn Objective {
        &self.objective
    }

    fn score(&self, target: &Context, adv: &Embeddings, tally: &mut Tally) -> Result<()> {
        for (r, &t) in self.targets.iter().enumerate() {
            let (e, tv) = (adv.row(r), target.ranked_clean().row(t));
            let dot: f32 = e.iter().zip(tv).map(|(a, b)| a * b).sum();
            let ne = e.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
            let nt = tv.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
            tally.add(TMA, r, (dot / (ne * nt)) as f64);
        }
        Ok(())
    }
}
