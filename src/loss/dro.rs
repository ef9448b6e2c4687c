//! The DRO framework for pairwise DML (Qi et al., seed 002): every ordered pair (i, j), i ≠ j, of a
//! mini-batch is a binary classification example with loss `l_ij`, and the batch loss is
//! `F(θ) = max_{p∈U} Σ p_ij l_ij` (its Eq. 1). The maximising `p*` is found on detached similarities
//! and the gradient taken at `p*` (its Lemma 1), so every variant is a weight matrix `W = p*` on the
//! host times the pair-loss matrix on the tape.

use burn::tensor::activation::relu;
use burn::tensor::{Tensor, TensorData};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The uncertainty set `U`, i.e. which DRO variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DroVariant {
    /// `U = {Σp = 1, 0 ≤ p ≤ 1/K}`: the mean of the K largest pair losses (Sec. 3.2).
    #[serde(rename = "top-k")]
    TopK,
    /// The K/2 largest positive and K/2 largest negative pair losses, over K (Sec. 3.2).
    #[serde(rename = "top-k-pn")]
    TopKPn,
    /// KL-regularised: `p* ∝ exp(l/γ)` over all pairs (Sec. 3.2), optionally sampled.
    #[serde(rename = "kl")]
    Kl,
    /// KL-regularised per anchor and per sign (Eq. 6): the generalised lifted-structure loss.
    #[serde(rename = "kl-g")]
    KlG,
    /// Eq. 22–24: Eq. 6 plus one zero-loss pseudo pair per group, on multi-similarity-mined pairs.
    #[serde(rename = "ms")]
    Ms,
    /// HAP2S with exponential weights (Yu et al. 2018; the paper's Sec. 6.2, Eq. 29–31).
    #[serde(rename = "hap2s-e")]
    Hap2sE,
    /// The lifted-structure loss in the paper's similarity form (Eq. 3), the baseline of its
    /// Table 2: `Σ_i [log Σ_{j∈P_i} e^{λ − S_ij} + log Σ_{k∈N_i} e^{S_ik − λ}]_+`.
    #[serde(rename = "ls")]
    Ls,
}

/// The pairwise base loss `l_ij` on cosine similarity `S_ij`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PairLoss {
    /// `[m + y_ij(λ − S_ij)]_+` with `y = +1` for positives, `−1` for negatives.
    #[default]
    Margin,
    /// Binomial deviance: `1/α log(1 + e^{−α(S−λ)})` for positives, `1/β log(1 + e^{β(S−λ)})` for negatives.
    Binomial,
}

/// Resolved parameters of one DRO loss (defaults applied, validated by the config).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dro {
    pub variant: DroVariant,
    pub base: PairLoss,
    pub k: usize,
    pub gamma_pos: f32,
    pub gamma_neg: f32,
    pub margin: f32,
    pub lambda: f32,
    pub alpha: f32,
    pub beta: f32,
    /// DRO-KL: draw this many pairs from `p*` and average their losses, when the batch has more.
    pub sample_pairs: Option<usize>,
    /// DRO-MS: multi-similarity's pair-mining slack ε.
    pub epsilon: f32,
    /// Keep pairs with zero loss in the support of `p` (the paper removes them).
    pub keep_zero_loss: bool,
}

impl Dro {
    /// Host value of `l_ij` for similarity `s`; `pos` is `y_ij = 1`.
    fn pair_loss(&self, s: f64, pos: bool) -> f64 {
        let (m, l) = (self.margin as f64, self.lambda as f64);
        match (self.base, pos) {
            (PairLoss::Margin, true) => (m + l - s).max(0.0),
            (PairLoss::Margin, false) => (m + s - l).max(0.0),
            (PairLoss::Binomial, true) => softplus(-(self.alpha as f64) * (s - l)) / self.alpha as f64,
            (PairLoss::Binomial, false) => softplus(self.beta as f64 * (s - l)) / self.beta as f64,
        }
    }

    /// The pair-loss matrix on the tape; `yp`/`yn` are the off-diagonal positive/negative masks.
    fn loss_matrix(&self, sim: Tensor<2>, yp: Tensor<2>, yn: Tensor<2>) -> Tensor<2> {
        let (m, l) = (self.margin, self.lambda);
        match self.base {
            PairLoss::Margin => relu(sim.clone().neg().add_scalar(m + l)) * yp + relu(sim.add_scalar(m - l)) * yn,
            PairLoss::Binomial => {
                let (a, b) = (self.alpha, self.beta);
                let pos = sim.clone().sub_scalar(l).mul_scalar(-a).exp().log1p().div_scalar(a);
                let neg = sim.sub_scalar(l).mul_scalar(b).exp().log1p().div_scalar(b);
                pos * yp + neg * yn
            }
        }
    }

