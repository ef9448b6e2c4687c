//! Metric-learning losses and miners. Miners return indices; losses score embeddings at those
//! indices. Any miner pairs with the triplet, contrastive and margin losses.

pub mod contrastive;
pub mod distance;
pub mod dro;
pub mod lifted;
pub mod margin;
pub mod miner;
pub mod multisim;
pub mod npair;
pub mod triplet;

use anyhow::{Result, ensure};
use burn::module::{Module, Param};
use burn::tensor::{Device, Tensor};
use distance::Distance;
use dro::{Dro, DroVariant, PairLoss};
use miner::{Anchors, MineOptions, Miner, Triplets};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The `[loss]` table of an experiment config.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum LossConfig {
    Triplet {
        #[serde(default = "d_n")]
        distance: Distance,
        #[serde(default = "m_random")]
        miner: Miner,
        #[serde(default = "f0_2")]
        margin: f32,
        #[serde(default)]
        anchors: Anchors,
        #[serde(default)]
        cutoff: f32,
        #[serde(default)]
        nonzero_loss_cutoff: Option<f32>,
    },
    Contrastive {
        #[serde(default = "d_n")]
        distance: Distance,
        #[serde(default = "m_random")]
        miner: Miner,
        #[serde(default)]
        pos_margin: f32,
        #[serde(default = "f1")]
        neg_margin: f32,
        #[serde(default)]
        anchors: Anchors,
        #[serde(default)]
        cutoff: f32,
        #[serde(default)]
        nonzero_loss_cutoff: Option<f32>,
    },
    Margin {
        #[serde(default = "m_distance")]
        miner: Miner,
        #[serde(default = "f0_2")]
        margin: f32,
        #[serde(default = "f0_6")]
        beta: f32,
        #[serde(default = "f5e_4")]
        beta_lr: f64,
        #[serde(default)]
        nu: f32,
        #[serde(default)]
        anchors: Anchors,
        #[serde(default = "f0_5")]
        cutoff: f32,
        #[serde(default = "nlc")]
        nonzero_loss_cutoff: Option<f32>,
    },
    MultiSimilarity {
        #[serde(default = "f2")]
        alpha: f32,
        #[serde(default = "f40")]
        beta: f32,
        #[serde(default = "f0_5")]
        base: f32,
        #[serde(default = "f0_1")]
        epsilon: f32,
    },
    Lifted {
        #[serde(default = "f1")]
        margin: f32,
    },
    Npair {
        #[serde(default = "f5e_3")]
        l2_reg: f32,
    },
    /// The DRO pair-weighting framework (seed 002) over a pairwise base loss on cosine similarity.
    /// Options a variant does not use must be left out (validation says which).
    Dro {
        variant: DroVariant,
        #[serde(default)]
        base: PairLoss,
        /// TopK / TopK-PN: number of pairs.
        #[serde(default)]
        k: Option<usize>,
        /// KL, HAP2S_E: γ; KL-G and MS: both γ⁺ and γ⁻ unless given apart.
        #[serde(default)]
        gamma: Option<f32>,
        #[serde(default)]
        gamma_pos: Option<f32>,
        #[serde(default)]
        gamma_neg: Option<f32>,
        /// m of the margin base loss (and of HAP2S_E); unused by `ls`, which has λ only.
        #[serde(default = "f0_2")]
        margin: f32,
        /// λ, the similarity threshold of both base losses.
        #[serde(default = "f0_5")]
        lambda: f32,
        /// α, β of the binomial base loss (defaults 2 and 50).
        #[serde(default)]
        alpha: Option<f32>,
        #[serde(default)]
        beta: Option<f32>,
        /// KL: sample this many pairs from p* when the batch has more.
        #[serde(default)]
        sample_pairs: Option<usize>,
        /// MS: multi-similarity's mining slack ε (default 0.1).
        #[serde(default)]
        epsilon: Option<f32>,
        #[serde(default)]
        keep_zero_loss: bool,
    },
}

fn d_n() -> Distance {
    Distance::NormalizedEuclidean
}
fn m_random() -> Miner {
    Miner::Random
}
fn m_distance() -> Miner {
    Miner::Distance
}
fn f0_1() -> f32 {
    0.1
}
fn f0_2() -> f32 {
    0.2
}
fn f0_5() -> f32 {
    0.5
}
fn f0_6() -> f32 {
    0.6
}
fn f1() -> f32 {
    1.0
}
fn f2() -> f32 {
    2.0
}
fn f40() -> f32 {
    40.0
}
fn f5e_3() -> f32 {
    5e-3
}
fn f5e_4() -> f64 {
    5e-4
}
fn nlc() -> Option<f32> {
    Some(1.4)
}

