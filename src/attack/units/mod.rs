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

use super::column::Column;
use super::context::Context;
use super::tally::Tally;
use crate::eval::knn::Embeddings;
use crate::eval::metrics::{QueryRow, Retrieval};
use anyhow::Result;

/// The metrics of the attacked queries `adv` of `items` against the clean test set, each query's
/// own clean copy left out and queries with no other item of their class not counted (as
/// `eval`), with each query's own values; adds the clean Recall@1 of the same queries to `tally`.
pub(crate) fn attacked_recall(
    target: &Context,
    items: &[usize],
    adv: &Embeddings,
    tally: &mut Tally,
) -> Result<(Retrieval, Vec<Option<QueryRow>>)> {
    let m = target.retrieval(items, adv, &[1])?;
    clean_recall(target, items, tally)?;
    Ok(m)
}

/// Adds the clean Recall@1 of `items` (queries with no other item of their class not counted).
pub(crate) fn clean_recall(target: &Context, items: &[usize], tally: &mut Tally) -> Result<()> {
    let (c, rows) = target.retrieval(items, &target.clean_of(items)?, &[1])?;
    add_recall(tally, Column::RECALL_CLEAN, &c, &rows, 0);
    Ok(())
}

/// Adds Recall@k, the `t`-th k of `m`, in percent, summed over the queries that are not lone.
pub(crate) fn add_recall(tally: &mut Tally, column: Column, m: &Retrieval, rows: &[Option<QueryRow>], t: usize) {
    let scored = m.queries - m.lone_queries;
    let sum = 100.0 * m.recall.get(t).map_or(0.0, |r| r.1) * scored as f64;
    let per: Vec<(usize, f64)> = scored_rows(rows, |q| 100.0 * f64::from(u8::from(q.hits[t])));
    tally.add_sum(column, sum, &per);
}

/// Adds MAP@R in percent, summed over the queries that are not lone.
pub(crate) fn add_map_at_r(tally: &mut Tally, m: &Retrieval, rows: &[Option<QueryRow>]) {
    let scored = m.queries - m.lone_queries;
    let per: Vec<(usize, f64)> = scored_rows(rows, |q| 100.0 * q.map_at_r);
    tally.add_sum(Column::MAP_AT_R, 100.0 * m.map_at_r * scored as f64, &per);
}

/// Each query that is not lone, by its row, and its value.
fn scored_rows(rows: &[Option<QueryRow>], value: impl Fn(&QueryRow) -> f64) -> Vec<(usize, f64)> {
    rows.iter()
        .enumerate()
        .filter_map(|(r, q)| q.as_ref().map(|q| (r, value(q))))
        .collect()
}
