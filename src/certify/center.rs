//! Center smoothing of the query's embedding (Kumar and Goldstein, "Center Smoothing: Certified
//! Robustness for Networks with Structured Outputs", NeurIPS 2021), as their code does it
//! (aounon/center-smoothing, `center_smoothing.py`: `Smooth.compute_center_hd`, `Smooth.certify`),
//! then the 1-NN retrieval of the smoothed embedding certified by the gallery's geometry.
//!
//! - **The smoothed embedding** `z(x)`: the centre of the smallest ball holding half the mass of
//!   `f(x + δ)`, `δ ~ N(0, σ²I)`, approximated by the one of [`CANDIDATES`] noisy embeddings whose
//!   median distance to `select` further noisy embeddings is least (a β-approximation with
//!   β = 2: their `radius_coeff = 1 + β = 3`). With that median `r̂`, the share `p̂` of `select`
//!   other copies within `r̂` must satisfy `max(Δ₁, 1/2 − (p̂ − Δ₁)) ≤ Δ`,
//!   `Δ₁ = √(ln(2/α₁) / 2·select)`; else the query abstains.
//! - **Their Theorem 1**: with probability at least `1 − α₁ − α₂`, for every `‖ε‖₂ ≤ ε₁`,
//!   `‖z(x) − z(x + ε)‖ ≤ (1 + β)·R`, `R` the `q`-quantile of `‖f(x + δ) − z(x)‖` over `samples`
//!   copies, `q = Φ(Φ⁻¹(1/2 + Δ) + ε₁/σ) + √(ln(1/α₂) / 2·samples)`, the quantile the order
//!   statistic `X₍⌈n·q⌉₎` (their code's `np.quantile` interpolates below it). Here
//!   `α₁ = α₂ = α/2`.
//! - **Retrieval**: the smoothed answer is the ranked item `g_c` nearest `z(x)`. For an item `w` of
//!   another label, every point within `ρ` of `z` stays nearer `g_c` than `w` while the distance
//!   from `z` to their bisecting hyperplane, `(‖z − g_w‖² − ‖z − g_c‖²) / 2‖g_w − g_c‖`, exceeds
//!   `ρ`; its least over every such `w` is the margin `m`. The answer is certified at `ε₁` when
//!   `(1 + β)·R(ε₁) < m`, so the query's radius is the largest such `ε₁`:
//!   `σ·(Φ⁻¹(b/n − √(ln(1/α₂) / 2·samples)) − Φ⁻¹(1/2 + Δ))`, `b` the copies nearer the centre
//!   than `m/3`.
//!
//! Each copy is reduced to its distances to the candidates or to the centre as it is embedded;
//! the centre and the gallery are the only embeddings kept.

use super::bound::normal_quantile;
use super::{Noisy, QueryCertificate, Smoothing};
use crate::attack::context::Context;
use anyhow::Result;
use burn::tensor::Tensor;

/// Noisy embeddings that are candidate centres (their `n_cntr`).
pub const CANDIDATES: usize = 30;
/// Their β: a centre among the samples is within `(1 + β)` of the best ball's.
const BETA: f64 = 2.0;

/// One query's noisy copies, each stage taking the next ones of the query's stream.
struct Copies<'q, 'c> {
    ctx: &'c Context,
    noisy: &'q mut Noisy<'c>,
    items: &'q [usize],
    q: usize,
    next: usize,
    batch: usize,
}

impl Copies<'_, '_> {
    /// The embeddings of the next `k` copies, `[k, dim]` on the device.
    fn embed(&mut self, k: usize) -> Result<Tensor<2>> {
        let rows: Vec<(usize, usize)> = (self.next..self.next + k).map(|j| (self.q, j)).collect();
        self.next += k;
        self.noisy.embed(self.items, &rows)
    }

    /// Embeds `k` further copies in batches and hands each one's distance to each row of `to`
    /// (`[rows, dim]`, host) to `keep(row, distance)`. The distances are summed on the host in
    /// double precision: a certificate should not rest on the cancellation of `‖a‖² + ‖b‖² − 2a·b`
    /// in single precision, which is ~1e-4 at distances near zero.
    fn distances(&mut self, k: usize, to: &[f32], mut keep: impl FnMut(usize, f64)) -> Result<()> {
        let dim = self.ctx.ranked_clean().dim;
        let mut left = k;
        while left > 0 {
            let b = left.min(self.batch.max(1));
            left -= b;
            let emb = crate::host::read(&self.embed(b)?)?;
            for e in emb.chunks_exact(dim) {
                for (c, t) in to.chunks_exact(dim).enumerate() {
                    keep(c, euclidean(e, t));
                }
            }
            crate::progress::between_batches()?;
        }
        Ok(())
    }
}