impl LossConfig {
    pub fn name(&self) -> &'static str {
        match self {
            LossConfig::Triplet { .. } => "triplet",
            LossConfig::Contrastive { .. } => "contrastive",
            LossConfig::Margin { .. } => "margin",
            LossConfig::MultiSimilarity { .. } => "multi-similarity",
            LossConfig::Lifted { .. } => "lifted",
            LossConfig::Npair { .. } => "npair",
            LossConfig::Dro { .. } => "dro",
        }
    }

    /// The triplet loss's margin (`None` for the other losses).
    pub fn triplet_margin(&self) -> Option<f32> {
        match self {
            LossConfig::Triplet { margin, .. } => Some(*margin),
            _ => None,
        }
    }

    /// The distance the loss (and its miner) uses.
    pub fn distance(&self) -> Distance {
        match self {
            LossConfig::Triplet { distance, .. } | LossConfig::Contrastive { distance, .. } => *distance,
            LossConfig::Margin { .. } | LossConfig::Lifted { .. } => Distance::NormalizedEuclidean,
            LossConfig::MultiSimilarity { .. } | LossConfig::Npair { .. } | LossConfig::Dro { .. } => Distance::Cosine,
        }
    }

    pub fn validate(&self, l2_normalized: bool) -> Result<()> {
        let d = self.distance();
        ensure!(
            l2_normalized
                || !d.needs_normalized()
                || matches!(self, LossConfig::Npair { .. } | LossConfig::Lifted { .. }),
            "loss {} with distance {:?} needs model.l2_normalize = true",
            self.name(),
            d
        );
        let pos = |v: f32, what: &str| -> Result<()> {
            ensure!(
                v.is_finite() && v >= 0.0,
                "loss.{what} must be a finite number ≥ 0, got {v}"
            );
            Ok(())
        };
        match self {
            LossConfig::Triplet { margin, cutoff, .. } => {
                pos(*margin, "margin")?;
                pos(*cutoff, "cutoff")?;
            }
            LossConfig::Contrastive {
                pos_margin, neg_margin, ..
            } => {
                pos(*pos_margin, "pos_margin")?;
                pos(*neg_margin, "neg_margin")?;
            }
            LossConfig::Margin { margin, beta_lr, .. } => {
                pos(*margin, "margin")?;
                ensure!(*beta_lr >= 0.0, "loss.beta_lr must be ≥ 0");
            }
            LossConfig::MultiSimilarity { alpha, beta, .. } => {
                ensure!(*alpha > 0.0 && *beta > 0.0, "loss.alpha and loss.beta must be > 0");
            }
            LossConfig::Lifted { margin } => pos(*margin, "margin")?,
            LossConfig::Npair { l2_reg } => pos(*l2_reg, "l2_reg")?,
            LossConfig::Dro { .. } => {
                self.dro()?;
            }
        }
        Ok(())
    }

    /// The resolved DRO parameters; an error names an option the variant does not use or a bad value.
    pub fn dro(&self) -> Result<Dro> {
        let LossConfig::Dro {
            variant,
            base,
            k,
            gamma,
            gamma_pos,
            gamma_neg,
            margin,
            lambda,
            alpha,
            beta,
            sample_pairs,
            epsilon,
            keep_zero_loss,
        } = self.clone()
        else {
            anyhow::bail!("loss.kind is {}, not dro", self.name());
        };
        use DroVariant::*;
        // Only for messages: built when one is needed, not on every training batch.
        let name = || serde_json::to_string(&variant).unwrap_or_default();
        let unused = |set: bool, what: &str, users: &str| -> Result<()> {
            ensure!(
                !set,
                "loss.{what} is not used by variant {} (only by {users}); remove it",
                name()
            );
            Ok(())
        };
        let topk = matches!(variant, TopK | TopKPn);
        unused(k.is_some() && !topk, "k", "top-k, top-k-pn")?;
        ensure!(
            !topk || k.is_some(),
            "loss.k (number of pairs) is required by variant {}",
            name()
        );
        unused(
            gamma.is_some() && (topk || variant == Ls),
            "gamma",
            "kl, kl-g, ms, hap2s-e",
        )?;
        let split = matches!(variant, KlG | Ms | Hap2sE);
        unused(gamma_pos.is_some() && !split, "gamma_pos", "kl-g, ms, hap2s-e")?;
        unused(gamma_neg.is_some() && !split, "gamma_neg", "kl-g, ms, hap2s-e")?;
        unused(sample_pairs.is_some() && variant != Kl, "sample_pairs", "kl")?;
        unused(epsilon.is_some() && variant != Ms, "epsilon", "ms")?;
        let binomial = base == PairLoss::Binomial;
        unused(alpha.is_some() && !binomial, "alpha", "base = \"binomial\"")?;
        unused(beta.is_some() && !binomial, "beta", "base = \"binomial\"")?;
        ensure!(
            !binomial || matches!(variant, TopK | TopKPn | Kl | KlG),
            "loss.base = \"binomial\" is not defined for variant {} (its weights assume the margin loss)",
            name()
        );
        ensure!(k != Some(0), "loss.k must be ≥ 1");
        ensure!(
            variant != TopKPn || k.unwrap_or(2) >= 2,
            "loss.k must be ≥ 2 for top-k-pn (K/2 pairs of each sign)"
        );
        ensure!(sample_pairs != Some(0), "loss.sample_pairs must be ≥ 1");
        // MS defaults to multi-similarity's α = 2, β = 50; the others to the paper's γ = 0.1.
        let (dp, dn) = if variant == Ms { (0.5, 0.02) } else { (0.1, 0.1) };
        let gp = gamma_pos.or(gamma).unwrap_or(dp);
        let gn = gamma_neg.or(gamma).unwrap_or(dn);
        for (v, what) in [(gp, "gamma / gamma_pos"), (gn, "gamma / gamma_neg")] {
            ensure!(v.is_finite() && v > 0.0, "loss.{what} must be > 0, got {v}");
        }
        ensure!(
            margin.is_finite() && margin >= 0.0,
            "loss.margin must be ≥ 0, got {margin}"
        );
        ensure!(lambda.is_finite(), "loss.lambda must be a number");
        let (a, b) = (alpha.unwrap_or(2.0), beta.unwrap_or(50.0));
        ensure!(a > 0.0 && b > 0.0, "loss.alpha and loss.beta must be > 0");
        let eps = epsilon.unwrap_or(0.1);
        ensure!(eps.is_finite() && eps >= 0.0, "loss.epsilon must be ≥ 0");
        Ok(Dro {
            variant,
            base,
            k: k.unwrap_or(0),
            gamma_pos: gp,
            gamma_neg: gn,
            margin,
            lambda,
            alpha: a,
            beta: b,
            sample_pairs,
            epsilon: eps,
            keep_zero_loss,
        })
    }
}

