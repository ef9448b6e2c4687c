//! Retrieval metrics, computed per query from its row of distances in one blocked pass.
//!
//! Definitions (`R` = number of gallery items with the query's label, the query itself left out
//! when the gallery is the query set; neighbours ordered by (distance, index)):
//! - Recall@k: 1 if a same-label item is among the k nearest.
//! - MAP@R (Musgrave et al., PML): `Σ_{i≤R, rel_i} P@i / R`.
//! - robrank's "mAP@R", which is mAP@10: `Σ_{i≤10, rel_i} P@i / 10` (reported as `map_at_10`).
//! - mAP: average precision over all `R` relevant items, `Σ_j j / rank_j / R`.
//! - R-precision: relevant items among the R nearest, divided by R.
//!
//! Queries without any same-label gallery item ("lone" queries) are left out of every metric, as
//! PML does, and counted in `lone_queries`.

use super::before::before_relevant;
use super::knn::{Embeddings, scan_rows};
use super::one_set::one_set;
use super::order::{key_less, top_k};
use anyhow::{Result, ensure};
use burn::tensor::Device;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Metrics of one query set against one gallery.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Retrieval {
    /// `(k, Recall@k)`.
    pub recall: Vec<(usize, f64)>,
    pub map_at_r: f64,
    pub map_at_10: f64,
    pub map: f64,
    pub r_precision: f64,
    pub queries: usize,
    pub lone_queries: usize,
}

impl Retrieval {
    pub fn recall_at(&self, k: usize) -> Option<f64> {
        self.recall.iter().find(|(kk, _)| *kk == k).map(|x| x.1)
    }
}

/// One query's own values, for per-query records: whether a same-label item is among its `k`
/// nearest (in the order of the `ks` asked), and its MAP@R.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryRow {
    pub hits: Vec<bool>,
    pub map_at_r: f64,
}

#[derive(Default, Clone)]
struct RowStats {
    lone: bool,
    hits: Vec<bool>,
    ap_r: f64,
    ap_10: f64,
    ap: f64,
    r_prec: f64,
}

/// The `k` a query's list needs: the largest recall k, its class's `r`, and 10 (mAP@10).
fn list_length(ks: &[usize], r: usize) -> usize {
    ks.iter().copied().max().unwrap_or(1).max(r).max(10)
}

/// Scores one query's row. `members` are the gallery items of the query's label.
fn row_stats(
    row: &[f32],
    qlabel: u32,
    glabels: &[u32],
    members: &[u32],
    skip: Option<usize>,
    r: usize,
    ks: &[usize],
) -> RowStats {
    if r == 0 {
        return RowStats {
            lone: true,
            ..Default::default()
        };
    }
    let top = top_k(row, list_length(ks, r), skip);
    let mut rel_keys: Vec<(f32, u32)> = members
        .iter()
        .filter(|&&j| Some(j as usize) != skip)
        .map(|&j| (row[j as usize], j))
        .collect();
    rel_keys.sort_unstable_by(|a, b| key_less(*a, *b));
    stats(&top, &before_relevant(row, &rel_keys, skip), qlabel, glabels, ks)
}

/// A query's metrics from its nearest items `top` (at least [`list_length`]) and, for each of
/// its `r` relevant items in order, the items before it.
fn stats(top: &[(f32, u32)], before: &[usize], qlabel: u32, glabels: &[u32], ks: &[usize]) -> RowStats {
    let r = before.len();
    if r == 0 {
        return RowStats {
            lone: true,
            ..Default::default()
        };
    }
    let rel: Vec<bool> = top.iter().map(|&(_, j)| glabels[j as usize] == qlabel).collect();
    let hits = ks.iter().map(|&k| rel.iter().take(k).any(|&b| b)).collect();
    let ap_at = |depth: usize, divisor: usize| {
        let (mut found, mut s) = (0usize, 0.0f64);
        for (i, &b) in rel.iter().take(depth).enumerate() {
            if b {
                found += 1;
                s += found as f64 / (i + 1) as f64;
            }
        }
        (s / divisor as f64, found)
    };
    let (ap_r, found_r) = ap_at(r, r);
    let (ap_10, _) = ap_at(10, 10);
    let full: f64 = before
        .iter()
        .enumerate()
        .map(|(j, &b)| (j + 1) as f64 / (b + 1) as f64)
        .sum();
    RowStats {
        lone: false,
        hits,
        ap_r,
        ap_10,
        ap: full / r as f64,
        r_prec: found_r as f64 / r as f64,
    }
}