    /// The DRO loss of a similarity matrix `sim` `[n, n]` (cosine similarities of unit embeddings)
    /// with batch labels. `rng` is used only by DRO-KL's pair sampling.
    pub fn loss(&self, sim: Tensor<2>, labels: &[u32], rng: &mut ChaCha8Rng) -> anyhow::Result<Tensor<1>> {
        let n = labels.len();
        let device = sim.device();
        let host: Vec<f64> = crate::host::read(&sim)?.into_iter().map(f64::from).collect();
        let t = |v: Vec<f32>| Tensor::<2>::from_data(TensorData::new(v, [n, n]), &device);
        Ok(match self.variant {
            DroVariant::Hap2sE => hap2s_e(self, sim, &host, labels),
            DroVariant::Ms => self.ms(sim, &host, labels),
            DroVariant::Ls => lifted_similarity(sim, labels, self.lambda),
            DroVariant::TopK | DroVariant::TopKPn | DroVariant::Kl | DroVariant::KlG => {
                let w = self.weights(&host, labels, rng);
                let (yp, yn) = sign_masks(labels);
                (self.loss_matrix(sim, t(yp), t(yn)) * t(w)).sum()
            }
        })
    }

    /// `p*` of the TopK, TopK-PN, KL and KL-G variants, row-major `n × n`.
    pub fn weights(&self, sim: &[f64], labels: &[u32], rng: &mut ChaCha8Rng) -> Vec<f32> {
        let n = labels.len();
        let mut w = vec![0f32; n * n];
        // (flat index, loss, positive?) of every off-diagonal pair in the support.
        let mut pairs: Vec<(usize, f64, bool)> = Vec::with_capacity(n * n);
        for i in 0..n {
            for j in 0..n {
                if i == j {
                    continue;
                }
                let pos = labels[i] == labels[j];
                let l = self.pair_loss(sim[i * n + j], pos);
                if l > 0.0 || self.keep_zero_loss {
                    pairs.push((i * n + j, l, pos));
                }
            }
        }
        let by_loss = |a: &(usize, f64, bool), b: &(usize, f64, bool)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        match self.variant {
            DroVariant::TopK => {
                let k = self.k.max(1);
                let top = top_k(&mut pairs, k, by_loss);
                for &(f, _, _) in top {
                    w[f] = 1.0 / k as f32;
                }
            }
            DroVariant::TopKPn => {
                let k = self.k.max(2);
                let (mut pos, mut neg): (Vec<_>, Vec<_>) = pairs.into_iter().partition(|p| p.2);
                let mut chosen: Vec<usize> = top_k(&mut pos, k / 2, by_loss).iter().map(|p| p.0).collect();
                chosen.extend(top_k(&mut neg, k / 2, by_loss).iter().map(|p| p.0));
                // "The averaged gradient of the selected pairs": over those selected, which are
                // fewer than K when a sign has fewer than K/2 active pairs.
                for &f in &chosen {
                    w[f] = 1.0 / chosen.len() as f32;
                }
            }
            DroVariant::Kl => {
                let logits: Vec<f64> = pairs.iter().map(|p| p.1 / self.gamma_pos as f64).collect();
                let p = softmax(&logits, 0.0);
                match self.sample_pairs {
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
            DroVariant::KlG => {
                let mut row_start = 0;
                for i in 0..n {
                    let row_end = row_start + pairs[row_start..].iter().take_while(|p| p.0 / n == i).count();
                    let row = &pairs[row_start..row_end];
                    for (sign, gamma) in [(true, self.gamma_pos), (false, self.gamma_neg)] {
                        let group: Vec<&(usize, f64, bool)> = row.iter().filter(|p| p.2 == sign).collect();
                        let logits: Vec<f64> = group.iter().map(|p| p.1 / gamma as f64).collect();
                        // Eq. 6 sums the per-anchor distributions over the anchors (no 1/B).
                        for (pair, q) in group.iter().zip(softmax(&logits, 0.0)) {
                            w[pair.0] = q as f32;
                        }
                    }
                    row_start = row_end;
                }
            }
            DroVariant::Ms | DroVariant::Hap2sE | DroVariant::Ls => {}
        }
        w
    }

    /// Eq. 22–24: per anchor and sign, `p*_ij = e^{l_ij/γ} / (1 + Σ_k e^{l_ik/γ})` over the
    /// multi-similarity-mined pairs (the `1` is the zero-loss pseudo pair), with the linear pair loss
    /// `l = c⁺ − S` (positives) and `l = S − c⁻` (negatives), `c± = λ ± m`: Eq. 24 simplifies by
    /// assuming every mined pair active, so the hinge is dropped. Averaged over anchors.
    fn ms(&self, sim: Tensor<2>, host: &[f64], labels: &[u32]) -> Tensor<1> {
        let n = labels.len();
        let device = sim.device();
        let host32: Vec<f32> = host.iter().map(|&x| x as f32).collect();
        let (pm, nm) = super::multisim::ms_masks(&host32, labels, self.epsilon);
        let (cp, cn) = ((self.lambda + self.margin) as f64, (self.lambda - self.margin) as f64);
        let mut w = vec![0f32; n * n];
        for i in 0..n {
            for (mask, gamma, sign) in [(&pm, self.gamma_pos, 1.0), (&nm, self.gamma_neg, -1.0)] {
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
/// `q⁺ ∝ e^{−S/γ}`, `q⁻ ∝ e^{S/γ}` normalised per anchor; averaged over anchors.
fn hap2s_e(d: &Dro, sim: Tensor<2>, host: &[f64], labels: &[u32]) -> Tensor<1> {
    let n = labels.len();
    let device = sim.device();
    let mut w = vec![0f32; n * n];
    for i in 0..n {
        for (sign, gamma) in [(true, d.gamma_pos), (false, d.gamma_neg)] {
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
    relu((sim * w).sum_dim(1).add_scalar(d.margin)).mean()
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
