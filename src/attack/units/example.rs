//! The worked example of an attack with a column of its own (issue 39): this file and one line
//! of `attack::registry::ATTACKS` (`EX-RAISE`, under `#[cfg(test)]`) make an attack that
//! `rdml attack`, the suite and Python's `attack=` run, and a column that JSON writes and reads.
//! EX-RAISE pushes every embedding coordinate of a query up as far as the budget allows and
//! reports EX:MOVE, the mean L∞ distance each query's embedding moved.

use crate::attack::column::Column;
use crate::attack::context::Context;
use crate::attack::objective::Objective;
use crate::attack::tally::Tally;
use crate::attack::unit::{Attack, Plan};
use crate::eval::knn::Embeddings;
use anyhow::Result;
use burn::tensor::Tensor;
use rand_chacha::ChaCha8Rng;

/// The mean L∞ distance an attacked embedding moved from its clean one (not a percentage).
pub const EX_MOVE: Column = Column::named("EX:MOVE");

pub struct Raise;

impl Attack for Raise {
    fn spec(&self) -> String {
        "EX-RAISE".into()
    }

    fn plan(&self, _ctx: &Context, items: &[usize], _rng: &mut ChaCha8Rng) -> Result<Box<dyn Plan>> {
        Ok(Box::new(RaisePlan { items: items.to_vec() }))
    }
}

struct RaisePlan {
    items: Vec<usize>,
}

/// Minimising the negated sum of coordinates raises every one of them.
struct SumDown;

impl Objective for SumDown {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        emb.sum().neg()
    }
}

impl Plan for RaisePlan {
    fn objective(&self) -> &dyn Objective {
        &SumDown
    }

    fn score(&self, target: &Context, adv: &Embeddings, tally: &mut Tally) -> Result<()> {
        for (r, &i) in self.items.iter().enumerate() {
            let clean = target.clean.row(i);
            let moved = adv
                .row(r)
                .iter()
                .zip(clean)
                .map(|(a, c)| (a - c).abs())
                .fold(0f32, f32::max);
            tally.add(EX_MOVE, r, f64::from(moved));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attack::budget::{Norm, Pgd};
    use crate::attack::units::pixels::context_of;
    use crate::attack::{registry, suite};

    #[test]
    fn an_attack_is_its_file_and_one_registry_line_and_its_column_reads_back() {
        let ctx = context_of(&[0.5, 0.2, 0.4, 0.6, 0.1, 0.3], 2, &[0, 1, 0], false);
        let pgd = Pgd {
            eps: 0.05,
            step: 0.02,
            steps: 4,
            norm: Norm::Linf,
            random_start: false,
            start_radius: 1.0,
            project: true,
        };
        let attack = registry::attack("ex-raise").unwrap();
        let r = suite::run(&ctx, attack.as_ref(), &pgd, 3, 2, 7).unwrap();
        // Each pixel rises by 0.02 a step up to the radius: 0.02, 0.04, 0.05, 0.05.
        let moved = r.get(EX_MOVE).unwrap();
        assert!((moved - 0.05).abs() < 1e-6, "EX:MOVE {moved}");
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"EX:MOVE\":"), "{json}");
        let back: suite::AttackResult = serde_json::from_str(&json).unwrap();
        assert_eq!(back.score("EX:MOVE"), Some(moved));
        assert_eq!(back.attack, "EX-RAISE");
    }
}
