//! robrank's label attacks on a query: LTM (label-targeted mismatch: every item of another class
//! ahead of every item of its own), GTM (toward the nearest item of a class other than its
//! current top-1's) and GTT (push its current top-1 out of its top 4). LTM and GTM report
//! Recall@1 after the attack, GTT the rate at which the top-1 stays in the top 4.

use super::es::relative_recall;
use super::{add_recall, attacked_recall};
use crate::attack::column::Column;
use crate::attack::context::Context;
use crate::attack::objective::Objective;
use crate::attack::objective::rank::{Direction, QueryAttack};
use crate::attack::objective::targets::{LabelMislead, TowardPoint};
use crate::attack::result::AttackResult;
use crate::attack::tally::Tally;
use crate::attack::unit::{Attack, Plan};
use crate::eval::knn::{Embeddings, top_k};
use anyhow::Result;
use burn::tensor::{Bool, Tensor, TensorData};
use rand_chacha::ChaCha8Rng;

/// Recall@1 of the attacked queries under LTM and GTM; GTT's top-4 hit rate.
pub const LTM: Column = Column::named("LTM");
pub const GTM: Column = Column::named("GTM");
pub const GTT: Column = Column::named("GTT");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    Ltm,
    Gtm,
    Gtt,
}

impl Label {
    fn column(self) -> Column {
        match self {
            Self::Ltm => LTM,
            Self::Gtm => GTM,
            Self::Gtt => GTT,
        }
    }
}

impl Attack for Label {
    fn spec(&self) -> String {
        self.column().name().into()
    }

    fn plan(&self, ctx: &Context, items: &[usize], _rng: &mut ChaCha8Rng) -> Result<Box<dyn Plan>> {
        let (b, n, ranked) = (items.len(), ctx.ranked_n(), ctx.ranked_labels());
        let labels = &ctx.set.labels;
        let objective: Box<dyn Objective> = match self {
            Self::Ltm => {
                let mut same = vec![false; b * n];
                let mut diff = vec![false; b * n];
                for (r, &qi) in items.iter().enumerate() {
                    for j in 0..n {
                        let s = ranked[j] == labels[qi];
                        same[r * n + j] = s && (Some(j) != ctx.own(qi) || ctx.robrank_compat);
                        diff[r * n + j] = !s;
                    }
                }
                let m = |v: Vec<bool>| Tensor::<2, Bool>::from_data(TensorData::new(v, [b, n]), &ctx.device);
                Box::new(LabelMislead {
                    candidates: ctx.cand.clone(),
                    cand_sq: ctx.cand_sq.clone(),
                    same: m(same),
                    diff: m(diff),
                })
            }
            Self::Gtm => {
                let targets: Vec<usize> = items.iter().map(|&qi| gtm_target(ctx, qi)).collect();
                Box::new(TowardPoint {
                    target: ctx.ranked_rows(&targets),
                })
            }
            Self::Gtt => {
                let top1: Vec<usize> = items.iter().map(|&qi| ctx.neighbours(qi, 1)[0].1 as usize).collect();
                let objective = QueryAttack {
                    candidate: ctx.ranked_rows(&top1),
                    all: ctx.cand.clone(),
                    all_sq: ctx.cand_sq.clone(),
                    direction: Direction::Lower,
                };
                return Ok(Box::new(GttPlan {
                    items: items.to_vec(),
                    top1,
                    objective,
                }));
            }
        };
        Ok(Box::new(RecallPlan {
            column: self.column(),
            items: items.to_vec(),
            objective,
        }))
    }

    fn ers_columns(&self) -> Vec<Column> {
        vec![self.column()]
    }

    fn ers_term(&self, column: Column, raw: f64) -> Option<f64> {
        (column == self.column()).then_some(raw)
    }