/// Trainable parameters that belong to the loss (the margin loss's β).
#[derive(Module, Debug)]
pub struct LossParams {
    pub beta: Option<Param<Tensor<1>>>,
}

impl LossParams {
    pub fn new(cfg: &LossConfig, device: &Device) -> Self {
        let beta = match cfg {
            LossConfig::Margin { beta, .. } => Some(Param::from_tensor(Tensor::<1>::from_floats([*beta], device))),
            _ => None,
        };
        Self { beta }
    }
}

/// What a loss evaluation returns: the scalar loss and, for triplet-based losses, the triplets.
pub struct LossOutput {
    pub loss: Tensor<1>,
    pub triplets: Option<Triplets>,
}

impl LossConfig {
    /// The miner [`mine_triplets`] uses for this loss (random negatives for the losses that
    /// mine none of their own).
    pub fn tuple_miner(&self) -> Miner {
        match self {
            LossConfig::Triplet { miner, .. }
            | LossConfig::Contrastive { miner, .. }
            | LossConfig::Margin { miner, .. } => *miner,
            _ => Miner::Random,
        }
    }
}

/// Mines triplets on detached embeddings with the loss's miner.
pub fn mine_triplets(
    cfg: &LossConfig,
    host: &[f32],
    dim: usize,
    labels: &[u32],
    rng: &mut ChaCha8Rng,
) -> Result<Triplets> {
    let (miner, anchors, margin, cutoff, nlc) = match cfg {
        LossConfig::Triplet {
            miner,
            anchors,
            margin,
            cutoff,
            nonzero_loss_cutoff,
            ..
        } => (*miner, *anchors, *margin, *cutoff, *nonzero_loss_cutoff),
        LossConfig::Contrastive {
            miner,
            anchors,
            neg_margin,
            cutoff,
            nonzero_loss_cutoff,
            ..
        } => (*miner, *anchors, *neg_margin, *cutoff, *nonzero_loss_cutoff),
        LossConfig::Margin {
            miner,
            anchors,
            margin,
            cutoff,
            nonzero_loss_cutoff,
            ..
        } => (*miner, *anchors, *margin, *cutoff, *nonzero_loss_cutoff),
        _ => (Miner::Random, Anchors::Pairs, 0.2, 0.0, None),
    };
    let n = labels.len();
    // Random negatives need no distances.
    let dist = if miner == Miner::Random {
        vec![]
    } else {
        cfg.distance().host_matrix(host, n, dim)?
    };
    let pairs = miner::anchor_pairs(labels, anchors, rng);
    let opt = MineOptions {
        margin,
        dim,
        cutoff,
        nonzero_loss_cutoff: nlc,
    };
    Ok(miner::mine(miner, &dist, labels, &pairs, &opt, rng))
}

