//! The worked example of a defense with state (issue 39): this file and one line of the
//! registry in `defense/mod.rs` (`"example-curriculum"`, under `#[cfg(test)]`) make
//! `[defense] kind = "example-curriculum"` a defense `rdml train` runs, checkpoints and resumes;
//! the trainer names nothing of it. Madry's triplet perturbation with a curriculum: the radius
//! is `eps · min(1, ℓ̄)`, where ℓ̄ is the running mean of the adversarial loss
//! (`ℓ̄ ← decay·ℓ̄ + (1 − decay)·ℓ_t`, from 0), so training starts clean and hardens as the
//! model's adversarial loss allows.

use super::madry::MaxHardness;
use super::memory::{Memory, saved_number};
use super::triplets::{adversarial_outer, perturb_mined};
use super::unit::{Budget, DefendedLoss, Defense, Inner, Outer, Plan, Start};
use anyhow::{Result, ensure};
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Curriculum {
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
    /// The running mean's decay, in [0, 1).
    pub decay: f32,
}

/// The running mean of the adversarial loss, kept in the checkpoint as `mean`.
#[derive(Default)]
pub struct RunningLoss {
    pub mean: f32,
    pending: Option<Tensor<1>>,
    decay: f32,
}

impl Memory for RunningLoss {
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
        self.mean = self.decay * self.mean + (1.0 - self.decay) * value;
    }

    fn save(&self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::from_iter([("mean".to_string(), serde_json::json!(self.mean))])
    }

    fn restore(&mut self, saved: &serde_json::Map<String, serde_json::Value>) -> Result<()> {
        self.mean = saved_number(saved, "mean")?.unwrap_or(self.mean);
        Ok(())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Defense for Curriculum {
    fn budget(&self) -> Budget {
        Budget::of(self.eps, self.step, self.steps, (self.start, self.noise, self.project))
    }

    fn validate(&self, _loss: &crate::loss::LossConfig) -> Result<()> {
        ensure!(
            (0.0..1.0).contains(&self.decay),
            "defense.decay must be in [0, 1), got {}",
            self.decay
        );
        Ok(())
    }

    fn triplet_based(&self) -> bool {
        true
    }

    fn memory(&self) -> Box<dyn Memory> {
        Box::new(RunningLoss {
            decay: self.decay,
            ..RunningLoss::default()
        })
    }

    fn inner(&self, step: &mut Inner) -> Result<Plan> {
        let mean = step.memory.get::<RunningLoss>().map_or(0.0, |m| m.mean);
        let scale = mean.clamp(0.0, 1.0);
        let mut pgd = self.pgd(step.state);
        (pgd.eps, pgd.step) = (pgd.eps * scale, pgd.step * scale);
        perturb_mined(step, &pgd, (true, true, true), |layout, distance| {
            Box::new(MaxHardness { layout, distance })
        })
        .map(Plan::adversarial)
    }

    fn outer(&self, plan: &Plan, emb: Vec<Tensor<2>>, step: &mut Outer) -> Result<DefendedLoss> {
        adversarial_outer(plan, emb, step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Experiment;
    use crate::defense::{DefenseConfig, DefenseState};
    use crate::train::Trainer;
    use rand::SeedableRng;

    fn experiment() -> Experiment {
        let defense = "defense={kind=\"example-curriculum\",eps=0.1,step=0.05,steps=2,decay=0.5}";
        Experiment::load("quickstart", &["model.embedding_dim=16".into(), defense.into()]).unwrap()
    }

    #[test]
    fn a_defense_with_state_is_its_file_and_one_registry_line() {
        let exp = experiment();
        assert!(DefenseConfig::KINDS.contains(&"example-curriculum"));
        let defense = exp.defense.clone().unwrap();
        let splits = exp.data.load(0).unwrap();
        let dev = burn::tensor::Device::default().autodiff();
        let b = crate::data::loader::load_batch(&splits.train, &(0..16).collect::<Vec<_>>(), None).unwrap();
        let x = crate::eval::batch_tensor(&b, &dev);
        let mut trainer = Trainer::new(&exp, [1, 28, 28], &dev).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        let mut means = vec![];
        for _ in 0..3 {
            let (t, _, _) = trainer
                .step(&exp, x.clone(), &b.labels, &b.positions, &mut rng)
                .unwrap();
            trainer = t;
            means.push(trainer.defense_memory.get::<RunningLoss>().unwrap().mean);
        }
        // Each step's adversarial loss comes back with its own loss and moves the mean.
        assert!(means[0] > 0.0 && means.windows(2).all(|w| w[0] != w[1]), "{means:?}");
        // The checkpoint keeps it, and a fresh trainer (a resumed run) takes it back.
        trainer.settle_defense_state().unwrap();
        let json = serde_json::to_value(&trainer.defense_state).unwrap();
        assert_eq!(json["mean"].as_f64().unwrap() as f32, means[2]);
        let saved: DefenseState = serde_json::from_value(json).unwrap();
        let mut resumed = Trainer::new(&exp, [1, 28, 28], &dev).unwrap();
        resumed.restore_defense_state(&saved).unwrap();
        assert_eq!(resumed.defense_memory.get::<RunningLoss>().unwrap().mean, means[2]);
        // The radius follows the mean: none at 0, at most eps at ≥ 1.
        let x = x.without_autodiff();
        let mut moved = |mean: f32| {
            let state = DefenseState::default().remembering("mean", mean);
            let net = crate::attack::oracle::Net::new(&trainer.net, 0);
            let p = crate::defense::perturb(&defense, &exp.loss, &[&net], &x, &b.labels, &state, &mut rng).unwrap();
            let d: Vec<f32> =
                crate::host::read(&(p.adversarial - p.original).abs().flatten::<1>(0, 3).unsqueeze_dim(0)).unwrap();
            d.into_iter().fold(0f32, f32::max)
        };
        assert_eq!(moved(0.0), 0.0);
        let full = moved(1.5);
        assert!(full > 0.0 && full <= 0.1 + 1e-6, "{full}");
    }
}
