//! Hardness Manipulation (Zhou & Patel, CVPR'22; seed 003): the source triplets (a, p, n) of one
//! miner are perturbed until their hardness `H̃_S = d(ã,p̃) − d(ã,ñ)` reaches the destination
//! hardness `H_D` — another miner's triplets on the same anchors, or the linear gradual adversary
//! `g_LGA(ℓ̄_{t−1}) = −γ·ℓ̄_{t−1}` (ℓ̄ clamped to [0, γ] and scaled by 1/γ) — by PGD on
//! `‖max(0, H_D − H̃_S)‖²` (ET), then trained with `L_T(ã, p̃, ñ)` plus the intra-class structure
//! term `L_ICS = λ·L_T(a, ã, p; 0)`.

use super::memory::{Memory, Nothing, saved_number};
use super::triplets::{self, TripletLayout, TripletPlan, hardness, perturb_triplets};
use super::unit::{Budget, Clean, DefendedLoss, Defense, Forward, Inner, Outer, Plan, Start, one};
use crate::attack::objective::{Objective, StopRule};
use crate::loss::LossConfig;
use crate::loss::device_miner;
use crate::loss::distance::Distance;
use crate::loss::miner::{self, Anchors, MineOptions, Miner, Mining, Rows, Triplets};
use anyhow::Result;
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor, TensorData};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Destination hardness of Hardness Manipulation: another miner's triplets, or LGA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Destination {
    Random,
    Semihard,
    Softhard,
    Distance,
    Hardest,
    /// Linear gradual adversary `g_LGA(ℓ̄_{t−1}) = −γ·ℓ̄_{t−1}/γ` (clamped to [0, γ]) of HM.
    Lga,
}

/// How HM aligns the source hardness with the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum HmObjective {
    /// `mean(min(0, H̃_S − H_D)²)`: stops at the destination.
    #[default]
    Et,
    /// robrank's "KL" on L1-normalised hardness vectors.
    Kl,
    /// `mean((H̃_S − H_D)²)`.
    L2,
}

/// HM's parameters (`[defense] kind = "hm"`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HmConfig {
    pub eps: f32,
    pub step: f32,
    pub steps: usize,
    /// Where the inner maximisation starts and whether it projects ([`Budget`]).
    #[serde(default, skip_serializing_if = "Start::is_clean")]
    pub start: Start,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<f32>,
    #[serde(default = "crate::field::yes", skip_serializing_if = "crate::field::is_yes")]
    pub project: bool,
    /// The miner whose triplets are perturbed.
    pub source: Miner,
    /// Their destination hardness: another miner's triplets, or LGA.
    pub destination: Destination,
    #[serde(default)]
    pub objective: HmObjective,
    /// Weight λ of the intra-class structure term (ICS); none without it.
    #[serde(default)]
    pub ics: Option<f32>,
}

impl Defense for HmConfig {
    fn budget(&self) -> Budget {
        Budget::of(self.eps, self.step, self.steps, (self.start, self.noise, self.project))
    }

    fn validate(&self, _loss: &LossConfig) -> Result<()> {
        if let Some(l) = self.ics {
            anyhow::ensure!(l.is_finite() && l >= 0.0, "defense.ics must be ≥ 0, got {l}");
        }
        Ok(())
    }

    fn triplet_based(&self) -> bool {
        true
    }

    fn memory(&self) -> Box<dyn Memory> {
        match self.destination {
            Destination::Lga => Box::new(Lga::default()),
            _ => Box::new(Nothing),
        }
    }

    fn inner(&self, step: &mut Inner) -> Result<Plan> {
        let clean = Clean::of(step.model()?, &step.x)?;
        let device = step.x.device().without_autodiff();
        let prev_loss = step.memory.get::<Lga>().map_or(Lga::START, |m| m.prev_loss);
        let source = match step.given.take() {
            Some(given) => Source::Given(given),
            None => Source::Mined(self.source),
        };
        let (triplets, objective) = plan(
            self,
            source,
            step.loss,
            &clean,
            step.labels,
            prev_loss,
            &device,
            step.rng,
        )?;
        // Source and destination the same miner: nothing to manipulate, no row moves.
        let moves = !skips_attack(self);
        let movable = TripletLayout { t: triplets.len() }.movable(moves, moves, moves);
        let plan = TripletPlan {
            triplets,
            objective,
            movable,
        };
        let perturbed = perturb_triplets(step, clean, plan, &self.pgd(step.state))?;
        if self.ics.is_none() {
            return Ok(Plan::adversarial(perturbed));
        }
        // ICS: one training-mode forward of `[ã, p̃, ñ, a, p]`.
        let idx = perturbed
            .triplets
            .as_ref()
            .map(|tr| Rows::concat(&[&tr.anchor_rows(), &tr.positive]))
            .unwrap_or_default();
        let clean_ap = triplets::select_rows(&step.x.clone().without_autodiff(), &idx);
        let images = Tensor::cat(vec![perturbed.adversarial.clone(), clean_ap], 0);
        Ok(Plan {
            perturbed,
            forwards: vec![Forward { images, bn_set: 0 }],
        })
    }

