//! The nearest-neighbour attack of the positive-perturbation paper (its Algorithm 1): each query
//! its model retrieves correctly is pushed away from its nearest (same-class) neighbour; the
//! others stay. NN-CW is the same attack by Carlini and Wagner's L∞ algorithm on their margin
//! loss with confidence κ (the paper's Tables 4 and 7), NN-CW-PGD that loss by PGD ("CW∞" of
//! Madry et al.). Each reports Recall@1 and MAP@R after the attack.

use super::{add_map_at_r, add_recall, attacked_recall};
use crate::attack::column::Column;
use crate::attack::context::Context;
use crate::attack::objective::Objective;
use crate::attack::objective::nn::{AwayFromNeighbour, CwMargin};
use crate::attack::tally::Tally;
use crate::attack::unit::{Attack, Optimiser, Plan};
use crate::eval::knn::Embeddings;
use anyhow::Result;
use burn::tensor::{Bool, Tensor, TensorData};
use rand_chacha::ChaCha8Rng;

/// C&W's budget in rounds: a row may use `CW_ROUNDS × steps` optimiser steps in all.
pub const CW_ROUNDS: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Nn {
    /// Away from the nearest neighbour, by PGD.
    Plain,
    /// C&W's margin loss by C&W's L∞ algorithm.
    Cw { kappa: f32 },
    /// C&W's margin loss by PGD.
    CwPgd { kappa: f32 },
}

impl Attack for Nn {
    fn spec(&self) -> String {
        let with_kappa = |name: &str, kappa: f32| {
            if kappa == 0.0 {
                name.to_string()
            } else {
                format!("{name}:{kappa}")
            }
        };
        match *self {
            Self::Plain => "NN".into(),
            Self::Cw { kappa } => with_kappa("NN-CW", kappa),
            Self::CwPgd { kappa } => with_kappa("NN-CW-PGD", kappa),
        }
    }

    fn optimiser(&self) -> Optimiser {
        match self {
            Self::Cw { .. } => Optimiser::CwLinf { rounds: CW_ROUNDS },
            _ => Optimiser::Pgd,
        }
    }

    fn plan(&self, ctx: &Context, items: &[usize], _rng: &mut ChaCha8Rng) -> Result<Box<dyn Plan>> {
        let (b, n, ranked) = (items.len(), ctx.ranked_n(), ctx.ranked_labels());
        let labels = &ctx.set.labels;
        let nearest: Vec<usize> = items.iter().map(|&qi| ctx.neighbours(qi, 1)[0].1 as usize).collect();
        // Algorithm 1 attacks only the queries retrieved correctly.
        let movable: Vec<bool> = items
            .iter()
            .zip(&nearest)
            .map(|(&qi, &nb)| ranked[nb] == labels[qi])
            .collect();
        let objective: Box<dyn Objective> = match *self {
            Self::Plain => Box::new(AwayFromNeighbour {
                neighbour: ctx.ranked_rows(&nearest),
            }),
            Self::Cw { kappa } | Self::CwPgd { kappa } => {
                let other: Vec<bool> = items
                    .iter()
                    .flat_map(|&qi| (0..n).map(move |j| ranked[j] != labels[qi]))
                    .collect();
                Box::new(CwMargin {
                    neighbour: ctx.ranked_rows(&nearest),
                    candidates: ctx.cand.clone(),
                    cand_sq: ctx.cand_sq.clone(),
                    other: Tensor::<2, Bool>::from_data(TensorData::new(other, [b, n]), &ctx.device),
                    kappa,
                })
            }
        };
        Ok(Box::new(NnPlan {
            items: items.to_vec(),
            movable,
            objective,
        }))
    }
}

struct NnPlan {
    items: Vec<usize>,
    movable: Vec<bool>,
    objective: Box<dyn Objective>,
}

impl Plan for NnPlan {
    fn objective(&self) -> &dyn Objective {
        self.objective.as_ref()
    }

    fn movable(&self) -> Option<&[bool]> {
        Some(&self.movable)
    }

    fn score(&self, target: &Context, adv: &Embeddings, tally: &mut Tally) -> Result<()> {
        let (m, rows) = attacked_recall(target, &self.items, adv, tally)?;
        add_recall(tally, Column::recall(1), &m, &rows, 0);
        add_map_at_r(tally, &m, &rows);
        Ok(())
    }
}

/// `NN-CW[:κ]` or `NN-CW-PGD[:κ]` (also `kappa=κ`), κ ≥ 0, default 0.
pub fn cw_from_spec(p: &mut crate::attack::spec::Params) -> Result<Box<dyn Attack>> {
    let kappa = p
        .number("kappa", "κ, a number ≥ 0", |k: &f32| k.is_finite() && *k >= 0.0)?
        .unwrap_or(0.0);
    Ok(Box::new(if p.name() == "NN-CW" {
        Nn::Cw { kappa }
    } else {
        Nn::CwPgd { kappa }
    }))
}