/// `‖a − b‖₂`, summed in double precision.
fn euclidean(a: &[f32], b: &[f32]) -> f64 {
    squared(a, b).sqrt()
}

/// `‖a − b‖₂²`, summed in double precision.
fn squared(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum()
}

/// The centre-smoothing certificate of `items[q]`, `batch` copies embedded at once.
pub(super) fn certificate<'c>(
    ctx: &'c Context,
    noisy: &mut Noisy<'c>,
    (items, q): (&[usize], usize),
    s: &Smoothing,
    delta: f64,
    batch: usize,
) -> Result<QueryCertificate> {
    let item = items[q];
    let mut copies = Copies {
        ctx,
        noisy,
        items,
        q,
        next: 0,
        batch,
    };
    let dim = ctx.ranked_clean().dim;
    // The candidates, then each one's distances to `select` copies.
    let candidates = crate::host::read(&copies.embed(CANDIDATES)?)?;
    let mut dist: Vec<Vec<f64>> = (0..CANDIDATES).map(|_| Vec::with_capacity(s.select)).collect();
    copies.distances(s.select, &candidates, |c, d| dist[c].push(d))?;
    let (best, r_hat) = (0..CANDIDATES)
        .map(|c| (c, median(&mut dist[c])))
        .fold((0, f64::INFINITY), |b, (c, m)| if m < b.1 { (c, m) } else { b });
    let center = candidates[best * dim..(best + 1) * dim].to_vec();
    // Whether `r̂` holds about half the mass: another `select` copies.
    let mut inside = 0u64;
    copies.distances(s.select, &center, |_, d| inside += u64::from(d <= r_hat))?;
    let delta_1 = check_slack(s);
    let p_lower = inside as f64 / s.select as f64 - delta_1;
    let abstained = delta_1.max(0.5 - p_lower) > delta;
    // The certificate's `samples` distances to the centre.
    let mut to_center = Vec::with_capacity(s.samples);
    copies.distances(s.samples, &center, |_, d| to_center.push(d))?;
    to_center.sort_by(f64::total_cmp);
    let (answer, margin) = answer_and_margin(ctx, &center, ctx.own(item));
    let selected = ctx.ranked_labels()[answer];
    let radius = (!abstained)
        .then(|| largest_radius(&to_center, margin / (1.0 + BETA), s, delta))
        .flatten();
    let q0 = 0.5 + delta + quantile_slack(s);
    let least_bound = order_statistic(&to_center, q0).map(|r| (1.0 + BETA) * r);
    Ok(QueryCertificate {
        item,
        label: ctx.set.labels[item],
        selected,
        count: inside,
        p_lower,
        radius,
        majority: selected,
        abstained,
        margin: Some(margin),
        least_bound,
    })
}

/// The order statistic `X₍⌈n·q⌉₎` of `sorted` (ascending); `None` when `q` is past the last.
fn order_statistic(sorted: &[f64], q: f64) -> Option<f64> {
    let k = (sorted.len() as f64 * q).ceil().max(1.0) as usize;
    sorted.get(k - 1).copied()
}

/// NumPy's median: the mean of the two middle values of an even count.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::INFINITY;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The ranked item nearest `z` (`skip` left out; ties to the smaller index) and the distance from
/// `z` to the nearest bisecting hyperplane between it and an item of another label.
fn answer_and_margin(ctx: &Context, z: &[f32], skip: Option<usize>) -> (usize, f64) {
    let g = ctx.ranked_clean();
    let labels = ctx.ranked_labels();
    let d2: Vec<f64> = (0..g.n).map(|j| squared(z, g.row(j))).collect();
    let answer = (0..g.n)
        .filter(|&j| Some(j) != skip)
        .fold(None, |b: Option<usize>, j| match b {
            Some(k) if d2[k] <= d2[j] => b,
            _ => Some(j),
        })
        .unwrap_or(0);
    let gc = g.row(answer);
    let margin = (0..g.n)
        .filter(|&j| Some(j) != skip && labels[j] != labels[answer])
        .map(|j| (d2[j] - d2[answer]) / (2.0 * euclidean(g.row(j), gc)).max(f64::MIN_POSITIVE))
        .fold(f64::INFINITY, f64::min);
    (answer, margin)
}

