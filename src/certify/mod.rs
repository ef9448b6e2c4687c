//! Certified Recall@1 by randomized smoothing of the query: a radius inside which no ℓ2
//! perturbation of the query can change the label of its top-1, whatever the attack.
//!
//! The base classifier of a query image `x` is `h(x)`, the label of the gallery item nearest to
//! `f(x)` (the gallery clean and fixed, the query's own copy left out, as the query attacks rank).
//! Its Gaussian smoothing `g(x) = argmax_c P(h(x + δ) = c)`, `δ ~ N(0, σ²I)`, is a smoothed
//! classifier in the sense of Cohen, Rosenfeld and Kolter (ICML 2019): by their Theorem 1, if
//! the top label `c_A` has probability at least `p_A > 1/2`, then `g(x + ε) = c_A` for every
//! `‖ε‖₂ < R = σ·Φ⁻¹(p_A)` (their Eq. 3 with `p_B = 1 − p_A`). Their CERTIFY picks `ĉ_A` from
//! `n₀` noisy copies and bounds `p_A` below from `n` other copies by Clopper–Pearson at level
//! `1 − α` ([`bound::clopper_pearson_lower`]); when the bound is at most 1/2 it abstains. A query
//! is certified at radius `r` when `ĉ_A` is its own label and `R ≥ r`; with probability at least
//! `1 − α` per query a certificate that says so is true. [`center`] certifies another smoothed
//! retrieval: the 1-NN of the query's centre-smoothed embedding (Kumar and Goldstein, NeurIPS
//! 2021). RetrievalGuard (Wu, Zhang and Huang, ICML 2022) certifies a smoothed 1-NN retrieval
//! with a bound of its own, which is not offered here: its paper's theorem could not be read here
//! and it has no public code.
//!
//! Noise is drawn per query from its own stream (ChaCha8, stream = the item's index), so a
//! certificate does not depend on the batch size. Each noisy copy is reduced to its top-1's label
//! as soon as it is embedded: no `n × D` matrix is kept.

pub mod bound;
pub mod center;
pub mod options;
pub mod record;
mod soundness;

use crate::attack::context::Context;
use crate::attack::objective::dist_to_all;
use anyhow::Result;
use burn::tensor::{Tensor, TensorData};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How a query is smoothed and how sure its certificate is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Smoothing {
    /// σ of the Gaussian noise added to the query, in pixels of [0, 1] images.
    pub sigma: f32,
    /// Noisy copies that pick the label (Cohen's `n₀`).
    pub select: usize,
    /// Noisy copies that bound its probability (Cohen's `n`), separate from those.
    pub samples: usize,
    /// The chance that a query's certificate is wrong, at most.
    pub alpha: f64,
    pub method: Method,
}

/// Which smoothed retrieval is certified.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Method {
    /// The top-1 label of the noisy query (Cohen, Rosenfeld and Kolter).
    Cohen,
    /// The 1-NN of the query's centre-smoothed embedding ([`center`]), `delta` its Δ.
    Center { delta: f64 },
}

/// One query's certificate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "record::StoredCertificate")]
pub struct QueryCertificate {
    /// The query's place in the test split (or in the caller's images).
    pub item: usize,
    pub label: u32,
    /// The label the selection copies picked (`ĉ_A`).
    pub selected: u32,
    /// Of the `samples` copies, how many had `selected` as their top-1's label.
    pub count: u64,
    /// The lower confidence bound on its probability.
    pub p_lower: f64,
    /// `σ·Φ⁻¹(p_lower)` when `p_lower > 1/2`; `None`: the query abstains.
    pub radius: Option<f64>,
    /// The label most often top-1 among the `samples` copies: the smoothed model's answer
    /// without a certificate (ties to the smaller label). Centre smoothing: the label of the
    /// centre's nearest item.
    pub majority: u32,
    /// The query abstains: Cohen's bound at most 1/2, or a centre that does not hold half the
    /// mass (centre smoothing; its `count` and `p_lower` are the centre's ball's).
    pub abstained: bool,
    /// Centre smoothing: the distance from the centre to the nearest bisecting hyperplane between
    /// its answer and an item of another label (`None` read back where the gallery has none: JSON
    /// writes an infinite margin as null). A radius needs the bound below it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub margin: Option<f64>,
    /// Centre smoothing: the bound at ε = 0, `3·X₍⌈n·q₀⌉₎` with `q₀ = 1/2 + Δ` plus the slack, the
    /// least that Theorem 1 can bound the centre's move by (`None`: `q₀` is past the samples).
    /// At or above `margin`, no radius is certified.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub least_bound: Option<f64>,
}

