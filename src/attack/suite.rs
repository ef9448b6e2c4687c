//! The white-box suites: each attack = query/candidate selection + objective + score, exactly as
//! `../shared/reference` §A2 describes robrank's ERS columns, plus the nearest-neighbour attack of
//! the positive-perturbation paper (its Algorithm 1).

use super::cw::{CwLinf, cw_linf};
use super::engine::{Objective, Pgd, attack};
use super::objective::nn::{AwayFromNeighbour, CwMargin};
use super::objective::rank::{CandidateAttack, Direction, QueryAttack};
use super::objective::{dist_to_all, shift::EmbeddingShift, targets};
use crate::data::loader;
use crate::eval::knn::{Embeddings, top_k};
use crate::eval::{batch_tensor, metrics};
use crate::loss::to_host;
use anyhow::Result;
use burn::tensor::{Bool, Tensor, TensorData};
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

pub use super::context::Context;
use super::context::{embed_tensor, euclid};
pub use super::kind::AttackKind;
pub use super::score::{AttackResult, Robustness, Row, Score, aggregate, ars_rank_term, ers, ers_term};

/// C&W's budget in rounds: a row may use `CW_ROUNDS × steps` optimiser steps in all.
pub const CW_ROUNDS: usize = 10;

/// Runs one attack with the first `queries` test items as queries (or candidates, for CA),
/// `batch` at a time. Scores are averaged over items.
pub fn run(
    ctx: &Context,
    kind: AttackKind,
    pgd: &Pgd,
    queries: usize,
    batch: usize,
    seed: u64,
) -> Result<AttackResult> {
    let t0 = Instant::now();
    let n = ctx.clean.n;
    let q = queries.min(n);
    let topmost = ((0.01 * n as f64) as usize).max(1);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xA77AC);
    let labels = &ctx.set.labels;
    let mut sums: Vec<(String, f64)> = vec![];
    let mut add = |name: &str, v: f64| match sums.iter_mut().find(|s| s.0 == name) {
        Some(s) => s.1 += v,
        None => sums.push((name.to_string(), v)),
    };
    // Attacked embeddings of the feature-space examples, for NMI and π_ratio over all queries.
    let mut attacked: Vec<f32> = vec![];
    for (bi, chunk) in (0..q).collect::<Vec<_>>().chunks(batch.max(1)).enumerate() {
        let hb = loader::load_batch(&ctx.set, chunk, None)?;
        let x = batch_tensor(&hb, &ctx.device);
        let b = chunk.len();
        let aseed = seed.wrapping_add(bi as u64);
        // Each item's clean neighbour list (self excluded), used by several selections.
        let needs_nbrs = !matches!(
            kind,
            AttackKind::CaPlus | AttackKind::QaPlus | AttackKind::Tma | AttackKind::Es
        );
        let nbrs: Vec<Vec<(f32, u32)>> = if needs_nbrs {
            chunk
                .iter()
                .map(|&i| top_k(&ctx.host_dists(ctx.clean.row(i)), topmost.max(8), Some(i)))
                .collect()
        } else {
            vec![vec![]; b]
        };
        match kind {
            AttackKind::CaPlus | AttackKind::CaMinus => {
                let qidx: Vec<usize> = chunk
                    .iter()
                    .zip(&nbrs)
                    .map(|(&c, nb)| match kind {
                        AttackKind::CaPlus => random_other(&mut rng, n, c),
                        _ => from_top(&mut rng, nb, topmost, c),
                    })
                    .collect();
                let qe = ctx.rows(&qidx);
                let dxq = dist_to_all(qe.clone(), &ctx.cand, &ctx.cand_sq);
                let dir = if kind == AttackKind::CaPlus {
                    Direction::Raise
                } else {
                    Direction::Lower
                };
                let obj = CandidateAttack {
                    query: qe,
                    dxq: dxq.clone(),
                    direction: dir,
                };
                let xa = attack(&ctx.model, 0, &x, None, &obj, pgd, aseed)?;
                let ea = embed_tensor(&ctx.model, xa);
                let dxq = to_host(&dxq);
                for (r, (&qi, &c)) in qidx.iter().zip(chunk).enumerate() {
                    let e = &ea[r * ctx.clean.dim..(r + 1) * ctx.clean.dim];
                    let prank = |e: &[f32]| {
                        let dcq: f32 = euclid(ctx.clean.row(qi), e);
                        100.0 * dxq[r * n..(r + 1) * n].iter().filter(|&&d| d < dcq).count() as f64 / n as f64
                    };
                    let (adv, init) = (prank(e), prank(ctx.clean.row(c)));
                    add(kind.name(), adv);
                    add("ARS", ars_rank_term(kind == AttackKind::CaPlus, init, adv));
                }
            }
            AttackKind::QaPlus | AttackKind::QaMinus | AttackKind::Gtt => {
                let cidx: Vec<usize> = chunk
                    .iter()
                    .zip(&nbrs)
                    .map(|(&qi, nb)| match kind {
                        AttackKind::QaPlus => random_other(&mut rng, n, qi),
                        AttackKind::QaMinus => from_top(&mut rng, nb, topmost, qi),
                        _ => nb[0].1 as usize,
                    })
                    .collect();
                let dir = if kind == AttackKind::QaPlus {
                    Direction::Raise
                } else {
                    Direction::Lower
                };
                let obj = QueryAttack {
                    candidate: ctx.rows(&cidx),
                    all: ctx.cand.clone(),
                    all_sq: ctx.cand_sq.clone(),
                    direction: dir,
                };
                let xa = attack(&ctx.model, 0, &x, None, &obj, pgd, aseed)?;
                let ea = embed_tensor(&ctx.model, xa);
                for (r, (&qi, &ci)) in chunk.iter().zip(&cidx).enumerate() {
                    let d = ctx.host_dists(&ea[r * ctx.clean.dim..(r + 1) * ctx.clean.dim]);
                    if kind == AttackKind::Gtt {
                        let top4 = top_k(&d, 4, Some(qi));
                        add(
                            "GTT",
                            100.0 * f64::from(u8::from(top4.iter().any(|t| t.1 as usize == ci))),
                        );
                    } else {
                        // Rank of c among all N (the query's own clean copy included), as a fraction.
                        let prank = |d: &[f32]| {
                            100.0
                                * d.iter()
                                    .enumerate()
                                    .filter(|&(j, &v)| v < d[ci] || (v == d[ci] && j < ci))
                                    .count() as f64
                                / n as f64
                        };
                        let (adv, init) = (prank(&d), prank(&ctx.host_dists(ctx.clean.row(qi))));
                        add(kind.name(), adv);
                        add("ARS", ars_rank_term(kind == AttackKind::QaPlus, init, adv));
                    }
                }
            }
            AttackKind::Tma => {
                let tidx: Vec<usize> = (0..b).map(|_| rng.random_range(0..n)).collect();
                let obj = targets::TowardCosine {
                    target: ctx.rows(&tidx),
                };
                let xa = attack(&ctx.model, 0, &x, None, &obj, pgd, aseed)?;
                let ea = embed_tensor(&ctx.model, xa);
                for (r, &t) in tidx.iter().enumerate() {
                    let e = &ea[r * ctx.clean.dim..(r + 1) * ctx.clean.dim];
                    let tv = ctx.clean.row(t);
                    let dot: f32 = e.iter().zip(tv).map(|(a, b)| a * b).sum();
                    let ne = e.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                    let nt = tv.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                    add("TMA", (dot / (ne * nt)) as f64);
                }
            }
            AttackKind::Stax | AttackKind::Mtax { .. } | AttackKind::Ux { .. } => {
                let (t, own) = match kind {
                    AttackKind::Mtax { targets } => (targets, false),
                    AttackKind::Ux { targets } => (targets, true),
                    _ => (1, false),
                };
                let mut targets = vec![];
                for _ in 0..t {
                    let idx: Vec<usize> = chunk
                        .iter()
                        .map(|&qi| {
                            for _ in 0..1000 {
                                let j = rng.random_range(0..n);
                                if j != qi && (labels[j] == labels[qi]) == own {
                                    return j;
                                }
                            }
                            qi
                        })
                        .collect();
                    targets.push(ctx.rows(&idx));
                }
                let xa = attack(&ctx.model, 0, &x, None, &targets::TowardTargets { targets }, pgd, aseed)?;
                let ea = embed_tensor(&ctx.model, xa);
                let adv = Embeddings::new(ea, b, ctx.clean.dim)?;
                let ql: Vec<u32> = chunk.iter().map(|&i| labels[i]).collect();
                let ks: &[usize] = &[1, 2, 4, 8];
                let m = metrics::retrieval_skipping(&adv, &ql, &ctx.clean, labels, Some(chunk), ks, &ctx.device)?;
                let scored = (m.queries - m.lone_queries) as f64;
                for (k, v) in &m.recall {
                    add(&format!("R@{k}"), 100.0 * v * scored);
                }
                let c = metrics::retrieval_skipping(
                    &Embeddings::new(ctx.rows_host(chunk), b, ctx.clean.dim)?,
                    &ql,
                    &ctx.clean,
                    labels,
                    Some(chunk),
                    &[1],
                    &ctx.device,
                )?;
                add(
                    "R@1:clean",
                    100.0 * c.recall_at(1).unwrap_or(0.0) * (c.queries - c.lone_queries) as f64,
                );
                attacked.extend(adv.data);
            }
            AttackKind::Es
            | AttackKind::Ltm
            | AttackKind::Gtm
            | AttackKind::Nn
            | AttackKind::NnCw { .. }
            | AttackKind::NnCwPgd { .. } => {
                let (obj, movable): (Box<dyn Objective>, Option<Vec<bool>>) = match kind {
                    AttackKind::Es => (Box::new(EmbeddingShift { clean: ctx.rows(chunk) }), None),
                    AttackKind::Ltm => {
                        let mut same = vec![false; b * n];
                        let mut diff = vec![false; b * n];
                        for (r, &qi) in chunk.iter().enumerate() {
                            for j in 0..n {
                                let s = labels[j] == labels[qi];
                                same[r * n + j] = s && (j != qi || ctx.robrank_compat);
                                diff[r * n + j] = !s;
                            }
                        }
                        let m = |v: Vec<bool>| Tensor::<2, Bool>::from_data(TensorData::new(v, [b, n]), &ctx.device);
                        (
                            Box::new(targets::LabelMislead {
                                candidates: ctx.cand.clone(),
                                cand_sq: ctx.cand_sq.clone(),
                                same: m(same),
                                diff: m(diff),
                            }),
                            None,
                        )
                    }
                    AttackKind::Gtm => {
                        let tidx: Vec<usize> = chunk
                            .iter()
                            .zip(&nbrs)
                            .map(|(&qi, nb)| {
                                let top1_label = labels[nb[0].1 as usize];
                                let d = ctx.host_dists(ctx.clean.row(qi));
                                let subset: Vec<usize> =
                                    (0..n).filter(|&j| j != qi && labels[j] != top1_label).collect();
                                let best = (0..subset.len())
                                    .min_by(|&a, &b| d[subset[a]].total_cmp(&d[subset[b]]))
                                    .unwrap_or(0);
                                // robrank's `_sel_gtm` uses the position in the subset as an index.
                                if ctx.robrank_compat {
                                    best.min(n - 1)
                                } else {
                                    subset.get(best).copied().unwrap_or(qi)
                                }
                            })
                            .collect();
                        (
                            Box::new(targets::TowardPoint {
                                target: ctx.rows(&tidx),
                            }),
                            None,
                        )
                    }
                    _ => {
                        // Algorithm 1: attack only correctly retrieved queries, away from their
                        // nearest (same-class) neighbour.
                        let ok: Vec<bool> = chunk
                            .iter()
                            .zip(&nbrs)
                            .map(|(&qi, nb)| labels[nb[0].1 as usize] == labels[qi])
                            .collect();
                        let tidx: Vec<usize> = nbrs.iter().map(|nb| nb[0].1 as usize).collect();
                        let obj: Box<dyn Objective> = match kind {
                            AttackKind::NnCw { kappa } | AttackKind::NnCwPgd { kappa } => {
                                let other: Vec<bool> = chunk
                                    .iter()
                                    .flat_map(|&qi| (0..n).map(move |j| labels[j] != labels[qi]))
                                    .collect();
                                Box::new(CwMargin {
                                    neighbour: ctx.rows(&tidx),
                                    candidates: ctx.cand.clone(),
                                    cand_sq: ctx.cand_sq.clone(),
                                    other: Tensor::<2, Bool>::from_data(TensorData::new(other, [b, n]), &ctx.device),
                                    kappa,
                                })
                            }
                            _ => Box::new(AwayFromNeighbour {
                                neighbour: ctx.rows(&tidx),
                            }),
                        };
                        (obj, Some(ok))
                    }
                };
                let xa = match kind {
                    AttackKind::NnCw { .. } => {
                        let cw = CwLinf {
                            eps: pgd.eps,
                            lr: pgd.step,
                            max_iterations: pgd.steps,
                            budget: CW_ROUNDS * pgd.steps,
                            ..CwLinf::default()
                        };
                        cw_linf(&ctx.model, 0, &x, movable.as_deref(), obj.as_ref(), &cw)?
                    }
                    _ => attack(&ctx.model, 0, &x, movable.as_deref(), obj.as_ref(), pgd, aseed)?,
                };
                let ea = embed_tensor(&ctx.model, xa);
                let adv = Embeddings::new(ea.clone(), b, ctx.clean.dim)?;
                let ql: Vec<u32> = chunk.iter().map(|&i| labels[i]).collect();
                let ks: &[usize] = &[1];
                let m = metrics::retrieval_skipping(&adv, &ql, &ctx.clean, labels, Some(chunk), ks, &ctx.device)?;
                let scored = (m.queries - m.lone_queries) as f64;
                let r1 = 100.0 * m.recall_at(1).unwrap_or(0.0) * scored / b as f64;
                let c = metrics::retrieval_skipping(
                    &Embeddings::new(ctx.rows_host(chunk), b, ctx.clean.dim)?,
                    &ql,
                    &ctx.clean,
                    labels,
                    Some(chunk),
                    ks,
                    &ctx.device,
                )?;
                add(
                    "R@1:clean",
                    100.0 * c.recall_at(1).unwrap_or(0.0) * (c.queries - c.lone_queries) as f64,
                );
                match kind {
                    AttackKind::Es => {
                        let shift: f64 = chunk
                            .iter()
                            .enumerate()
                            .map(|(r, &qi)| {
                                let e = &ea[r * ctx.clean.dim..(r + 1) * ctx.clean.dim];
                                euclid(ctx.clean.row(qi), e) as f64
                            })
                            .sum();
                        add("ES:D", shift);
                        add("ES:R", r1 * b as f64);
                    }
                    AttackKind::Nn | AttackKind::NnCw { .. } | AttackKind::NnCwPgd { .. } => {
                        add("R@1", r1 * b as f64);
                        add("MAP@R", 100.0 * m.map_at_r * scored);
                    }
                    _ => add(kind.name(), r1 * b as f64),
                }
            }
        }
    }
    let mut scores: Vec<Score> = sums
        .into_iter()
        .map(|(name, v)| Score {
            name,
            value: v / q.max(1) as f64,
        })
        .collect();
    if !attacked.is_empty() {
        let adv = Embeddings::new(attacked, q, ctx.clean.dim)?;
        let ql = &labels[..q];
        let k = {
            let mut l = ql.to_vec();
            l.sort_unstable();
            l.dedup();
            l.len()
        };
        let a = crate::eval::cluster::kmeans(&adv, k, 100, seed, &ctx.device)?;
        scores.push(Score {
            name: "NMI".into(),
            value: crate::eval::cluster::nmi(&a, ql),
        });
        // π_ratio needs two classes, one with two items, among the queries.
        if let Ok(p) = crate::eval::cluster::pi_ratio(&adv, ql, &ctx.device) {
            scores.push(Score {
                name: "pi_ratio".into(),
                value: p,
            });
        }
    }
    Ok(AttackResult {
        attack: kind,
        scores,
        queries: q,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// A uniformly random index in `0..n` other than `i` (W = 1 / M = 1 selections).
fn random_other(rng: &mut ChaCha8Rng, n: usize, i: usize) -> usize {
    loop {
        let j = rng.random_range(0..n);
        if j != i || n < 2 {
            return j;
        }
    }
}

/// A random item among the `topmost` nearest neighbours `nb` (the top 1 %), or `own` if none.
fn from_top(rng: &mut ChaCha8Rng, nb: &[(f32, u32)], topmost: usize, own: usize) -> usize {
    nb[..topmost.min(nb.len())]
        .choose(rng)
        .map(|x| x.1 as usize)
        .unwrap_or(own)
}

/// Runs the nine attacks of robrank's ERS suite.
pub fn robustness(
    ctx: &Context,
    pgd: &Pgd,
    queries: usize,
    batch: usize,
    seed: u64,
    progress: bool,
) -> Result<Robustness> {
    let mut results = vec![];
    for (i, k) in AttackKind::ERS_SUITE.iter().enumerate() {
        let r = run(ctx, *k, pgd, queries, batch, seed.wrapping_add(i as u64 * 1000))?;
        if progress {
            eprintln!(
                "{:<4} {}  ({:.1} s)",
                k.name(),
                r.scores
                    .iter()
                    .filter(|s| s.name != "ARS" && s.name != "R@1:clean")
                    .map(|s| format!("{} {:.3}", s.name, s.value))
                    .collect::<Vec<_>>()
                    .join("  "),
                r.seconds
            );
        }
        results.push(r);
    }
    Ok(aggregate(results))
}