/// Evaluates the configured loss on a batch of embeddings `[n, d]` with labels.
pub fn compute(
    cfg: &LossConfig,
    emb: Tensor<2>,
    labels: &[u32],
    params: &LossParams,
    rng: &mut ChaCha8Rng,
) -> Result<LossOutput> {
    compute_given(cfg, emb, None, labels, params, rng)
}

/// [`compute`] with the embeddings' host copy when the caller has read it already; with `None`
/// they are read here, and only for a miner that needs distances (random negatives do not).
pub fn compute_given(
    cfg: &LossConfig,
    emb: Tensor<2>,
    host: Option<&[f32]>,
    labels: &[u32],
    params: &LossParams,
    rng: &mut ChaCha8Rng,
) -> Result<LossOutput> {
    let [n, dim] = emb.dims();
    debug_assert_eq!(n, labels.len());
    let random = cfg.tuple_miner() == Miner::Random;
    let mined = |rng: &mut ChaCha8Rng| -> Result<Triplets> {
        match host {
            Some(h) => mine_triplets(cfg, h, dim, labels, rng),
            None if random => mine_triplets(cfg, &[], dim, labels, rng),
            None => mine_triplets(cfg, &crate::host::read(&emb)?, dim, labels, rng),
        }
    };
    Ok(match cfg {
        LossConfig::Triplet { distance, margin, .. } => {
            let t = mined(rng)?;
            LossOutput {
                loss: triplet::triplet_loss(&emb, &t, *distance, *margin),
                triplets: Some(t),
            }
        }
        LossConfig::Contrastive {
            distance,
            pos_margin,
            neg_margin,
            ..
        } => {
            let t = mined(rng)?;
            LossOutput {
                loss: contrastive::contrastive_loss(&emb, &t, *distance, *pos_margin, *neg_margin),
                triplets: Some(t),
            }
        }
        LossConfig::Margin { margin, nu, beta, .. } => {
            let t = mined(rng)?;
            let b = match &params.beta {
                Some(p) => p.val(),
                None => Tensor::<1>::from_floats([*beta], &emb.device()),
            };
            LossOutput {
                loss: margin::margin_loss(&emb, &t, cfg.distance(), *margin, b, *nu),
                triplets: Some(t),
            }
        }
        LossConfig::MultiSimilarity {
            alpha,
            beta,
            base,
            epsilon,
        } => {
            let s = emb.clone().matmul(emb.clone().transpose());
            let (pm, nm) = multisim::ms_masks(&crate::host::read(&s)?, labels, *epsilon);
            LossOutput {
                loss: multisim::multisim_loss(s, pm, nm, *alpha, *beta, *base),
                triplets: None,
            }
        }
        LossConfig::Lifted { margin } => LossOutput {
            loss: lifted::lifted_loss(Distance::Euclidean.matrix(emb), labels, *margin),
            triplets: None,
        },
        LossConfig::Npair { l2_reg } => {
            let pairs = miner::anchor_pairs(labels, Anchors::Pairs, rng);
            LossOutput {
                loss: npair::npair_loss(&emb, &pairs, labels, *l2_reg),
                triplets: None,
            }
        }
        LossConfig::Dro { .. } => {
            // Validated with the config; a bad one here is a programming error reported as NaN.
            let loss = cfg.dro()?.loss(emb.clone().matmul(emb.transpose()), labels, rng)?;
            LossOutput { loss, triplets: None }
        }
    })
}