impl QueryCertificate {
    /// Whether the query's top-1 is certified correct within ℓ2 radius `r`.
    pub fn certified_at(&self, r: f64) -> bool {
        self.selected == self.label && self.radius.is_some_and(|radius| radius >= r)
    }
}

/// The certificates of the first `queries` items of `ctx`'s query set that have another item of
/// their class among the ranked images (a lone query has no correct top-1, as `eval` leaves it
/// out), and how many were left out so.
pub struct Certification {
    pub rows: Vec<QueryCertificate>,
    pub lone: usize,
    pub queries: usize,
}

/// Label counts of one query's noisy copies: `[selection, certificate]`.
type Counts = [BTreeMap<u32, u64>; 2];

/// Certifies the first `queries` query items of `ctx`, `batch` noisy copies embedded at once.
pub fn certify(
    ctx: &Context,
    queries: usize,
    s: &Smoothing,
    batch: usize,
    seed: u64,
    progress: bool,
) -> Result<Certification> {
    let used = queries.min(ctx.n());
    let items: Vec<usize> = (0..used).filter(|&i| has_other_of_class(ctx, i)).collect();
    if items.is_empty() && used > 0 {
        // A certified Recall@1 of queries that have no match would be 0 by construction.
        return Err(crate::eval::no_query_to_score("queries", ctx.gallery.is_some()));
    }
    let rows = match s.method {
        Method::Cohen => cohen(ctx, &items, s, batch, seed, progress)?,
        Method::Center { delta } => {
            // On ranks, each certifies its share of the queries.
            let own = ctx.ranks.share(items.len());
            let mut noisy = Noisy::new(ctx, seed, s.sigma);
            let mut bar = crate::progress::Progress::new("certify", own.len(), progress);
            let mut rows = Vec::with_capacity(own.len());
            for q in own {
                rows.push(center::certificate(ctx, &mut noisy, (&items, q), s, delta, batch)?);
                bar.set(rows.len(), "queries");
            }
            bar.finish();
            match ctx.ranks.split() {
                true => ctx.ranks.gather(&rows)?.into_iter().flatten().collect(),
                false => rows,
            }
        }
    };
    Ok(Certification {
        rows,
        lone: used - items.len(),
        queries: used,
    })
}

/// Cohen's CERTIFY of `items`, copies of several queries embedded together.
fn cohen(
    ctx: &Context,
    items: &[usize],
    s: &Smoothing,
    batch: usize,
    seed: u64,
    progress: bool,
) -> Result<Vec<QueryCertificate>> {
    let per = s.select + s.samples;
    let total = items.len() * per;
    let mut counts: Vec<Counts> = vec![Default::default(); items.len()];
    let mut noisy = Noisy::new(ctx, seed, s.sigma);
    let batches = total.div_ceil(batch.max(1));
    // On ranks, each embeds its share of the single process's batches of copies (a query's
    // copies may fall to two ranks: its counts are summed).
    let own = ctx.ranks.share(batches);
    let mut bar = crate::progress::Progress::new("certify", own.len(), progress);
    for bi in own.clone() {
        let start = bi * batch.max(1);
        let rows: Vec<(usize, usize)> = (start..total.min(start + batch)).map(|k| (k / per, k % per)).collect();
        let emb = noisy.embed(items, &rows)?;
        let d = crate::host::read(&dist_to_all(emb, &ctx.cand, &ctx.cand_sq))?;
        let g = ctx.ranked_n();
        for (r, &(q, j)) in rows.iter().enumerate() {
            let top = nearest(&d[r * g..(r + 1) * g], ctx.own(items[q]));
            let stage = usize::from(j >= s.select);
            *counts[q][stage].entry(ctx.ranked_labels()[top]).or_default() += 1;
        }
        bar.set(bi + 1 - own.start, "batches");
        crate::progress::between_batches()?;
    }
    bar.finish();
    if ctx.ranks.split() {
        let all = ctx.ranks.gather(&counts)?;
        counts = all.into_iter().reduce(summed).unwrap_or(counts);
    }
    Ok(items
        .iter()
        .zip(&counts)
        .map(|(&item, c)| certificate(item, ctx.set.labels[item], c, s))
        .collect())
}

