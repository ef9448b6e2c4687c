//! The white-box suites: each attack = query/candidate selection + objective + score, exactly as
//! `../shared/reference` §A2 describes robrank's ERS columns, plus the nearest-neighbour attack of
//! the positive-perturbation paper (its Algorithm 1).

use super::cw::{CwLinf, cw_linf};
use super::engine::{Objective, Pgd, attack};
use super::objective::nn::{AwayFromNeighbour, CwMargin};
use super::objective::rank::{CandidateAttack, Direction, QueryAttack};
use super::objective::{dist_to_all, shift::EmbeddingShift, targets};
use crate::data::ImageSet;
use crate::data::loader;
use crate::eval::knn::{Embeddings, top_k};
use crate::eval::{batch_tensor, embed, metrics};
use crate::loss::to_host;
use crate::model::EmbeddingNet;
use anyhow::{Context as _, Result, bail};
use burn::module::Module;
use burn::tensor::{Bool, Device, Tensor, TensorData};
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// C&W's budget in rounds: a row may use `CW_ROUNDS × steps` optimiser steps in all.
pub const CW_ROUNDS: usize = 10;

/// The attacks rdml runs by name.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum AttackKind {
    #[serde(rename = "CA+")]
    CaPlus,
    #[serde(rename = "CA-")]
    CaMinus,
    #[serde(rename = "QA+")]
    QaPlus,
    #[serde(rename = "QA-")]
    QaMinus,
    #[serde(rename = "TMA")]
    Tma,
    #[serde(rename = "ES")]
    Es,
    #[serde(rename = "LTM")]
    Ltm,
    #[serde(rename = "GTM")]
    Gtm,
    #[serde(rename = "GTT")]
    Gtt,
    /// Nearest-neighbour attack (positive-perturbation paper, Algorithm 1).
    #[serde(rename = "NN")]
    Nn,
    /// The same attack by Carlini and Wagner's L∞ algorithm ([`super::cw`]) on their margin loss
    /// (confidence κ), as the positive-perturbation paper's Tables 4 and 7.
    #[serde(rename = "NN-CW")]
    NnCw { kappa: f32 },
    /// Carlini–Wagner's margin loss (confidence κ) minimised by the PGD engine ("CW∞" of Madry et al.).
    #[serde(rename = "NN-CW-PGD")]
    NnCwPgd { kappa: f32 },
    /// MDProp's single-targeted feature-space AX (one random target of another class).
    #[serde(rename = "STAX")]
    Stax,
    /// MDProp's multi-targeted feature-space AX (`targets` random targets of other classes).
    #[serde(rename = "MTAX")]
    Mtax { targets: usize },
    /// MDProp's unadversarial example (targets of the item's own class).
    #[serde(rename = "UX")]
    Ux { targets: usize },
}