    fn outer(&self, plan: &Plan, emb: Vec<Tensor<2>>, step: &mut Outer) -> Result<DefendedLoss> {
        match self.ics {
            Some(lambda) => outer_with_ics(step, plan, one(emb)?, lambda),
            None => triplets::adversarial_outer(plan, emb, step),
        }
    }
}

/// LGA's destination hardness from the previous step's adversarial loss, `γ` = the triplet margin.
pub fn lga_destination(prev_loss: f32, gamma: f32) -> f32 {
    -gamma * prev_loss.clamp(0.0, gamma) / gamma
}

/// LGA's memory: the previous step's adversarial loss ℓ̄_{t−1}, read back with each step's loss
/// and kept in the checkpoint as `prev_loss`.
#[derive(Debug)]
pub struct Lga {
    pub prev_loss: f32,
    pending: Option<Tensor<1>>,
}

impl Lga {
    /// robrank's ℓ̄ before the first step.
    pub const START: f32 = 2.0;
}

impl Default for Lga {
    fn default() -> Self {
        Self {
            prev_loss: Self::START,
            pending: None,
        }
    }
}

impl Memory for Lga {
    fn after_step(&mut self, adv_loss: &Tensor<1>) {
        self.pending = Some(adv_loss.clone());
    }

    fn reads_loss(&self) -> bool {
        true
    }

    fn to_read(&mut self) -> Option<Tensor<1>> {
        self.pending.take()
    }

    fn read(&mut self, value: f32) {
        self.prev_loss = value;
    }

    fn save(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert("prev_loss".into(), serde_json::json!(self.prev_loss));
        m
    }

