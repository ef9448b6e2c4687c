//! The DRO framework for pairwise DML (Qi et al., seed 002): every ordered pair (i, j), i ≠ j, of a
//! mini-batch is a binary classification example with loss `l_ij`, and the batch loss is
//! `F(θ) = max_{p∈U} Σ p_ij l_ij` (its Eq. 1). The maximising `p*` is found on detached similarities
//! and the gradient taken at `p*` (its Lemma 1), so every variant is a weight matrix `W = p*` on the
//! host times the pair-loss matrix on the tape.

use super::distance::Distance;
pub use super::dro_config::{Dro, PairLoss, UncertaintySet};
use super::unit::{Batch, Loss, LossOutput};
use anyhow::{Result, ensure};
use burn::tensor::activation::relu;
use burn::tensor::{Tensor, TensorData};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

impl Loss for Dro {
    fn distance(&self) -> Distance {
        Distance::Cosine
    }

    /// Checked when the table was read.
    fn validate(&self) -> Result<()> {
        Ok(())
    }

    fn validate_batch(&self, b: usize) -> Result<()> {
        if let Dro::Weighted {
            set: UncertaintySet::TopK { k } | UncertaintySet::TopKPn { k },
            ..
        } = *self
        {
            ensure!(
                k <= b * (b - 1),
                "loss.k = {k} exceeds the {} ordered pairs of a batch of {b}",
                b * (b - 1)
            );
        }
        Ok(())
    }

    fn compute(&self, batch: &Batch, rng: &mut ChaCha8Rng) -> Result<LossOutput> {
        let emb = batch.emb.clone();
        let loss = self.loss(emb.clone().matmul(emb.transpose()), batch.labels, rng)?;
        Ok(LossOutput { loss, triplets: None })
    }
}

impl PairLoss {
    /// Host value of `l_ij` for similarity `s`; `pos` is `y_ij = 1`.
    fn host(&self, s: f64, pos: bool) -> f64 {
        match (*self, pos) {
            (PairLoss::Margin { margin, lambda }, true) => (margin as f64 + lambda as f64 - s).max(0.0),
            (PairLoss::Margin { margin, lambda }, false) => (margin as f64 + s - lambda as f64).max(0.0),
            (PairLoss::Binomial { alpha, lambda, .. }, true) => {
                softplus(-(alpha as f64) * (s - lambda as f64)) / alpha as f64
            }
            (PairLoss::Binomial { beta, lambda, .. }, false) => {
                softplus(beta as f64 * (s - lambda as f64)) / beta as f64
            }
        }
    }

    /// The pair-loss matrix on the tape; `yp`/`yn` are the off-diagonal positive/negative masks.
    fn matrix(&self, sim: Tensor<2>, yp: Tensor<2>, yn: Tensor<2>) -> Tensor<2> {
        match *self {
            PairLoss::Margin { margin: m, lambda: l } => {
                relu(sim.clone().neg().add_scalar(m + l)) * yp + relu(sim.add_scalar(m - l)) * yn
            }
            PairLoss::Binomial {
                alpha: a,
                beta: b,
                lambda: l,
            } => {
                let pos = sim.clone().sub_scalar(l).mul_scalar(-a).exp().log1p().div_scalar(a);
                let neg = sim.sub_scalar(l).mul_scalar(b).exp().log1p().div_scalar(b);
                pos * yp + neg * yn
            }
        }
    }
}