/// The largest ε₁ whose quantile radius stays below `limit` (`sorted` the certificate's distances
/// to the centre, ascending); `None` when not even ε₁ = 0 does. The quantile is the order
/// statistic `X₍⌈n·q⌉₎`, which the slack's Hoeffding bound makes an upper bound of the true
/// `q`-quantile with probability `1 − α₂` (their code's `np.quantile` interpolates below it, by up
/// to one order statistic). With `b` distances below `limit`, `X₍⌈n·q⌉₎ < limit` iff `q ≤ b/n`,
/// so the bound stays strictly inside the margin at the radius itself.
fn largest_radius(sorted: &[f64], limit: f64, s: &Smoothing, delta: f64) -> Option<f64> {
    let below = sorted.iter().take_while(|&&d| d < limit).count();
    let q_star = below as f64 / sorted.len().max(1) as f64;
    let p = q_star - quantile_slack(s);
    (p > 0.5 + delta && p < 1.0).then(|| f64::from(s.sigma) * (normal_quantile(p) - normal_quantile(0.5 + delta)))
}

/// `√(ln(1/α₂) / 2n)`, `α₂ = α/2`: the quantile's Hoeffding slack.
pub(super) fn quantile_slack(s: &Smoothing) -> f64 {
    ((2.0 / s.alpha).ln() / (2.0 * s.samples as f64)).sqrt()
}