    fn restore(&mut self, saved: &serde_json::Map<String, serde_json::Value>) -> Result<()> {
        if let Some(v) = saved_number(saved, "prev_loss")? {
            self.prev_loss = v;
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The HM objective: `H̃_S` of the stacked rows against the constant `H_D` (one per triplet).
pub struct Manipulate {
    pub layout: TripletLayout,
    pub distance: Distance,
    pub dest: Tensor<1>,
    pub objective: HmObjective,
}

impl Manipulate {
    pub fn new(layout: TripletLayout, distance: Distance, dest: Tensor<1>, objective: HmObjective) -> Self {
        Self {
            layout,
            distance,
            dest,
            objective,
        }
    }
}

impl Objective for Manipulate {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        let (a, p, n) = self.layout.split(emb);
        let hs = hardness(a, p, n, self.distance);
        let hd = self.dest.clone();
        match self.objective {
            HmObjective::Et => (hs - hd).clamp_max(0.0).powi_scalar(2).mean(),
            HmObjective::L2 => (hs - hd).powi_scalar(2).mean(),
            // robrank: kl_div(s, t) on L1-normalised vectors = mean(t (ln t − s)); the t ln t term
            // is constant (and NaN for negative t), so its gradient-equivalent −mean(t·s) is used.
            HmObjective::Kl => {
                let s = hs.clone() / hs.abs().sum().clamp_min(1e-12);
                let t = hd.clone() / hd.abs().sum().clamp_min(1e-12);
                (s * t).mean().neg()
            }
        }
    }

    /// robrank's saturation: the PGD loop ends once the loss moves by less than 1e-7.
    fn stop_rule(&self) -> Option<StopRule> {
        Some(StopRule::Saturated { tol: 1e-7 })
    }
}

fn as_miner(d: Destination) -> Option<Miner> {
    match d {
        Destination::Random => Some(Miner::Random),
        Destination::Semihard => Some(Miner::Semihard),
        Destination::Softhard => Some(Miner::Softhard),
        Destination::Distance => Some(Miner::Distance),
        Destination::Hardest => Some(Miner::Hardest),
        Destination::Lga => None,
    }
}

/// Where HM's source triplets come from.
pub enum Source {
    Mined(Miner),
    /// The caller's (a reference code's batch, replayed).
    Given(Triplets),
}

/// Source triplets and the destination hardness per source triplet (aligned by anchor).
pub fn source_and_destination(
    clean: &[f32],
    dim: usize,
    labels: &[u32],
    (source, destination): (Source, Destination),
    (distance, margin): (Distance, f32),
    prev_loss: f32,
    rng: &mut ChaCha8Rng,
) -> Result<(Triplets, Vec<f32>)> {
    let n = labels.len();
    let dist = distance.host_matrix(clean, n, dim)?;
    let pairs = miner::anchor_pairs(labels, Anchors::Pairs, rng);
    let opt = MineOptions {
        margin,
        dim,
        cutoff: 0.0,
        nonzero_loss_cutoff: None,
    };
    let src = match source {
        Source::Mined(m) => miner::mine(m, &dist, labels, &pairs, &opt, rng),
        Source::Given(t) => t,
    };
    let hd = match as_miner(destination) {
        None => vec![lga_destination(prev_loss, margin); src.len()],
        Some(m) => {
            let dst = miner::mine(m, &dist, labels, &pairs, &opt, rng);
            let (p, ng) = (dst.positive.host()?, dst.negative.host()?);
            (0..dst.len())
                .map(|k| dist[dst.anchor[k] * n + p[k]] - dist[dst.anchor[k] * n + ng[k]])
                .collect()
        }
    };
    Ok((src, hd))
}

/// [`source_and_destination`] where the clean embeddings `clean` are, reading nothing back: the
/// miners of [`device_miner`] (random ones still draw on the host, which needs no distances),
/// the destination hardness from the embeddings.
pub fn source_and_destination_on_device(
    clean: &Tensor<2>,
    labels: &[u32],
    (source, destination): (Source, Destination),
    (distance, margin): (Distance, f32),
    prev_loss: f32,
    rng: &mut ChaCha8Rng,
) -> (Triplets, Tensor<1>) {
    let pairs = miner::anchor_pairs(labels, Anchors::Pairs, rng);
    let mut mine = |miner: Miner| {
        let mining = Mining {
            miner,
            anchors: Anchors::Pairs,
            margin,
            cutoff: 0.0,
            nonzero_loss_cutoff: None,
        };
        if miner == Miner::Random {
            miner::mine(miner, &[], labels, &pairs, &mining.options(clean.dims()[1]), rng)
        } else {
            device_miner::mine_pairs(&mining, distance, clean, labels, &pairs, rng)
        }
    };
    let src = match source {
        Source::Mined(m) => mine(m),
        Source::Given(t) => t,
    };
    let device = clean.device();
    let dest = match as_miner(destination) {
        None => Tensor::<1>::full([src.len()], lga_destination(prev_loss, margin), &device),
        Some(m) => {
            let dst = mine(m);
            let [a, p, n] = dst.gather(clean);
            hardness(a, p, n, distance)
        }
    };
    (src, dest)
}

/// Whether HM trains on the clean source triplets (robrank: source and destination are the same
/// miner, so there is nothing to manipulate).
pub fn skips_attack(cfg: &HmConfig) -> bool {
    as_miner(cfg.destination) == Some(cfg.source)
}

/// Source triplets and the HM objective toward their destination hardness: chosen on a GPU
/// where the clean embeddings are, on the CPU from their host copy.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    cfg: &HmConfig,
    source: Source,
    loss_cfg: &LossConfig,
    clean: &Clean,
    labels: &[u32],
    prev_loss: f32,
    device: &Device,
    rng: &mut ChaCha8Rng,
) -> Result<(Triplets, Box<dyn Objective>)> {
    let HmConfig {
        destination, objective, ..
    } = *cfg;
    let (distance, margin) = triplets::triplet_params(loss_cfg);
    let miners = (source, destination);
    let (tr, dest) = if device_miner::mines_on_device(device) {
        source_and_destination_on_device(&clean.emb, labels, miners, (distance, margin), prev_loss, rng)
    } else {
        let (dim, prev) = (clean.dim(), prev_loss);
        let (tr, hd) = source_and_destination(clean.host()?, dim, labels, miners, (distance, margin), prev, rng)?;
        let dest = Tensor::<1>::from_data(TensorData::new(hd, [tr.len()]), device);
        (tr, dest)
    };
    let obj = Manipulate::new(TripletLayout { t: tr.len() }, distance, dest, objective);
    Ok((tr, Box::new(obj)))
}

/// `L_T(ã, p̃, ñ) + λ·L_T(a, ã, p; 0)` from the training-mode embeddings `all` of `[ã, p̃, ñ, a, p]`.
fn outer_with_ics(step: &Outer, plan: &Plan, all: Tensor<2>, lambda: f32) -> Result<DefendedLoss> {
    let pert = &plan.perturbed;
    let (distance, _) = triplets::triplet_params(step.loss);
    let t = pert.triplets.as_ref().map_or(0, |tr| tr.len());
    anyhow::ensure!(
        all.dims()[0] == 5 * t,
        "HM with ICS: {} embeddings for {t} triplets; expected {}",
        all.dims()[0],
        5 * t
    );
    let adv_e = all.clone().narrow(0, 0, 3 * t);
    let (a, p) = (all.clone().narrow(0, 3 * t, t), all.narrow(0, 4 * t, t));
    let a_adv = adv_e.clone().narrow(0, 0, t);
    let ics = relu(distance.rows(a.clone(), a_adv) - distance.rows(a, p))
        .mean()
        .mul_scalar(lambda);
    triplets::triplet_outcome(step.loss, pert, adv_e, Some(ics))
}