/// Computes the retrieval metrics of `query` against `gallery` (or, with `gallery = None`, of the
/// set against itself, each query left out of its own list).
pub fn retrieval(
    query: &Embeddings,
    qlabels: &[u32],
    gallery: Option<(&Embeddings, &[u32])>,
    ks: &[usize],
    device: &Device,
) -> Result<Retrieval> {
    match gallery {
        Some((g, gl)) => retrieval_skipping(query, qlabels, g, gl, None, ks, device),
        None => {
            // On the CPU each pair's distance once, both rows of it at a time.
            let cpu = device.clone().without_autodiff() == crate::default_device();
            if let Some(rows) = cpu.then(|| one_set(query, qlabels, |r| list_length(ks, r))).flatten() {
                let rows: Vec<RowStats> = rows
                    .iter()
                    .zip(qlabels)
                    .map(|(row, &l)| stats(&row.top, &row.before, l, qlabels, ks))
                    .collect();
                return Ok(summary(&rows, ks, query.n));
            }
            let own: Vec<Option<usize>> = (0..query.n).map(Some).collect();
            retrieval_skipping(query, qlabels, query, qlabels, Some(&own), ks, device)
        }
    }
}

/// Like [`retrieval`], with query `i` left out of the gallery at index `own[i]` where it has one
/// (an attacked query searched among the clean embeddings of its own test set; a gallery holding
/// queries' own items, [`crate::data::labelled`]).
pub fn retrieval_skipping(
    query: &Embeddings,
    qlabels: &[u32],
    gemb: &Embeddings,
    glabels: &[u32],
    own: Option<&[Option<usize>]>,
    ks: &[usize],
    device: &Device,
) -> Result<Retrieval> {
    Ok(retrieval_rows(query, qlabels, gemb, glabels, own, ks, device)?.0)
}

/// [`retrieval_skipping`], with each query's own values (`None` for a lone query).
pub fn retrieval_rows(
    query: &Embeddings,
    qlabels: &[u32],
    gemb: &Embeddings,
    glabels: &[u32],
    own: Option<&[Option<usize>]>,
    ks: &[usize],
    device: &Device,
) -> Result<(Retrieval, Vec<Option<QueryRow>>)> {
    ensure!(
        query.n == qlabels.len(),
        "{} query embeddings for {} labels",
        query.n,
        qlabels.len()
    );
    ensure!(
        gemb.n == glabels.len(),
        "{} gallery embeddings for {} labels",
        gemb.n,
        glabels.len()
    );
    if let Some(o) = own {
        ensure!(o.len() == query.n, "one own index per query");
    }
    let mut members: HashMap<u32, Vec<u32>> = HashMap::new();
    for (j, &l) in glabels.iter().enumerate() {
        members.entry(l).or_default().push(j as u32);
    }
    let rows = scan_rows(query, gemb, device, |i, row| {
        let skip = own.and_then(|o| o[i]);
        let class = members.get(&qlabels[i]).map_or(&[][..], |m| &m[..]);
        let r = class.len() - usize::from(skip.is_some_and(|j| glabels[j] == qlabels[i]));
        row_stats(row, qlabels[i], glabels, class, skip, r, ks)
    })?;
    let summary = summary(&rows, ks, query.n);
    let rows: Vec<Option<QueryRow>> = rows
        .into_iter()
        .map(|s| {
            (!s.lone).then_some(QueryRow {
                hits: s.hits,
                map_at_r: s.ap_r,
            })
        })
        .collect();
    Ok((summary, rows))
}