impl Dro {
    /// The DRO loss of a similarity matrix `sim` `[n, n]` (cosine similarities of unit embeddings)
    /// with batch labels. `rng` is used only by DRO-KL's pair sampling.
    pub fn loss(&self, sim: Tensor<2>, labels: &[u32], rng: &mut ChaCha8Rng) -> anyhow::Result<Tensor<1>> {
        let n = labels.len();
        let device = sim.device();
        let host: Vec<f64> = crate::host::read(&sim)?.into_iter().map(f64::from).collect();
        let t = |v: Vec<f32>| Tensor::<2>::from_data(TensorData::new(v, [n, n]), &device);
        Ok(match *self {
            Dro::Hap2sE {
                gamma_pos,
                gamma_neg,
                margin,
            } => hap2s_e(sim, &host, labels, (gamma_pos, gamma_neg), margin),
            Dro::Ms {
                gamma_pos,
                gamma_neg,
                epsilon,
                margin,
                lambda,
            } => ms(sim, &host, labels, (gamma_pos, gamma_neg), epsilon, (margin, lambda)),
            Dro::Ls { lambda } => lifted_similarity(sim, labels, lambda),
            Dro::Weighted {
                set,
                base,
                keep_zero_loss,
            } => {
                let pairs = support(&host, labels, base, keep_zero_loss);
                let w = weights(set, pairs, n, rng);
                let (yp, yn) = sign_masks(labels);
                (base.matrix(sim, t(yp), t(yn)) * t(w)).sum()
            }
        })
    }
}

/// Eq. 22–24: per anchor and sign, `p*_ij = e^{l_ij/γ} / (1 + Σ_k e^{l_ik/γ})` over the
/// multi-similarity-mined pairs (the `1` is the zero-loss pseudo pair), with the linear pair loss
/// `l = c⁺ − S` (positives) and `l = S − c⁻` (negatives), `c± = λ ± m`: Eq. 24 simplifies by
/// assuming every mined pair active, so the hinge is dropped. Averaged over anchors.
fn ms(
    sim: Tensor<2>,
    host: &[f64],
    labels: &[u32],
    (gamma_pos, gamma_neg): (f32, f32),
    epsilon: f32,
    (margin, lambda): (f32, f32),
) -> Tensor<1> {
    let n = labels.len();
    let device = sim.device();
    let host32: Vec<f32> = host.iter().map(|&x| x as f32).collect();
    let (pm, nm) = super::multisim::ms_masks(&host32, labels, epsilon);
    let (cp, cn) = ((lambda + margin) as f64, (lambda - margin) as f64);
    let mut w = vec![0f32; n * n];
    for i in 0..n {
        for (mask, gamma, sign) in [(&pm, gamma_pos, 1.0), (&nm, gamma_neg, -1.0)] {
            let idx: Vec<usize> = (i * n..(i + 1) * n).filter(|&f| mask[f] > 0.0).collect();
            let logits: Vec<f64> = idx
                .iter()
                .map(|&f| if sign > 0.0 { cp - host[f] } else { host[f] - cn } / gamma as f64)
                .collect();
            for (&f, q) in idx.iter().zip(softmax(&logits, 1.0)) {
                w[f] = (q / n as f64) as f32;
            }
        }
    }
    let t = |v: Vec<f32>| Tensor::<2>::from_data(TensorData::new(v, [n, n]), &device);
    let l = sim.clone().neg().add_scalar(cp as f32) * t(pm) + sim.sub_scalar(cn as f32) * t(nm);
    (l * t(w)).sum()
}

/// One off-diagonal pair in the support of `p`: (flat index `i·n + j`, loss, positive?).
type Pair = (usize, f64, bool);

/// The off-diagonal pairs of `sim` with their `base` losses, in row-major order; those with
/// zero loss only when `keep_zero_loss`.
fn support(sim: &[f64], labels: &[u32], base: PairLoss, keep_zero_loss: bool) -> Vec<Pair> {
    let n = labels.len();
    let mut pairs = Vec::with_capacity(n * n);
    for i in 0..n {
        for j in (0..n).filter(|&j| j != i) {
            let pos = labels[i] == labels[j];
            let l = base.host(sim[i * n + j], pos);
            if l > 0.0 || keep_zero_loss {
                pairs.push((i * n + j, l, pos));
            }
        }
    }
    pairs
}