impl AttackKind {
    pub const ERS_SUITE: [AttackKind; 9] = [
        AttackKind::CaPlus,
        AttackKind::CaMinus,
        AttackKind::QaPlus,
        AttackKind::QaMinus,
        AttackKind::Tma,
        AttackKind::Es,
        AttackKind::Ltm,
        AttackKind::Gtm,
        AttackKind::Gtt,
    ];
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "CA+" => Self::CaPlus,
            "CA-" => Self::CaMinus,
            "QA+" => Self::QaPlus,
            "QA-" => Self::QaMinus,
            "TMA" => Self::Tma,
            "ES" => Self::Es,
            "LTM" => Self::Ltm,
            "GTM" => Self::Gtm,
            "GTT" => Self::Gtt,
            "NN" => Self::Nn,
            o if o.starts_with("NN-CW") => {
                let (head, kappa) = match o.split_once(':') {
                    Some((h, k)) => (h, Some(k)),
                    None => (o, None),
                };
                let kappa = match kappa {
                    Some(k) => k
                        .parse::<f32>()
                        .ok()
                        .filter(|k| k.is_finite() && *k >= 0.0)
                        .with_context(|| format!("attack '{o}': κ after ':' must be a number ≥ 0"))?,
                    None => 0.0,
                };
                match head {
                    "NN-CW" => Self::NnCw { kappa },
                    "NN-CW-PGD" => Self::NnCwPgd { kappa },
                    _ => bail!("unknown attack '{o}': expected NN-CW[:κ] or NN-CW-PGD[:κ]"),
                }
            }
            "STAX" => Self::Stax,
            o if o.starts_with("MTAX") || o.starts_with("UX") => {
                let (head, t) = o.split_once(':').unwrap_or((o, "5"));
                let targets: usize = t
                    .parse()
                    .ok()
                    .filter(|&t| t >= 1)
                    .with_context(|| format!("attack '{o}': the number of targets after ':' must be ≥ 1"))?;
                if head == "MTAX" {
                    Self::Mtax { targets }
                } else {
                    Self::Ux { targets }
                }
            }
            o => bail!(
                "unknown attack '{o}': expected CA+, CA-, QA+, QA-, TMA, ES, LTM, GTM, GTT, NN, NN-CW[:κ], NN-CW-PGD[:κ], STAX, MTAX[:T] or UX[:T]"
            ),
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::CaPlus => "CA+",
            Self::CaMinus => "CA-",
            Self::QaPlus => "QA+",
            Self::QaMinus => "QA-",
            Self::Tma => "TMA",
            Self::Es => "ES",
            Self::Ltm => "LTM",
            Self::Gtm => "GTM",
            Self::Gtt => "GTT",
            Self::Nn => "NN",
            Self::NnCw { .. } => "NN-CW",
            Self::NnCwPgd { .. } => "NN-CW-PGD",
            Self::Stax => "STAX",
            Self::Mtax { .. } => "MTAX",
            Self::Ux { .. } => "UX",
        }
    }
}

/// One attack's outcome: named scores (percentages, except TMA's cosine and ES:D's distance),
/// each with its clean value (the same selection at ε = 0).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AttackResult {
    pub attack: AttackKind,
    pub scores: Vec<Score>,
    pub queries: usize,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Score {
    pub name: String,
    pub value: f64,
}

/// The test set, its clean embeddings and the model: what every attack needs.
pub struct Context {
    pub model: EmbeddingNet,
    pub set: ImageSet,
    pub clean: Embeddings,
    cand: Tensor<2>,
    cand_sq: Tensor<2>,
    pub device: Device,
    /// Reproduce robrank's GTM target index and LTM self mask.
    pub robrank_compat: bool,
}

impl Context {
    pub fn new(model: &EmbeddingNet, set: &ImageSet, device: &Device, robrank_compat: bool) -> Result<Self> {
        let device = device.clone().without_autodiff();
        let model = model.valid();
        let clean = embed(&model, set, 256, &device)?;
        let cand = Tensor::<2>::from_data(TensorData::new(clean.data.clone(), [clean.n, clean.dim]), &device);
        let cand_sq = cand.clone().powi_scalar(2).sum_dim(1).transpose();
        Ok(Self {
            model,
            set: set.clone(),
            clean,
            cand,
            cand_sq,
            device,
            robrank_compat,
        })
    }

    fn rows_host(&self, idx: &[usize]) -> Vec<f32> {
        idx.iter().flat_map(|&i| self.clean.row(i).iter().copied()).collect()
    }

    fn rows(&self, idx: &[usize]) -> Tensor<2> {
        Tensor::<2>::from_data(
            TensorData::new(self.rows_host(idx), [idx.len(), self.clean.dim]),
            &self.device,
        )
    }

    /// Squared-free Euclidean distances of host row `e` to all candidates.
    fn host_dists(&self, e: &[f32]) -> Vec<f32> {
        (0..self.clean.n).map(|j| euclid(self.clean.row(j), e)).collect()
    }
}

