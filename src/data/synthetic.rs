//! The two-Gaussian data set of the positive-perturbation paper (Appendix E, Eq. 20): classes
//! "a" and "b" drawn from N(0.25·1, σ²I) and N(0.75·1, σ²I) in `k = c·h·w` dimensions, σ = 0.025,
//! 508 train and 516 test points by default.

use super::dataset::Dataset;
use super::request::DataRequest;
pub use super::request::SyntheticConfig;
use super::set::{EvalSet, ImageSet, Source, Splits};
use anyhow::Result;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use std::sync::Arc;

fn draw(n: usize, cfg: &SyntheticConfig, rng: &mut ChaCha8Rng) -> Result<(Vec<f32>, Vec<u32>)> {
    let total = crate::read::declared_len(&cfg.shape).and_then(|k| k.checked_mul(n).map(|t| (k, t)));
    let Some((k, total)) = total.filter(|&(_, t)| t <= 1 << 32) else {
        anyhow::bail!(
            "data.synthetic.shape {:?}: {n} images of this shape do not fit in memory",
            cfg.shape
        );
    };
    let noise = Normal::new(0.0, cfg.sigma)?;
    let mut data = Vec::with_capacity(total);
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

/// Two Gaussian clouds (positive-perturbation paper, Appendix E): `data.synthetic`.
pub struct Synthetic;

impl Dataset for Synthetic {
    fn load(&self, r: &DataRequest) -> Result<Splits> {
        load(r.synthetic, r.seed)
    }
}