/// The means over the queries that are not lone.
fn summary(rows: &[RowStats], ks: &[usize], queries: usize) -> Retrieval {
    let scored: Vec<&RowStats> = rows.iter().filter(|s| !s.lone).collect();
    let n = scored.len().max(1) as f64;
    let mean = |f: &dyn Fn(&RowStats) -> f64| scored.iter().map(|s| f(s)).sum::<f64>() / n;
    Retrieval {
        recall: ks
            .iter()
            .enumerate()
            .map(|(t, &k)| (k, mean(&|s| f64::from(u8::from(s.hits[t])))))
            .collect(),
        map_at_r: mean(&|s| s.ap_r),
        map_at_10: mean(&|s| s.ap_10),
        map: mean(&|s| s.ap),
        r_precision: mean(&|s| s.r_prec),
        queries,
        lone_queries: rows.len() - scored.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(points: &[f32]) -> Embeddings {
        Embeddings::new(points.to_vec(), points.len(), 1).unwrap()
    }

    #[test]
    fn hand_computed_case() {
        let dev = Device::default();
        // Query 0 at 0.0 (label A). Others by distance: 1:B(1) 2:A(2) 3:B(3) 4:A(4) 5:C(9).
        let e = line(&[0.0, 1.0, 2.0, 3.0, 4.0, 9.0]);
        let labels = [0, 1, 0, 1, 0, 2];
        let q = line(&[0.0]);
        let m = retrieval(&q, &[0], Some((&e.clone(), &labels)), &[1, 2, 4], &dev).unwrap();
        // Gallery includes the query's own copy at distance 0 (labelled A): ranks A@1, B@2, A@3, B@4, A@5.
        // R = 3. R@1 = 1. MAP@R = (1/1 + 2/3)/3 = 0.5556. mAP@10 = (1 + 2/3 + 3/5)/10 = 0.2267.
        // mAP = (1 + 2/3 + 3/5)/3 = 0.7556. R-precision = 2/3.
        assert_eq!(m.recall_at(1), Some(1.0));
        assert!((m.map_at_r - (1.0 + 2.0 / 3.0) / 3.0).abs() < 1e-9);
        assert!((m.map_at_10 - (1.0 + 2.0 / 3.0 + 0.6) / 10.0).abs() < 1e-9);
        assert!((m.map - (1.0 + 2.0 / 3.0 + 0.6) / 3.0).abs() < 1e-9);
        assert!((m.r_precision - 2.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn leave_one_out_lone_queries_and_ties() {
        let dev = Device::default();
        // Items 1 and 2 tie at distance 1 from item 0; the lower index (1, wrong label) wins.
        let e = line(&[0.0, 1.0, -1.0, 10.0, 20.0]);
        let labels = [0, 1, 0, 1, 7];
        let m = retrieval(&e, &labels, None, &[1, 2], &dev).unwrap();
        // Item 4 (label 7) has no same-label item: lone, left out.
        assert_eq!(m.lone_queries, 1);
        // q0: nn = 1(B), 2(A) → R@1 0, R@2 1. q1 (B): nn 0(A),2(A),3(B) → R@1 0, R@2 0.
        // q2 (A): nn 0(A) → 1. q3 (B): nn 1(B) (d=9) vs 0 (d=10) → 1.
        assert_eq!(m.recall_at(1), Some(0.5));
        assert_eq!(m.recall_at(2), Some(0.75));
    }

    #[test]
    fn map_at_r_differs_from_map_at_10() {
        let dev = Device::default();
        // Class A on a line from the query outwards, with class B at 5 and 10.
        let mut pts = vec![0.0];
        let mut labels = vec![0u32];
        for i in 1..=14 {
            pts.push(i as f32);
            labels.push(if i % 5 == 0 { 1 } else { 0 });
        }
        let e = line(&pts);
        let m = retrieval(&line(&[0.0]), &[0], Some((&e, &labels)), &[1], &dev).unwrap();
        // Gallery order: 0A 1A 2A 3A 4A 5B 6A 7A 8A 9A 10B 11A 12A 13A 14A; R = 13 A's.
        let s10: f64 = 5.0 + 6.0 / 7.0 + 7.0 / 8.0 + 8.0 / 9.0 + 9.0 / 10.0;
        assert!((m.map_at_10 - s10 / 10.0).abs() < 1e-9);
        let sr = s10 + 10.0 / 12.0 + 11.0 / 13.0;
        assert!((m.map_at_r - sr / 13.0).abs() < 1e-9);
        assert!((m.map_at_10 - m.map_at_r).abs() > 0.05);
    }
}