/// Two ranks' label counts of the same queries, summed.
fn summed(mut all: Vec<Counts>, theirs: Vec<Counts>) -> Vec<Counts> {
    for (a, t) in all.iter_mut().flatten().zip(theirs.iter().flatten()) {
        for (&l, &n) in t {
            *a.entry(l).or_default() += n;
        }
    }
    all
}

/// CERTIFY's decision from one query's label counts.
fn certificate(item: usize, label: u32, counts: &Counts, s: &Smoothing) -> QueryCertificate {
    let top = |c: &BTreeMap<u32, u64>| {
        c.iter()
            .fold(None, |best: Option<(u32, u64)>, (&l, &n)| match best {
                Some((_, bn)) if bn >= n => best,
                _ => Some((l, n)),
            })
            .map_or(u32::MAX, |(l, _)| l)
    };
    let selected = top(&counts[0]);
    let count = counts[1].get(&selected).copied().unwrap_or(0);
    let p_lower = bound::clopper_pearson_lower(count, s.samples as u64, s.alpha);
    QueryCertificate {
        abstained: p_lower <= 0.5,
        item,
        label,
        selected,
        count,
        p_lower,
        radius: (p_lower > 0.5).then(|| f64::from(s.sigma) * bound::normal_quantile(p_lower)),
        majority: top(&counts[1]),
        margin: None,
        least_bound: None,
    }
}

/// The nearest ranked image by (distance, index), `skip` left out.
fn nearest(d: &[f32], skip: Option<usize>) -> usize {
    crate::eval::order::top_k(d, 1, skip)
        .first()
        .map_or(0, |t| t.1 as usize)
}

fn has_other_of_class(ctx: &Context, i: usize) -> bool {
    let label = ctx.set.labels[i];
    let own = ctx.own(i);
    ctx.ranked_labels()
        .iter()
        .enumerate()
        .any(|(j, &l)| l == label && Some(j) != own)
}

/// Noisy copies of the queries' images, each query's noise from its own stream.
pub(crate) struct Noisy<'c> {
    ctx: &'c Context,
    seed: u64,
    sigma: f32,
    /// The query whose copies are being drawn, its pixels, its stream and the copies drawn.
    current: Option<(usize, Vec<f32>, ChaCha8Rng, usize)>,
    /// The streams (query items) whose pixels the model side holds, where it draws the noise.
    sent: std::collections::BTreeSet<u64>,
}

impl<'c> Noisy<'c> {
    fn new(ctx: &'c Context, seed: u64, sigma: f32) -> Self {
        Self {
            ctx,
            seed,
            sigma,
            current: None,
            sent: Default::default(),
        }
    }

