//! The `[loss]` table of the DRO framework (seed 002): which variant and base loss, and the
//! options each variant reads; [`DroConfig::resolve`] applies the paper's defaults and names any
//! option the variant does not use. The computation is in [`super::dro`].

use super::distance::Distance;
use super::dro::{Dro, DroVariant, PairLoss};
use super::unit::{Batch, Loss, LossOutput};
use anyhow::{Result, ensure};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// DRO's parameters (`[loss] kind = "dro"`). Options a variant does not use must be left out
/// (validation says which).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DroConfig {
    pub variant: DroVariant,
    #[serde(default)]
    pub base: PairLoss,
    /// TopK / TopK-PN: number of pairs.
    #[serde(default)]
    pub k: Option<usize>,
    /// KL, HAP2S_E: γ; KL-G and MS: both γ⁺ and γ⁻ unless given apart.
    #[serde(default)]
    pub gamma: Option<f32>,
    #[serde(default)]
    pub gamma_pos: Option<f32>,
    #[serde(default)]
    pub gamma_neg: Option<f32>,
    /// m of the margin base loss (and of HAP2S_E); unused by `ls`, which has λ only.
    #[serde(default = "margin")]
    pub margin: f32,
    /// λ, the similarity threshold of both base losses.
    #[serde(default = "lambda")]
    pub lambda: f32,
    /// α, β of the binomial base loss (defaults 2 and 50).
    #[serde(default)]
    pub alpha: Option<f32>,
    #[serde(default)]
    pub beta: Option<f32>,
    /// KL: sample this many pairs from p* when the batch has more.
    #[serde(default)]
    pub sample_pairs: Option<usize>,
    /// MS: multi-similarity's mining slack ε (default 0.1).
    #[serde(default)]
    pub epsilon: Option<f32>,
    #[serde(default)]
    pub keep_zero_loss: bool,
}

fn margin() -> f32 {
    0.2
}
fn lambda() -> f32 {
    0.5
}

impl Loss for DroConfig {
    fn distance(&self) -> Distance {
        Distance::Cosine
    }

    fn validate(&self) -> Result<()> {
        self.resolve().map(|_| ())
    }

    fn validate_batch(&self, b: usize) -> Result<()> {
        if let Some(k) = self.k {
            anyhow::ensure!(
                k <= b * (b - 1),
                "loss.k = {k} exceeds the {} ordered pairs of a batch of {b}",
                b * (b - 1)
            );
        }
        Ok(())
    }

    fn compute(&self, batch: &Batch, rng: &mut ChaCha8Rng) -> Result<LossOutput> {
        let emb = batch.emb.clone();
        let loss = self
            .resolve()?
            .loss(emb.clone().matmul(emb.transpose()), batch.labels, rng)?;
        Ok(LossOutput { loss, triplets: None })
    }
}

impl DroConfig {
    /// The resolved DRO parameters; an error names an option the variant does not use or a bad value.
    pub fn resolve(&self) -> Result<Dro> {
        let DroConfig {
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
        } = *self;
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