/// `p*` of `set` over the support `pairs` of a batch of `n`, row-major `n × n`.
fn weights(set: UncertaintySet, mut pairs: Vec<Pair>, n: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    let mut w = vec![0f32; n * n];
    let by_loss = |a: &Pair, b: &Pair| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    match set {
        UncertaintySet::TopK { k } => {
            let k = k.max(1);
            for &(f, _, _) in top_k(&mut pairs, k, by_loss) {
                w[f] = 1.0 / k as f32;
            }
        }
        UncertaintySet::TopKPn { k } => {
            let k = k.max(2);
            let (mut pos, mut neg): (Vec<_>, Vec<_>) = pairs.into_iter().partition(|p| p.2);
            let mut chosen: Vec<usize> = top_k(&mut pos, k / 2, by_loss).iter().map(|p| p.0).collect();
            chosen.extend(top_k(&mut neg, k / 2, by_loss).iter().map(|p| p.0));
            // "The averaged gradient of the selected pairs": over those selected, which are
            // fewer than K when a sign has fewer than K/2 active pairs.
            for &f in &chosen {
                w[f] = 1.0 / chosen.len() as f32;
            }
        }
        UncertaintySet::Kl { gamma, sample_pairs } => kl(&mut w, &pairs, gamma, sample_pairs, rng),
        UncertaintySet::KlG { gamma_pos, gamma_neg } => {
            let mut row_start = 0;
            for i in 0..n {
                let row_end = row_start + pairs[row_start..].iter().take_while(|p| p.0 / n == i).count();
                let row = &pairs[row_start..row_end];
                for (sign, gamma) in [(true, gamma_pos), (false, gamma_neg)] {
                    let group: Vec<&Pair> = row.iter().filter(|p| p.2 == sign).collect();
                    let logits: Vec<f64> = group.iter().map(|p| p.1 / gamma as f64).collect();
                    // Eq. 6 sums the per-anchor distributions over the anchors (no 1/B).
                    for (pair, q) in group.iter().zip(softmax(&logits, 0.0)) {
                        w[pair.0] = q as f32;
                    }
                }
                row_start = row_end;
            }
        }
    }
    w
}

/// DRO-KL's `p* ∝ exp(l/γ)` into `w`, or the frequencies of `sample_pairs` draws from it.
fn kl(w: &mut [f32], pairs: &[Pair], gamma: f32, sample_pairs: Option<usize>, rng: &mut ChaCha8Rng) {
    let logits: Vec<f64> = pairs.iter().map(|p| p.1 / gamma as f64).collect();
    let p = softmax(&logits, 0.0);
    match sample_pairs {
        Some(s) if s < pairs.len() => {
            let cum: Vec<f64> = p
                .iter()
                .scan(0.0, |acc, x| {
                    *acc += x;
                    Some(*acc)
                })
                .collect();
            let total = cum.last().copied().unwrap_or(0.0);
            for _ in 0..s {
                let u = rng.random::<f64>() * total;
                let idx = cum.partition_point(|&c| c <= u).min(pairs.len() - 1);
                w[pairs[idx].0] += 1.0 / s as f32;
            }
        }
        _ => {
            for (pair, q) in pairs.iter().zip(p) {
                w[pair.0] = q as f32;
            }
        }
    }
}

