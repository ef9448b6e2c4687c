//! The interface every attack implements. An attack is a selection and an objective (which rows
//! of a batch move, and toward what), a way to score the moved embeddings, and its terms in the
//! ERS and ARS tables. How the images are moved (white-box PGD, C&W, NES, one universal
//! perturbation, on the attacked model or a surrogate) is the [`super::method`]'s business.

use super::column::{Column, Score};
use super::context::Context;
use super::objective::Objective;
use super::result::AttackResult;
use super::tally::Tally;
use crate::eval::knn::Embeddings;
use anyhow::Result;
use rand_chacha::ChaCha8Rng;

/// The optimiser an attack is defined with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Optimiser {
    /// Projected gradient steps ([`super::engine::Request`]).
    Pgd,
    /// Carlini and Wagner's L∞ algorithm ([`super::cw::cw_linf`]), allowed `rounds × steps`
    /// optimiser steps per row in all.
    CwLinf { rounds: usize },
}

/// One attack, by name.
pub trait Attack: Send + Sync {
    /// The canonical spec, which [`super::registry::attack`] parses back to this attack.
    fn spec(&self) -> String;

    fn optimiser(&self) -> Optimiser {
        Optimiser::Pgd
    }

    /// Whether the items it moves are ranked images (CA±'s candidates), taken from the gallery
    /// when the queries have one; otherwise they are queries.
    fn moves_ranked(&self) -> bool {
        false
    }

    /// Selects targets for a batch of items (queries, or candidates for CA) in the view of
    /// `attacker` (the attacked model, or a surrogate for a transfer attack), and builds the
    /// objective over the perturbed items' embeddings.
    fn plan(&self, attacker: &Context, items: &[usize], rng: &mut ChaCha8Rng) -> Result<Box<dyn Plan>>;

    /// Whether [`Attack::finish`] needs the attacked embeddings of all items.
    fn keeps_attacked(&self) -> bool {
        false
    }

    /// Columns computed over the whole run (NMI, π_ratio) from the attacked embeddings of all
    /// `items`, when [`Attack::keeps_attacked`].
    fn finish(&self, _target: &Context, _items: &[usize], _attacked: &Embeddings, _seed: u64) -> Result<Vec<Score>> {
        Ok(vec![])
    }

    /// Its raw columns in the ERS table, in robrank's order (none: not part of the ERS suite).
    fn ers_columns(&self) -> Vec<Column> {
        vec![]
    }

    /// The ERS term of one of its raw columns (robrank's `pjswipe.py`).
    fn ers_term(&self, _column: Column, _raw: f64) -> Option<f64> {
        None
    }

    /// The ARS term of one of its raw columns (CA-TRIDE, Appendix B), `None` where ARS has none.
    fn ars_term(&self, _column: Column, _result: &AttackResult) -> Option<f64> {
        None
    }
}

/// One batch's selection: what the optimiser minimises, which rows it may move, and how the
/// moved rows are scored.
pub trait Plan {
    fn objective(&self) -> &dyn Objective;

    /// Rows that may move (`None`: all).
    fn movable(&self) -> Option<&[bool]> {
        None
    }

    /// Adds the batch's per-item scores to `tally`, from the attacked embeddings `adv` (one row
    /// per item, in the order of the batch) in the view of the attacked model `target`.
    fn score(&self, target: &Context, adv: &Embeddings, tally: &mut Tally) -> Result<()>;
}