    /// CA-TRIDE, Appendix B: LTM and GTM relative to the clean Recall@1, GTT as it is.
    fn ars_term(&self, column: Column, result: &AttackResult) -> Option<f64> {
        match (self, column == self.column()) {
            (_, false) => None,
            (Self::Gtt, true) => result.get(column),
            (_, true) => relative_recall(result, column),
        }
    }
}

/// GTM's target: the nearest item of a class other than the query's current top-1's. robrank's
/// `_sel_gtm` uses that item's position in the subset as an index (`--robrank-compat`), in a
/// subset that keeps the query's own slot (at distance 1e38) when the query's class is not its
/// top-1's: the positions after it shift by one, and so does the index.
fn gtm_target(ctx: &Context, qi: usize) -> usize {
    let (labels, own) = (ctx.ranked_labels(), ctx.own(qi));
    let d = ctx.host_dists(ctx.clean.row(qi));
    let top1 = top_k(&d, 1, own)[0].1 as usize;
    let subset: Vec<usize> = (0..ctx.ranked_n())
        .filter(|&j| labels[j] != labels[top1] && (Some(j) != own || ctx.robrank_compat))
        .collect();
    let dist = |j: usize| if Some(j) == own { f32::INFINITY } else { d[j] };
    let best = (0..subset.len())
        .min_by(|&a, &b| dist(subset[a]).total_cmp(&dist(subset[b])))
        .unwrap_or(0);
    if ctx.robrank_compat {
        best.min(ctx.ranked_n() - 1)
    } else {
        subset.get(best).copied().unwrap_or(own.unwrap_or(top1))
    }
}

struct RecallPlan {
    column: Column,
    items: Vec<usize>,
    objective: Box<dyn Objective>,
}

impl Plan for RecallPlan {
    fn objective(&self) -> &dyn Objective {
        self.objective.as_ref()
    }

    fn score(&self, target: &Context, adv: &Embeddings, tally: &mut Tally) -> Result<()> {
        let (m, rows) = attacked_recall(target, &self.items, adv, tally)?;
        add_recall(tally, self.column, &m, &rows, 0);
        Ok(())
    }
}

struct GttPlan {
    items: Vec<usize>,
    top1: Vec<usize>,
    objective: QueryAttack,
}

impl Plan for GttPlan {
    fn objective(&self) -> &dyn Objective {
        &self.objective
    }

    fn score(&self, target: &Context, adv: &Embeddings, tally: &mut Tally) -> Result<()> {
        for (r, (&qi, &ci)) in self.items.iter().zip(&self.top1).enumerate() {
            let top4 = top_k(&target.host_dists(adv.row(r)), 4, target.own(qi));
            tally.add(
                GTT,
                r,
                100.0 * f64::from(u8::from(top4.iter().any(|t| t.1 as usize == ci))),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attack::units::pixels::context;

    #[test]
    fn gtm_targets_the_nearest_other_class_and_robrank_its_shifted_position() {
        // Query 0 (class 0) at 0.5; its top-1, item 1 at 0.52, is of class 1. Items not of class 1:
        // the query itself, item 2 (class 0, far) and item 3 (class 2, near).
        let (points, labels) = ([0.5, 0.52, 0.1, 0.45, 0.9], [0, 1, 0, 2, 1]);
        assert_eq!(gtm_target(&context(&points, &labels, false), 0), 3);
        // robrank: the subset [0, 2, 3] keeps the query's slot; the nearest is at position 2,
        // taken as the item index 2 (without the slot it would be position 1: the top-1 itself).
        assert_eq!(gtm_target(&context(&points, &labels, true), 0), 2);
        // A query of its top-1's class has no slot in the subset: the nearest, item 3, is at
        // position 1 of [2, 3], taken as the item index 1.
        let (points, labels) = ([0.5, 0.52, 0.1, 0.45, 0.9], [1, 1, 0, 2, 1]);
        assert_eq!(gtm_target(&context(&points, &labels, false), 0), 3);
        assert_eq!(gtm_target(&context(&points, &labels, true), 0), 1);
    }
}
