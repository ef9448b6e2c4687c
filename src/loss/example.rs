//! The worked example of a loss (issue 39): this file and one line of the registry in
//! `loss/mod.rs` (`"example-centroid"`, under `#[cfg(test)]`) make `[loss] kind =
//! "example-centroid"` a loss `rdml train` trains with and every defense that asks no tuple loss
//! defends. The batch-centroid loss: each embedding's squared Euclidean distance to the mean of
//! its class in the batch, averaged, `(1/n) Σ_i ‖e_i − c_{y_i}‖²`, plus `weight` times the
//! negated mean squared distance between the class centroids (so classes do not collapse
//! together).

use super::distance::Distance;
use super::unit::{Batch, Loss, LossOutput, non_negative};
use anyhow::Result;
use burn::tensor::{Tensor, TensorData};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Centroid {
    #[serde(default)]
    pub weight: f32,
}

impl Loss for Centroid {
    fn distance(&self) -> Distance {
        Distance::Euclidean
    }

    fn validate(&self) -> Result<()> {
        non_negative(self.weight, "weight")
    }

    fn compute(&self, batch: &Batch, _rng: &mut ChaCha8Rng) -> Result<LossOutput> {
        let n = batch.labels.len();
        let mut classes: Vec<u32> = batch.labels.to_vec();
        classes.sort_unstable();
        classes.dedup();
        // Row c of `mean` averages the batch rows of class c: centroids = mean · emb.
        let mut mean = vec![0f32; classes.len() * n];
        for (c, &y) in classes.iter().enumerate() {
            let of: Vec<usize> = (0..n).filter(|&i| batch.labels[i] == y).collect();
            for &i in &of {
                mean[c * n + i] = 1.0 / of.len() as f32;
            }
        }
        let device = batch.emb.device();
        let mean = Tensor::<2>::from_data(TensorData::new(mean, [classes.len(), n]), &device);
        let centroids = mean.clone().matmul(batch.emb.clone());
        let own: Vec<i64> = batch
            .labels
            .iter()
            .map(|y| classes.binary_search(y).unwrap_or(0) as i64)
            .collect();
        let own = Tensor::<1, burn::tensor::Int>::from_data(TensorData::new(own, [n]), &device);
        let spread = (batch.emb.clone() - centroids.clone().select(0, own))
            .powf_scalar(2.0)
            .sum_dim(1)
            .mean();
        let k = classes.len();
        let apart = Distance::Euclidean.cross(
            centroids.clone(),
            &centroids,
            &centroids.clone().powf_scalar(2.0).sum_dim(1).transpose(),
        );
        let apart = apart
            .powf_scalar(2.0)
            .sum()
            .div_scalar((k * k.saturating_sub(1)).max(1) as f64);
        Ok(LossOutput {
            loss: spread - apart.mul_scalar(self.weight),
            triplets: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::{LossConfig, LossParams};
    use rand::SeedableRng;

    #[test]
    fn a_loss_is_its_file_and_one_registry_line() {
        let cfg: LossConfig = toml::from_str("kind = \"example-centroid\"\nweight = 0.5").unwrap();
        assert!(LossConfig::KINDS.contains(&"example-centroid"));
        let dev = crate::default_device();
        // Class 0 at (0,0) and (2,0): centroid (1,0), spread 1 each. Class 1 at (1,3) alone.
        // Centroids (1,0) and (1,3), 3 apart: squared 9 for each of the 2 ordered pairs, mean 9.
        let emb = Tensor::<2>::from_data(TensorData::new(vec![0f32, 0., 2., 0., 1., 3.], [3, 2]), &dev);
        let params = LossParams::new(&cfg, &dev);
        let rng = &mut ChaCha8Rng::seed_from_u64(0);
        let out = crate::loss::compute(&cfg, emb, &[0, 0, 1], &params, rng).unwrap();
        let v = out.loss.into_scalar::<f32>();
        assert!((v - (2.0 / 3.0 - 0.5 * 9.0)).abs() < 1e-4, "{v}");
        // A run trains with it.
        let exp = crate::config::Experiment::load(
            "quickstart",
            &[
                "loss={kind=\"example-centroid\",weight=0.1}".into(),
                "model.l2_normalize=false".into(),
            ],
        )
        .unwrap();
        assert_eq!(exp.loss.name(), "example-centroid");
        let splits = exp.data.load(0).unwrap();
        let b = crate::data::loader::load_batch(&splits.train, &(0..16).collect::<Vec<_>>(), None).unwrap();
        let ad = burn::tensor::Device::default().autodiff();
        let trainer = crate::train::Trainer::new(&exp, [1, 28, 28], &ad).unwrap();
        let x = crate::eval::batch_tensor(&b, &ad);
        let (_, first, _) = trainer.step(&exp, x, &b.labels, &b.positions, rng).unwrap();
        assert!(first.is_finite(), "{first}");
        assert!(
            toml::from_str::<LossConfig>("kind = \"example-centroid\"\nweight = -1")
                .is_ok_and(|c| c.validate(true).is_err())
        );
    }
}
