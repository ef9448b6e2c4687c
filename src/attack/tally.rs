//! The running sums a suite run accumulates each column in, and on request every item's own
//! value ([`super::per_query`]).

use super::column::{Column, Score};
use super::per_query::{PerQuery, Rows};

/// Per-column sums over the items of a run and how many items each covers, in the order
/// columns first appear, and on request every item's own value ([`super::per_query`]). Each
/// column is averaged over its own items: the Recall@k and MAP@R columns leave out queries with
/// no other item of their class, as `eval` does.
#[derive(Debug, Default)]
pub struct Tally {
    sums: Vec<(Column, f64, usize)>,
    rows: Option<Rows>,
}

impl Tally {
    /// A tally that also keeps each item's value.
    pub fn per_query() -> Self {
        Self {
            sums: vec![],
            rows: Some(Default::default()),
        }
    }

    /// The items of the next batch scored: the rows the units report by.
    pub fn batch(&mut self, items: &[usize]) {
        if let Some(r) = &mut self.rows {
            r.batch(items);
        }
    }

    /// The value of row `row` of the batch.
    pub fn add(&mut self, column: Column, row: usize, v: f64) {
        self.add_sum(column, v, &[(row, v)]);
    }

    /// The sum of the values of `rows` (each a row of the batch and its value); the sum as the
    /// unit computes it, so the means stay those of the sums' own arithmetic.
    pub fn add_sum(&mut self, column: Column, sum: f64, rows: &[(usize, f64)]) {
        match self.sums.iter_mut().find(|s| s.0 == column) {
            Some(s) => {
                s.1 += sum;
                s.2 += rows.len();
            }
            None => self.sums.push((column, sum, rows.len())),
        }
        if let Some(r) = &mut self.rows {
            for &(row, v) in rows {
                r.add(column, row, v);
            }
        }
    }

    /// Each column's mean over its items, the columns that covered no item (every query lone:
    /// left out rather than reported as 0, for the caller to refuse), and with per-query values
    /// kept, every item's values.
    pub fn finish(self) -> Finished {
        let (covered, uncovered): (Vec<_>, Vec<_>) = self.sums.into_iter().partition(|s| s.2 > 0);
        Finished {
            means: covered
                .into_iter()
                .map(|(name, v, n)| Score {
                    name,
                    value: v / n as f64,
                })
                .collect(),
            uncovered: uncovered.into_iter().map(|s| s.0).collect(),
            per_query: self.rows.map(Rows::finish),
        }
    }
}

/// A finished tally: see [`Tally::finish`].
pub struct Finished {
    pub means: Vec<Score>,
    pub uncovered: Vec<Column>,
    pub per_query: Option<PerQuery>,
}