fn embed_tensor(model: &EmbeddingNet, x: Tensor<4>) -> Vec<f32> {
    to_host(&model.forward(x))
}

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

/// Euclidean distance of two host embeddings.
fn euclid(a: &[f32], b: &[f32]) -> f32 {
    crate::loss::distance::Distance::Euclidean.host(a, b)
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

/// One ranking trial's ARS term (CA-TRIDE, Section 3.4 / Appendix B): `100·(1 − (r − r₀)/(g − r₀))`
/// with goal `g` = 0 for the "+" attacks and 100 for the "−" attacks (ranks in percent).
pub fn ars_rank_term(raise: bool, init: f64, adv: f64) -> f64 {
    let goal = if raise { 0.0 } else { 100.0 };
    if (goal - init).abs() < 1e-12 {
        return 0.0;
    }
    100.0 * (1.0 - (adv - init) / (goal - init))
}

impl AttackResult {
    pub fn score(&self, name: &str) -> Option<f64> {
        self.scores.iter().find(|s| s.name == name).map(|s| s.value)
    }
}

/// One row of the robustness table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    pub column: String,
    pub raw: f64,
    pub ers_term: f64,
    pub ars_term: Option<f64>,
}

/// The ERS/ARS table of a suite run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Robustness {
    pub rows: Vec<Row>,
    pub ers: f64,
    pub ars: f64,
    pub results: Vec<AttackResult>,
}

/// ERS term of a raw column (robrank's `pjswipe.py`): CA+ and QA+ doubled, CA−, QA−, TMA and ES:D
/// inverted, ES:D over the maximal chord 2 of the unit sphere.
pub fn ers_term(column: &str, raw: f64) -> Option<f64> {
    Some(match column {
        "CA+" | "QA+" => 2.0 * raw,
        "CA-" | "QA-" => 100.0 - raw,
        "TMA" => 100.0 * (1.0 - raw),
        "ES:D" => 100.0 * (2.0 - raw) / 2.0,
        "ES:R" | "LTM" | "GTM" | "GTT" => raw,
        _ => return None,
    })
}

/// ERS from the ten raw columns in robrank's order.
pub fn ers(raw: &[(&str, f64)]) -> f64 {
    let t: Vec<f64> = raw.iter().filter_map(|(c, v)| ers_term(c, *v)).collect();
    t.iter().sum::<f64>() / t.len().max(1) as f64
}

/// Aggregates the nine ERS attacks into the table: ten ERS columns and eight ARS terms
/// (TMA and ES:D have none; recall attacks are attacked/clean Recall@1).
pub fn aggregate(results: Vec<AttackResult>) -> Robustness {
    let mut rows = vec![];
    for r in &results {
        let clean = r.score("R@1:clean");
        let names: Vec<&str> = match r.attack {
            AttackKind::Es => vec!["ES:D", "ES:R"],
            k => vec![k.name()],
        };
        for col in names {
            let Some(raw) = r.score(col) else { continue };
            let Some(ers_term) = ers_term(col, raw) else { continue };
            let ars_term = match col {
                "CA+" | "CA-" | "QA+" | "QA-" => r.score("ARS"),
                "ES:R" | "LTM" | "GTM" => clean.map(|c| if c > 0.0 { 100.0 * raw / c } else { 0.0 }),
                "GTT" => Some(raw),
                _ => None,
            };
            rows.push(Row {
                column: col.to_string(),
                raw,
                ers_term,
                ars_term,
            });
        }
    }
    let ers = rows.iter().map(|r| r.ers_term).sum::<f64>() / rows.len().max(1) as f64;
    let ars_terms: Vec<f64> = rows.iter().filter_map(|r| r.ars_term).collect();
    let ars = ars_terms.iter().sum::<f64>() / ars_terms.len().max(1) as f64;
    Robustness {
        rows,
        ers,
        ars,
        results,
    }
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