/// `√(ln(2/α₁) / 2·select)`, `α₁ = α/2`: the centre check's Hoeffding slack.
pub(super) fn check_slack(s: &Smoothing) -> f64 {
    ((4.0 / s.alpha).ln() / (2.0 * s.select as f64)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attack::units::pixels::{context, context_of};
    use crate::certify::{Method, certify};

    fn smoothing(sigma: f32, samples: usize) -> Smoothing {
        Smoothing {
            sigma,
            select: 10_000,
            samples,
            alpha: 0.001,
            method: Method::Center { delta: 0.05 },
        }
    }

    /// The margin is the distance to the nearest bisecting hyperplane between the answer and an
    /// item of another label: z = (0, 0), the answer (1, 0), another label at (0, 3) (its
    /// hyperplane (9 − 1) / 2√10 away) and at (−4, 0) (farther, (16 − 1) / 10).
    #[test]
    fn the_margin_is_the_nearest_bisecting_hyperplane() {
        let ctx = context_of(&[1.0, 0.0, 0.0, 3.0, -4.0, 0.0, 1.2, 0.0], 2, &[0, 1, 1, 0], false);
        let (answer, m) = answer_and_margin(&ctx, &[0.0, 0.0], None);
        assert_eq!(answer, 0);
        assert!((m - 8.0 / (2.0 * 10f64.sqrt())).abs() < 1e-6, "{m}");
        // The item itself left out: the next of its label answers.
        let (answer, _) = answer_and_margin(&ctx, &[0.0, 0.0], Some(0));
        assert_eq!(answer, 3);
    }

    /// The radius is where Theorem 1's bound, 3 × the quantile at q(ε), meets the margin: inside
    /// it at the radius, past it just beyond.
    #[test]
    fn the_radius_is_where_the_bound_meets_the_margin() {
        let s = smoothing(0.1, 1000);
        let sorted: Vec<f64> = (1..=1000).map(|i| f64::from(i) / 1000.0).collect();
        let limit = 0.9;
        let eps = largest_radius(&sorted, limit, &s, 0.05).unwrap();
        // Φ by bisection of Φ⁻¹.
        let cdf = |a: f64| {
            let (mut lo, mut hi) = (0.0f64, 1.0f64);
            for _ in 0..100 {
                let mid = (lo + hi) / 2.0;
                if normal_quantile(mid) < a { lo = mid } else { hi = mid }
            }
            lo
        };
        let q = |e: f64| cdf(normal_quantile(0.55) + e / 0.1) + ((2.0f64 / 0.001).ln() / 2000.0).sqrt();
        assert!(order_statistic(&sorted, q(eps * 0.999)).unwrap() < limit);
        assert!(order_statistic(&sorted, q(eps * 1.01)).unwrap() >= limit);
        assert!((q(eps) - 0.899).abs() < 1e-7, "{}", q(eps));
        // Not even ε = 0 when the quantile at q(0) is past the limit.
        assert_eq!(largest_radius(&sorted, 0.3, &s, 0.05), None);
    }

    /// (Kumar and Goldstein's 10,000 copies for the centre: with fewer, Δ₁ leaves the ball's
    /// share too little room above 1/2 − Δ.)
    ///
    /// One-pixel images embedded as themselves (class 0 at 0.10, 0.12, 0.14, class 1 at 0.60,
    /// 0.62, 0.64): the centre is near the query, each query's margin to the other class's
    /// nearest item is known, and the certified radius stays below the distance at which the
    /// base retrieval itself turns (0.26 for the first query), grows with the margin and
    /// vanishes with σ.
    #[test]
    fn centre_smoothing_certifies_below_the_true_radius() {
        let ctx = context(&[0.10, 0.12, 0.14, 0.60, 0.62, 0.64], &[0, 0, 0, 1, 1, 1], false);
        let c = certify(&ctx, 6, &smoothing(0.03, 2000), 256, 0, false).unwrap();
        let truth = [0.26, 0.25, 0.23, 0.23, 0.25, 0.26];
        for (q, t) in c.rows.iter().zip(truth) {
            assert!(!q.abstained, "{q:?}");
            assert_eq!(q.selected, q.label);
            let r = q.radius.expect("a margin of 7σ is certified");
            assert!(r > 0.02 && r < t, "query {}: {r}", q.item);
        }
        // The ends' margin is 0.26 (the bisector of 0.12 and 0.60 is 0.36), the distances to the
        // centre about |N(0, σ²)|: 3σ·Φ⁻¹((1 + q)/2) = 0.26 at q = 0.99613, less the slack
        // √(ln 2000 / 4000) = 0.04359, gives σ·(Φ⁻¹(0.95254) − Φ⁻¹(0.55)) = 0.0463.
        for q in [&c.rows[0], &c.rows[5]] {
            let r = q.radius.unwrap();
            assert!((r - 0.0463).abs() < 0.0015, "query {}: {r}", q.item);
        }
        assert!(c.rows[0].radius > c.rows[2].radius);
        // The margin and the least bound the radius came from: the bound below the margin.
        for q in &c.rows {
            let (m, b) = (q.margin.unwrap(), q.least_bound.unwrap());
            assert!(b < m && b > 0.0, "query {}: bound {b}, margin {m}", q.item);
        }
        assert!((c.rows[0].margin.unwrap() - 0.26).abs() < 0.02, "{:?}", c.rows[0]);
        let tiny = certify(&ctx, 6, &smoothing(1e-4, 2000), 256, 0, false).unwrap();
        assert!(tiny.rows.iter().all(|q| q.radius.is_some_and(|r| r < 1e-3)));
        // Batch size does not change a certificate.
        let other = certify(&ctx, 6, &smoothing(0.03, 2000), 7, 0, false).unwrap();
        assert_eq!(other.rows, c.rows);
    }

    /// Settings under which every query would abstain, or none be certified, are refused.
    #[test]
    fn settings_that_cannot_certify_are_refused() {
        use crate::certify::options::{CertifyOptions, MethodName};
        let center = |select, samples| CertifyOptions {
            method: MethodName::Center,
            select,
            samples,
            ..CertifyOptions::default()
        };
        let e = center(Some(100), 10_000).smoothing().unwrap_err().to_string();
        assert!(
            e.contains("⟨select⟩ 100 is too few") && e.contains("give at least 1659"),
            "{e}"
        );
        let e = center(None, 10).smoothing().unwrap_err().to_string();
        assert!(e.contains("⟨samples⟩ 10 is too few"), "{e}");
        assert!(center(None, 10_000).smoothing().is_ok());
    }

    #[test]
    fn the_median_is_numpys() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0, 10.0]), 2.5);
    }
}
