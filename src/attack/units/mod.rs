//! The attacks, one file per family; [`crate::attack::registry`] maps their names to them.

pub mod es;
#[cfg(test)]
pub mod example;
pub mod feature;
pub mod label;
pub mod nn;
#[cfg(test)]
pub mod pixels;
pub mod ranking;
pub mod spqa;
pub mod tma;

use super::column::{Column, Tally};
use super::context::Context;
use crate::eval::knn::Embeddings;
use crate::eval::metrics::Retrieval;
use anyhow::Result;

/// Recall@1 of the attacked queries `adv` of `items` against the clean test set, each query's
/// own clean copy left out and queries with no other item of their class not counted (as
/// `eval`): adds the clean Recall@1 of the same queries to `tally`, and returns the attacked
/// metrics with their Recall@1 summed over the scored queries (in percent) and their number.
pub(crate) fn attacked_recall(
    target: &Context,
    items: &[usize],
    adv: &Embeddings,
    tally: &mut Tally,
) -> Result<(Retrieval, f64, usize)> {
    let m = target.retrieval(items, adv, &[1])?;
    let scored = m.queries - m.lone_queries;
    let hits = 100.0 * m.recall_at(1).unwrap_or(0.0) * scored as f64;
    clean_recall(target, items, tally)?;
    Ok((m, hits, scored))
}

/// Adds the clean Recall@1 of `items` (queries with no other item of their class not counted).
pub(crate) fn clean_recall(target: &Context, items: &[usize], tally: &mut Tally) -> Result<()> {
    let c = target.retrieval(items, &target.clean_of(items)?, &[1])?;
    let scored = c.queries - c.lone_queries;
    tally.add_sum(
        Column::RECALL_CLEAN,
        100.0 * c.recall_at(1).unwrap_or(0.0) * scored as f64,
        scored,
    );
    Ok(())
}
