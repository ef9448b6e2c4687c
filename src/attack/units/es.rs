//! Embedding shift (ES, robrank): each query is pushed as far as the budget allows from its own
//! clean embedding; reported as the distance moved in the model's own distance (ES:D: Euclidean,
//! or `1 − cos` for a cosine-distance model, as robrank) and Recall@1 after it (ES:R). With
//! `--robrank-compat`, every step is robrank's (one constant offset of every coordinate of the
//! clean embedding, at the first step and, from its loss's eps, at each later one,
//! [`Offset::robrank`]) and ES:D is measured where robrank measures it: on the last forward pass
//! of the attack, before its last step; otherwise the first step is rdml's jitter, the later
//! ones have no offset, and ES:D is measured on the final images.

use super::attacked_recall;
use crate::attack::column::Column;
use crate::attack::context::Context;
use crate::attack::objective::Objective;
use crate::attack::objective::shift::{EmbeddingShift, Offset};
use crate::attack::result::AttackResult;
use crate::attack::tally::Tally;
use crate::attack::unit::{Attack, Plan};
use crate::eval::knn::Embeddings;
use crate::host::read;
use anyhow::Result;
use burn::tensor::Tensor;
use rand_chacha::ChaCha8Rng;
use std::cell::RefCell;

/// The distance moved (not a percentage), and Recall@1 after it.
pub const ES_D: Column = Column::named("ES:D");
pub const ES_R: Column = Column::named("ES:R");

pub struct Es;

impl Attack for Es {
    fn spec(&self) -> String {
        "ES".into()
    }

    fn plan(&self, ctx: &Context, items: &[usize], _rng: &mut ChaCha8Rng) -> Result<Box<dyn Plan>> {
        Ok(Box::new(EsPlan {
            items: items.to_vec(),
            objective: Recorded {
                shift: EmbeddingShift {
                    clean: ctx.rows(items),
                    offset: if ctx.robrank_compat {
                        Offset::robrank(ctx.distance)
                    } else {
                        Offset::Jitter
                    },
                },
                last: RefCell::new(None),
            },
            robrank_compat: ctx.robrank_compat,
        }))
    }

    fn ers_columns(&self) -> Vec<Column> {
        vec![ES_D, ES_R]
    }

    /// robrank's `pjswipe.py`: ES:D over the maximal chord 2 of the unit sphere, inverted; ES:R
    /// as it is.
    fn ers_term(&self, column: Column, raw: f64) -> Option<f64> {
        match column {
            ES_D => Some(100.0 * (2.0 - raw) / 2.0),
            ES_R => Some(raw),
            _ => None,
        }
    }

    /// CA-TRIDE, Appendix B: ES:R relative to the clean Recall@1; ES:D has no ARS term.
    fn ars_term(&self, column: Column, result: &AttackResult) -> Option<f64> {
        (column == ES_R).then(|| relative_recall(result, ES_R)).flatten()
    }
}

/// `100 · attacked / clean` Recall@1 of a result (0 when the clean recall is 0).
pub(crate) fn relative_recall(result: &AttackResult, column: Column) -> Option<f64> {
    let raw = result.get(column)?;
    let clean = result.get(Column::RECALL_CLEAN)?;
    Some(if clean > 0.0 { 100.0 * raw / clean } else { 0.0 })
}

struct EsPlan {
    items: Vec<usize>,
    objective: Recorded,
    /// ES:D from the last forward pass of the attack, before its last step (robrank's moment).
    robrank_compat: bool,
}

/// The embedding shift, keeping the last embeddings its loss was given: robrank reports ES:D
/// from the forward pass before its last PGD step, not from the final images.
struct Recorded {
    shift: EmbeddingShift,
    last: RefCell<Option<Tensor<2>>>,
}

impl Objective for Recorded {
    fn loss(&self, emb: Tensor<2>, step: usize) -> Tensor<1> {
        *self.last.borrow_mut() = Some(emb.clone().detach().without_autodiff());
        self.shift.loss(emb, step)
    }

    fn row_losses(&self, emb: Tensor<2>) -> Option<Tensor<1>> {
        self.shift.row_losses(emb)
    }
}

impl Plan for EsPlan {
    fn objective(&self) -> &dyn Objective {
        &self.objective
    }

    fn score(&self, target: &Context, adv: &Embeddings, tally: &mut Tally) -> Result<()> {
        let (m, rows) = attacked_recall(target, &self.items, adv, tally)?;
        let n = self.items.len();
        let before_last = match (self.robrank_compat, self.objective.last.borrow().as_ref()) {
            (true, Some(e)) if e.dims() == [n, adv.dim] => Some(Embeddings::new(read(e)?, n, adv.dim)?),
            _ => None,
        };
        let moved = before_last.as_ref().unwrap_or(adv);
        let shifts: Vec<(usize, f64)> = (0..n)
            .map(|r| {
                (
                    r,
                    target.distance.host(target.clean.row(self.items[r]), moved.row(r)) as f64,
                )
            })
            .collect();
        tally.add_sum(ES_D, shifts.iter().map(|s| s.1).sum(), &shifts);
        super::add_recall(tally, ES_R, &m, &rows, 0);
        Ok(())
    }
}