    /// The embeddings of `rows`' noisy copies: drawn where the model lives when it draws its
    /// own (a model outside rdml: its pixels cross once a query, then only embeddings), else here
    /// from each query's stream.
    fn embed(&mut self, items: &[usize], rows: &[(usize, usize)]) -> Result<Tensor<2>> {
        if !self.ctx.model.draws_noise() {
            return self.ctx.model.embed(self.images(items, rows)?);
        }
        let streams: Vec<(u64, u64)> = rows.iter().map(|&(q, j)| (items[q] as u64, j as u64)).collect();
        let wanted: std::collections::BTreeSet<u64> = streams.iter().map(|r| r.0).collect();
        let mut new = vec![];
        for &s in wanted.difference(&self.sent) {
            let pixels = crate::data::loader::load_batch(&self.ctx.set, &[s as usize], None)?.images;
            new.push((s, pixels));
        }
        let drop: Vec<u64> = self.sent.difference(&wanted).copied().collect();
        self.sent = wanted;
        self.ctx.model.embed_noisy(&crate::attack::oracle::NoisyBatch {
            new: &new,
            drop: &drop,
            rows: &streams,
            shape: self.ctx.set.item_shape(),
            sigma: self.sigma,
            seed: self.seed,
        })
    }

    /// The images of `rows` (each a query's place in `items` and a copy's number), in order.
    fn images(&mut self, items: &[usize], rows: &[(usize, usize)]) -> Result<Tensor<4>> {
        let [c, h, w] = self.ctx.set.item_shape();
        let per = c * h * w;
        let mut data = Vec::with_capacity(rows.len() * per);
        for &(q, j) in rows {
            let (_, pixels, rng, drawn) = match &mut self.current {
                Some(cur) if cur.0 == q && cur.3 <= j => cur,
                slot => {
                    let item = items[q];
                    let pixels = crate::data::loader::load_batch(&self.ctx.set, &[item], None)?.images;
                    let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
                    rng.set_stream(item as u64);
                    slot.insert((q, pixels, rng, 0))
                }
            };
            // Copy `j` is the stream's `j`-th: a rank whose share starts inside a query's copies
            // draws the earlier ones first.
            for _ in *drawn..j {
                for _ in 0..pixels.len() {
                    let _: f32 = StandardNormal.sample(rng);
                }
            }
            *drawn = j + 1;
            data.extend(pixels.iter().map(|&p| {
                let z: f32 = StandardNormal.sample(rng);
                p + self.sigma * z
            }));
        }
        Ok(Tensor::<4>::from_data(
            TensorData::new(data, [rows.len(), c, h, w]),
            &self.ctx.device,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attack::units::pixels::context;

    /// One-pixel images embedded as themselves: class 0 at 0.10, 0.12, 0.14, class 1 at 0.60,
    /// 0.62, 0.64. A query's base classifier (its own copy left out) is a threshold midway
    /// between the nearest items of the two classes, and so is its smoothing (symmetric noise in
    /// one dimension: `P(x + δ < b) > 1/2` iff `x < b`): the true radius of every query is known,
    /// 0.37 − 0.10 for the first, 0.36 − 0.14 for the third (its neighbour 0.12 then bounds it).
    fn line() -> (Context, Vec<f64>) {
        let points = [0.10f32, 0.12, 0.14, 0.60, 0.62, 0.64];
        let ctx = context(&points, &[0, 0, 0, 1, 1, 1], false);
        // Each query's distance to the boundary of the classifier its copies meet.
        let truth = vec![0.27, 0.25, 0.22, 0.22, 0.25, 0.27];
        (ctx, truth)
    }

    fn smoothing(sigma: f32) -> Smoothing {
        Smoothing {
            sigma,
            select: 50,
            samples: 2000,
            alpha: 0.001,
            method: Method::Cohen,
        }
    }

    /// Certified on two and three ranks (each its share of the batches of copies, a query's
    /// copies falling to two ranks; or of the queries, for centre smoothing), every rank holds
    /// the single process's certificates, to the last bit.
    #[test]
    fn certificates_split_over_ranks_are_the_single_process_ones() {
        use crate::ranks::{Ranks, tests::on_ranks};
        let points = [0.10f32, 0.12, 0.14, 0.60, 0.62, 0.64, 0.3];
        let labels = [0, 0, 0, 1, 1, 1, 2];
        let on = |ranks: &Ranks, method: Method| {
            let ctx = crate::attack::units::pixels::context_on(&points, 1, &labels, false, ranks);
            // Noise enough to flip many copies' top-1: a copy drawn from another place of its
            // stream would change the counts.
            let s = Smoothing {
                sigma: 0.4,
                select: 7,
                samples: 40,
                alpha: 0.001,
                method,
            };
            certify(&ctx, 7, &s, 16, 3, false).unwrap()
        };
        for method in [Method::Cohen, Method::Center { delta: 0.05 }] {
            let one = on(&Ranks::alone(), method);
            assert_eq!((one.rows.len(), one.lone), (6, 1));
            for k in [2, 3] {
                for got in on_ranks(k, |r| on(&r, method)) {
                    assert_eq!(got.rows, one.rows, "{method:?} on {k} ranks");
                    assert_eq!((got.lone, got.queries), (one.lone, one.queries));
                }
            }
        }
    }

    #[test]
    fn the_certified_radius_is_below_the_true_one_and_close_to_it() {
        let (ctx, truth) = line();
        let c = certify(&ctx, 6, &smoothing(0.12), 64, 0, false).unwrap();
        assert_eq!((c.rows.len(), c.lone, c.queries), (6, 0, 6));
        for (q, t) in c.rows.iter().zip(&truth) {
            let r = q.radius.expect("a 2σ margin is certified");
            assert_eq!(q.selected, q.label);
            assert!(r <= *t, "query {}: certified {r} beyond the true radius {t}", q.item);
            assert!(r >= 0.75 * t, "query {}: certified {r}, true radius {t}", q.item);
        }
    }

    #[test]
    fn the_radius_vanishes_with_sigma_grows_with_the_margin_and_ignores_the_batch() {
        let (ctx, _) = line();
        let tiny = certify(&ctx, 6, &smoothing(1e-4), 64, 0, false).unwrap();
        assert!(tiny.rows.iter().all(|q| q.radius.is_some_and(|r| r < 1e-3)));
        let c = certify(&ctx, 6, &smoothing(0.12), 64, 0, false).unwrap();
        let radius = |i: usize| c.rows[i].radius.unwrap();
        assert!(
            radius(0) > radius(1) && radius(1) > radius(2),
            "nearer the boundary, smaller"
        );
        let other_batch = certify(&ctx, 6, &smoothing(0.12), 7, 0, false).unwrap();
        assert_eq!(other_batch.rows, c.rows);
        // Noise far wider than the classes' gap: the label is a coin toss (each side of the
        // threshold with probability 0.50 ± 0.003), and the query abstains.
        let wide = certify(&ctx, 6, &smoothing(50.0), 64, 0, false).unwrap();
        assert!(wide.rows.iter().all(|q| q.radius.is_none()));
    }

    #[test]
    fn a_certificate_follows_cohens_decision() {
        let s = smoothing(0.5);
        let mut counts: Counts = Default::default();
        counts[0].insert(3, 40);
        counts[0].insert(1, 10);
        counts[1].insert(3, 1900);
        counts[1].insert(1, 100);
        let q = certificate(7, 3, &counts, &s);
        let p = bound::clopper_pearson_lower(1900, 2000, 0.001);
        assert_eq!((q.selected, q.count, q.majority, q.p_lower), (3, 1900, 3, p));
        assert!((q.radius.unwrap() - 0.5 * bound::normal_quantile(p)).abs() < 1e-12);
        assert!(q.certified_at(0.0) && !q.certified_at(q.radius.unwrap() + 1e-9));
        // Picked by the selection copies, but too rare among the others: abstain.
        counts[1].insert(3, 1000);
        counts[1].insert(1, 1000);
        let q = certificate(7, 3, &counts, &s);
        assert!(q.radius.is_none() && !q.certified_at(0.0) && q.majority == 1);
    }
}
