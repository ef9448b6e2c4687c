//! Metric-learning losses and miners. Miners return indices; losses score embeddings at those
//! indices. Any miner pairs with the triplet, contrastive and margin losses.

pub mod contrastive;
pub mod distance;
pub mod lifted;
pub mod margin;
pub mod miner;
pub mod multisim;
pub mod npair;
pub mod triplet;

use anyhow::{Result, ensure};
use burn::module::{Module, Param};
use burn::tensor::{Device, Int, Tensor, TensorData};
use distance::Distance;
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
        }
    }

    /// The distance the loss (and its miner) uses.
    pub fn distance(&self) -> Distance {
        match self {
            LossConfig::Triplet { distance, .. } | LossConfig::Contrastive { distance, .. } => *distance,
            LossConfig::Margin { .. } | LossConfig::Lifted { .. } => Distance::NormalizedEuclidean,
            LossConfig::MultiSimilarity { .. } | LossConfig::Npair { .. } => Distance::Cosine,
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
        }
        Ok(())
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

pub(crate) fn index_tensor(idx: &[usize], device: &Device) -> Tensor<1, Int> {
    Tensor::<1, Int>::from_data(
        TensorData::new(idx.iter().map(|&i| i as i64).collect::<Vec<_>>(), [idx.len()]),
        device,
    )
}

pub(crate) fn gather(emb: &Tensor<2>, idx: &Tensor<1, Int>) -> Tensor<2> {
    emb.clone().select(0, idx.clone())
}

/// Host copy of a `[n, d]` tensor.
pub fn to_host(e: &Tensor<2>) -> Vec<f32> {
    e.clone()
        .detach()
        .without_autodiff()
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap_or_default()
}

/// Mines triplets on detached embeddings with the loss's miner.
pub fn mine_triplets(cfg: &LossConfig, host: &[f32], dim: usize, labels: &[u32], rng: &mut ChaCha8Rng) -> Triplets {
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
    let dist = cfg.distance().host_matrix(host, n, dim);
    let pairs = miner::anchor_pairs(labels, anchors, rng);
    let opt = MineOptions {
        margin,
        dim,
        cutoff,
        nonzero_loss_cutoff: nlc,
    };
    miner::mine(miner, &dist, labels, &pairs, &opt, rng)
}

/// Evaluates the configured loss on a batch of embeddings `[n, d]` with labels.
pub fn compute(
    cfg: &LossConfig,
    emb: Tensor<2>,
    labels: &[u32],
    params: &LossParams,
    rng: &mut ChaCha8Rng,
) -> LossOutput {
    let [n, dim] = emb.dims();
    debug_assert_eq!(n, labels.len());
    let host = to_host(&emb);
    match cfg {
        LossConfig::Triplet { distance, margin, .. } => {
            let t = mine_triplets(cfg, &host, dim, labels, rng);
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
            let t = mine_triplets(cfg, &host, dim, labels, rng);
            LossOutput {
                loss: contrastive::contrastive_loss(&emb, &t, *distance, *pos_margin, *neg_margin),
                triplets: Some(t),
            }
        }
        LossConfig::Margin { margin, nu, beta, .. } => {
            let t = mine_triplets(cfg, &host, dim, labels, rng);
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
            let sim: Vec<f32> = Distance::Cosine
                .host_matrix(&host, n, dim)
                .iter()
                .map(|d| 1.0 - d)
                .collect();
            let (pm, nm) = multisim::ms_masks(&sim, labels, *epsilon);
            let s = emb.clone().matmul(emb.transpose());
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
    }
}
