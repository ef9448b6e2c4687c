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
    /// What was added, in order, for another rank to add again ([`Tally::replay`]).
    log: Option<Vec<Logged>>,
}

/// One addition to a tally, as a rank tells it to the others: the values as their bits, so the
/// sums another rank makes of them are the single process's, to the last bit.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum Logged {
    Batch(Vec<usize>),
    Sum(Column, u64, Vec<(usize, u64)>),
}

impl Tally {
    /// A tally that also keeps each item's value.
    pub fn per_query() -> Self {
        Self {
            rows: Some(Default::default()),
            ..Default::default()
        }
    }

    /// A tally that only logs what is added, for [`Tally::replay`] on every rank.
    pub fn logged() -> Self {
        Self {
            log: Some(vec![]),
            ..Default::default()
        }
    }

    /// The additions logged so far.
    pub fn take_log(&mut self) -> Vec<Logged> {
        self.log.take().unwrap_or_default()
    }

    /// Adds again, in order, what a logged tally was added.
    pub fn replay(&mut self, log: Vec<Logged>) {
        for l in log {
            match l {
                Logged::Batch(items) => self.batch(&items),
                Logged::Sum(c, sum, rows) => {
                    let rows: Vec<(usize, f64)> = rows.into_iter().map(|(r, v)| (r, f64::from_bits(v))).collect();
                    self.add_sum(c, f64::from_bits(sum), &rows);
                }
            }
        }
    }

    /// The items of the next batch scored: the rows the units report by.
    pub fn batch(&mut self, items: &[usize]) {
        if let Some(r) = &mut self.rows {
            r.batch(items);
        }
        if let Some(log) = &mut self.log {
            log.push(Logged::Batch(items.to_vec()));
        }
    }

    /// The value of row `row` of the batch.
    pub fn add(&mut self, column: Column, row: usize, v: f64) {
        self.add_sum(column, v, &[(row, v)]);
    }

    /// The sum of the values of `rows` (each a row of the batch and its value); the sum as the
    /// unit computes it, so the means stay those of the sums' own arithmetic.
    pub fn add_sum(&mut self, column: Column, sum: f64, rows: &[(usize, f64)]) {
        if let Some(log) = &mut self.log {
            let bits = rows.iter().map(|&(r, v)| (r, v.to_bits())).collect();
            log.push(Logged::Sum(column, sum.to_bits(), bits));
        }
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
