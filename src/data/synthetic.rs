//! The two-Gaussian data set of the positive-perturbation paper (Appendix E, Eq. 20): classes
//! "a" and "b" drawn from N(0.25·1, σ²I) and N(0.75·1, σ²I) in `k = c·h·w` dimensions, σ = 0.025,
//! 508 train and 516 test points by default.

use super::set::{EvalSet, ImageSet, Source, Splits};
use anyhow::{Result, ensure};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticConfig {
    /// Item shape `[c, h, w]`; the paper uses 3×224×224.
    pub shape: [usize; 3],
    pub sigma: f64,
    pub train: usize,
    pub test: usize,
}

impl Default for SyntheticConfig {
    fn default() -> Self {
        Self {
            shape: [3, 224, 224],
            sigma: 0.025,
            train: 508,
            test: 516,
        }
    }
}

impl SyntheticConfig {
    pub fn validate(&self) -> Result<()> {
        const MAX_BYTES: u64 = 16 << 30;
        ensure!(
            self.shape.iter().all(|&d| d > 0),
            "data.synthetic.shape entries must be > 0"
        );
        ensure!(
            self.sigma > 0.0 && self.sigma.is_finite(),
            "data.synthetic.sigma must be > 0"
        );
        ensure!(
            self.train >= 4 && self.test >= 4,
            "data.synthetic.train and .test must be ≥ 4"
        );
        // The points are held in memory as f32: a bound that fails here, not in an allocation
        // that aborts the process (a shape or a count with extra zeros).
        let per: u64 = self.shape.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64));
        let bytes = per
            .saturating_mul(self.train as u64 + self.test as u64)
            .saturating_mul(4);
        ensure!(
            bytes <= MAX_BYTES,
            "data.synthetic: {} train + {} test points of shape {:?} take {} GiB, beyond rdml's limit of {} GiB",
            self.train,
            self.test,
            self.shape,
            bytes >> 30,
            MAX_BYTES >> 30
        );
        Ok(())
    }
}

fn draw(n: usize, cfg: &SyntheticConfig, rng: &mut ChaCha8Rng) -> Result<(Vec<f32>, Vec<u32>)> {
    let k: usize = cfg.shape.iter().product();
    let noise = Normal::new(0.0, cfg.sigma)?;
    let mut data = Vec::with_capacity(n * k);
    let mut labels = Vec::with_capacity(n);
    for i in 0..n {
        // Alternate classes so both halves are balanced (n/2 each, the extra one to "a").
        let class = (i % 2) as u32;
        let mu = if class == 0 { 0.25 } else { 0.75 };
        data.extend((0..k).map(|_| (mu + noise.sample(rng)) as f32));
        labels.push(class);
    }
    Ok((data, labels))
}

pub fn load(cfg: &SyntheticConfig, seed: u64) -> Result<Splits> {
    cfg.validate()?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5EED_0E00);
    let [c, h, w] = cfg.shape;
    let mk = |name: &str, (data, labels): (Vec<f32>, Vec<u32>)| {
        let n = labels.len();
        ImageSet::new(
            name,
            Arc::new(Source::Floats {
                data,
                channels: c,
                height: h,
                width: w,
            }),
            (0..n).collect(),
            labels,
        )
    };
    let train = mk("synthetic/train", draw(cfg.train, cfg, &mut rng)?);
    let test = mk("synthetic/test", draw(cfg.test, cfg, &mut rng)?);
    Ok(Splits {
        train,
        test: EvalSet {
            query: test,
            gallery: None,
        },
    })
}