/// Eq. 3 on the tape, summed over the anchors that have both a positive and a negative (others
/// have no term). Each log-sum-exp is shifted by its row maximum for range.
fn lifted_similarity(sim: Tensor<2>, labels: &[u32], lambda: f32) -> Tensor<1> {
    let n = labels.len();
    let device = sim.device();
    let (pm, nm) = sign_masks(labels);
    let has = |m: &[f32], i: usize| m[i * n..(i + 1) * n].iter().any(|&v| v > 0.0);
    let rows: Vec<f32> = (0..n).map(|i| (has(&pm, i) && has(&nm, i)) as u8 as f32).collect();
    let t = |v: Vec<f32>| Tensor::<2>::from_data(TensorData::new(v, [n, n]), &device);
    let (pm, nm) = (t(pm), t(nm));
    // −∞ outside the mask, as a large negative constant before exp.
    let masked = |x: Tensor<2>, m: Tensor<2>| x * m.clone() + (m.neg().add_scalar(1.0)).mul_scalar(-1e4);
    let lse = |x: Tensor<2>| {
        let mx = x.clone().detach().max_dim(1);
        (x - mx.clone()).exp().sum_dim(1).log() + mx
    };
    let pos = lse(masked(sim.clone().neg().add_scalar(lambda), pm));
    let neg = lse(masked(sim.sub_scalar(lambda), nm));
    let keep = Tensor::<1>::from_data(TensorData::new(rows, [n]), &device).reshape([n, 1]);
    (relu(pos + neg) * keep).sum()
}

/// HAP2S_E (Eq. 29–31): per anchor `[Σ_N q̂⁻ S − Σ_P q̂⁺ S + m]_+` with constant weights
/// `q⁺ ∝ e^{−S/γ⁺}`, `q⁻ ∝ e^{S/γ⁻}` normalised per anchor; averaged over anchors.
fn hap2s_e(sim: Tensor<2>, host: &[f64], labels: &[u32], (gamma_pos, gamma_neg): (f32, f32), margin: f32) -> Tensor<1> {
    let n = labels.len();
    let device = sim.device();
    let mut w = vec![0f32; n * n];
    for i in 0..n {
        for (sign, gamma) in [(true, gamma_pos), (false, gamma_neg)] {
            let idx: Vec<usize> = (0..n).filter(|&j| j != i && (labels[j] == labels[i]) == sign).collect();
            let logits: Vec<f64> = idx
                .iter()
                .map(|&j| if sign { -host[i * n + j] } else { host[i * n + j] } / gamma as f64)
                .collect();
            for (&j, q) in idx.iter().zip(softmax(&logits, 0.0)) {
                w[i * n + j] = if sign { -q as f32 } else { q as f32 };
            }
        }
    }
    let w = Tensor::<2>::from_data(TensorData::new(w, [n, n]), &device);
    relu((sim * w).sum_dim(1).add_scalar(margin)).mean()
}

/// Off-diagonal same-label and different-label masks, row-major `n × n`.
pub fn sign_masks(labels: &[u32]) -> (Vec<f32>, Vec<f32>) {
    let n = labels.len();
    let (mut yp, mut yn) = (vec![0f32; n * n], vec![0f32; n * n]);
    for i in 0..n {
        for j in 0..n {
            if i != j {
                if labels[i] == labels[j] {
                    yp[i * n + j] = 1.0;
                } else {
                    yn[i * n + j] = 1.0;
                }
            }
        }
    }
    (yp, yn)
}

/// The `k` first items of `v` under `cmp`, in linear time (ties broken by `cmp` too).
fn top_k<T, F: FnMut(&T, &T) -> std::cmp::Ordering>(v: &mut [T], k: usize, mut cmp: F) -> &[T] {
    if k == 0 {
        return &[];
    }
    if k < v.len() {
        v.select_nth_unstable_by(k - 1, &mut cmp);
        &v[..k]
    } else {
        v
    }
}

/// `softmax` of `logits` with `extra` added to the denominator as `e^0 · extra` (a zero-loss
/// pseudo element when `extra = 1`), computed stably.
fn softmax(logits: &[f64], extra: f64) -> Vec<f64> {
    let mx = logits
        .iter()
        .copied()
        .fold(if extra > 0.0 { 0.0 } else { f64::MIN }, f64::max);
    let e: Vec<f64> = logits.iter().map(|x| (x - mx).exp()).collect();
    let z: f64 = e.iter().sum::<f64>() + extra * (-mx).exp();
    e.into_iter().map(|x| x / z).collect()
}

fn softplus(x: f64) -> f64 {
    if x > 30.0 { x } else { x.exp().ln_1p() }
}
