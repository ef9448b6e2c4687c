//! The DRO framework's config (seed 002): [`Dro`], each variant with the parameters it reads, and
//! its `[loss]` table as written ([`DroTable`]: `variant` and `base` by name and every option any
//! variant reads), read into a `Dro` once (the paper's defaults applied, an option the variant
//! does not use named) and written back from it. The computation is in [`super::dro`].

use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};

/// One DRO loss: its variant with the parameters that variant reads, validated once when its
/// `[loss]` table is read ([`DroTable`]); computed in [`super::dro`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "DroTable", into = "DroTable")]
pub enum Dro {
    /// `p* = argmax_{p∈U} Σ p_ij l_ij` over the pair losses of `base` (Eq. 1, Sec. 3.2).
    Weighted {
        set: UncertaintySet,
        base: PairLoss,
        /// Keep pairs with zero loss in the support of `p` (the paper removes them).
        keep_zero_loss: bool,
    },
    /// Eq. 22–24: Eq. 6 plus one zero-loss pseudo pair per group, on multi-similarity-mined
    /// pairs (mining slack `epsilon`), with `c± = λ ± m`.
    Ms {
        gamma_pos: f32,
        gamma_neg: f32,
        epsilon: f32,
        margin: f32,
        lambda: f32,
    },
    /// HAP2S with exponential weights (Yu et al. 2018; the paper's Sec. 6.2, Eq. 29–31).
    Hap2sE {
        gamma_pos: f32,
        gamma_neg: f32,
        margin: f32,
    },
    /// The lifted-structure loss in the paper's similarity form (Eq. 3), the baseline of its
    /// Table 2: `Σ_i [log Σ_{j∈P_i} e^{λ − S_ij} + log Σ_{k∈N_i} e^{S_ik − λ}]_+`.
    Ls { lambda: f32 },
}

/// The uncertainty set `U` of a weighted DRO loss.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UncertaintySet {
    /// `U = {Σp = 1, 0 ≤ p ≤ 1/K}`: the mean of the K largest pair losses (Sec. 3.2).
    TopK { k: usize },
    /// The K/2 largest positive and K/2 largest negative pair losses, over K (Sec. 3.2).
    TopKPn { k: usize },
    /// KL-regularised: `p* ∝ exp(l/γ)` over all pairs (Sec. 3.2); with `sample_pairs`, that many
    /// pairs drawn from `p*` and their losses averaged, when the batch has more.
    Kl { gamma: f32, sample_pairs: Option<usize> },
    /// KL-regularised per anchor and per sign (Eq. 6): the generalised lifted-structure loss.
    KlG { gamma_pos: f32, gamma_neg: f32 },
}

/// The pairwise base loss `l_ij` on cosine similarity `S_ij`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PairLoss {
    /// `[m + y_ij(λ − S_ij)]_+` with `y = +1` for positives, `−1` for negatives.
    Margin { margin: f32, lambda: f32 },
    /// Binomial deviance: `1/α log(1 + e^{−α(S−λ)})` for positives, `1/β log(1 + e^{β(S−λ)})` for negatives.
    Binomial { alpha: f32, beta: f32, lambda: f32 },
}

/// The variants by name (`variant = "top-k"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DroVariant {
    #[serde(rename = "top-k")]
    TopK,
    #[serde(rename = "top-k-pn")]
    TopKPn,
    #[serde(rename = "kl")]
    Kl,
    #[serde(rename = "kl-g")]
    KlG,
    #[serde(rename = "ms")]
    Ms,
    #[serde(rename = "hap2s-e")]
    Hap2sE,
    #[serde(rename = "ls")]
    Ls,
}

/// The base losses by name (`base = "binomial"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BaseName {
    #[default]
    Margin,
    Binomial,
}

/// DRO's `[loss]` table (`kind = "dro"`). Options a variant does not use must be left out
/// (reading says which); `margin` and `lambda` are read by the variants and base losses that use
/// them.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DroTable {
    pub variant: DroVariant,
    #[serde(default)]
    pub base: BaseName,
    /// TopK / TopK-PN: number of pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k: Option<usize>,
    /// KL, HAP2S_E: γ; KL-G and MS: both γ⁺ and γ⁻ unless given apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gamma: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gamma_pos: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gamma_neg: Option<f32>,
    /// m of the margin base loss, MS and HAP2S_E (default 0.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub margin: Option<f32>,
    /// λ, the similarity threshold of both base losses, MS and LS (default 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lambda: Option<f32>,
    /// α, β of the binomial base loss (defaults 2 and 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta: Option<f32>,
    /// KL: sample this many pairs from p* when the batch has more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_pairs: Option<usize>,
    /// MS: multi-similarity's mining slack ε (default 0.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epsilon: Option<f32>,
    #[serde(default)]
    pub keep_zero_loss: bool,
}

impl TryFrom<DroTable> for Dro {
    type Error = anyhow::Error;

    /// The variant with its parameters; an error names an option the variant does not use or a
    /// bad value.
    fn try_from(t: DroTable) -> Result<Dro> {
        use DroVariant::*;
        t.check_used()?;
        let (k, margin, lambda) = (t.k, t.margin.unwrap_or(0.2), t.lambda.unwrap_or(0.5));
        ensure!(k != Some(0), "loss.k must be ≥ 1");
        ensure!(
            t.variant != TopKPn || k.unwrap_or(2) >= 2,
            "loss.k must be ≥ 2 for top-k-pn (K/2 pairs of each sign)"
        );
        ensure!(t.sample_pairs != Some(0), "loss.sample_pairs must be ≥ 1");
        // MS defaults to multi-similarity's α = 2, β = 50; the others to the paper's γ = 0.1.
        let (dp, dn) = if t.variant == Ms { (0.5, 0.02) } else { (0.1, 0.1) };
        let gamma_pos = t.gamma_pos.or(t.gamma).unwrap_or(dp);
        let gamma_neg = t.gamma_neg.or(t.gamma).unwrap_or(dn);
        for (v, what) in [(gamma_pos, "gamma / gamma_pos"), (gamma_neg, "gamma / gamma_neg")] {
            ensure!(v.is_finite() && v > 0.0, "loss.{what} must be > 0, got {v}");
        }
        ensure!(
            margin.is_finite() && margin >= 0.0,
            "loss.margin must be ≥ 0, got {margin}"
        );
        ensure!(lambda.is_finite(), "loss.lambda must be a number");
        let (alpha, beta) = (t.alpha.unwrap_or(2.0), t.beta.unwrap_or(50.0));
        ensure!(alpha > 0.0 && beta > 0.0, "loss.alpha and loss.beta must be > 0");
        let epsilon = t.epsilon.unwrap_or(0.1);
        ensure!(epsilon.is_finite() && epsilon >= 0.0, "loss.epsilon must be ≥ 0");
        let base = match t.base {
            BaseName::Margin => PairLoss::Margin { margin, lambda },
            BaseName::Binomial => PairLoss::Binomial { alpha, beta, lambda },
        };
        let weighted = |set| Dro::Weighted {
            set,
            base,
            keep_zero_loss: t.keep_zero_loss,
        };
        // `check_used` made k present for the top-k variants.
        let k = k.unwrap_or(1);
        Ok(match t.variant {
            TopK => weighted(UncertaintySet::TopK { k }),
            TopKPn => weighted(UncertaintySet::TopKPn { k }),
            Kl => weighted(UncertaintySet::Kl {
                gamma: gamma_pos,
                sample_pairs: t.sample_pairs,
            }),
            KlG => weighted(UncertaintySet::KlG { gamma_pos, gamma_neg }),
            Ms => Dro::Ms {
                gamma_pos,
                gamma_neg,
                epsilon,
                margin,
                lambda,
            },
            Hap2sE => Dro::Hap2sE {
                gamma_pos,
                gamma_neg,
                margin,
            },
            Ls => Dro::Ls { lambda },
        })
    }
}

impl DroTable {
    /// Refuses the options the variant does not read, and a top-k variant without its k.
    fn check_used(&self) -> Result<()> {
        use DroVariant::*;
        let variant = self.variant;
        // Only for messages: built when one is needed.
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
        unused(self.k.is_some() && !topk, "k", "top-k, top-k-pn")?;
        ensure!(
            !topk || self.k.is_some(),
            "loss.k (number of pairs) is required by variant {}",
            name()
        );
        unused(
            self.gamma.is_some() && (topk || variant == Ls),
            "gamma",
            "kl, kl-g, ms, hap2s-e",
        )?;
        let split = matches!(variant, KlG | Ms | Hap2sE);
        unused(self.gamma_pos.is_some() && !split, "gamma_pos", "kl-g, ms, hap2s-e")?;
        unused(self.gamma_neg.is_some() && !split, "gamma_neg", "kl-g, ms, hap2s-e")?;
        unused(self.sample_pairs.is_some() && variant != Kl, "sample_pairs", "kl")?;
        unused(self.epsilon.is_some() && variant != Ms, "epsilon", "ms")?;
        let binomial = self.base == BaseName::Binomial;
        unused(self.alpha.is_some() && !binomial, "alpha", "base = \"binomial\"")?;
        unused(self.beta.is_some() && !binomial, "beta", "base = \"binomial\"")?;
        ensure!(
            !binomial || matches!(variant, TopK | TopKPn | Kl | KlG),
            "loss.base = \"binomial\" is not defined for variant {} (its weights assume the margin loss)",
            name()
        );
        Ok(())
    }
}

impl From<Dro> for DroTable {
    /// The table that reads back into `d`, with only the options its variant uses.
    fn from(d: Dro) -> DroTable {
        let mut t = DroTable {
            variant: DroVariant::Ls,
            base: BaseName::Margin,
            k: None,
            gamma: None,
            gamma_pos: None,
            gamma_neg: None,
            margin: None,
            lambda: None,
            alpha: None,
            beta: None,
            sample_pairs: None,
            epsilon: None,
            keep_zero_loss: false,
        };
        let split = |t: &mut DroTable, gp, gn| (t.gamma_pos, t.gamma_neg) = (Some(gp), Some(gn));
        match d {
            Dro::Weighted {
                set,
                base,
                keep_zero_loss,
            } => {
                t.keep_zero_loss = keep_zero_loss;
                match base {
                    PairLoss::Margin { margin, lambda } => (t.margin, t.lambda) = (Some(margin), Some(lambda)),
                    PairLoss::Binomial { alpha, beta, lambda } => {
                        t.base = BaseName::Binomial;
                        (t.alpha, t.beta, t.lambda) = (Some(alpha), Some(beta), Some(lambda));
                    }
                }
                match set {
                    UncertaintySet::TopK { k } => (t.variant, t.k) = (DroVariant::TopK, Some(k)),
                    UncertaintySet::TopKPn { k } => (t.variant, t.k) = (DroVariant::TopKPn, Some(k)),
                    UncertaintySet::Kl { gamma, sample_pairs } => {
                        (t.variant, t.gamma, t.sample_pairs) = (DroVariant::Kl, Some(gamma), sample_pairs)
                    }
                    UncertaintySet::KlG { gamma_pos, gamma_neg } => {
                        t.variant = DroVariant::KlG;
                        split(&mut t, gamma_pos, gamma_neg);
                    }
                }
            }
            Dro::Ms {
                gamma_pos,
                gamma_neg,
                epsilon,
                margin,
                lambda,
            } => {
                (t.variant, t.epsilon, t.margin, t.lambda) =
                    (DroVariant::Ms, Some(epsilon), Some(margin), Some(lambda));
                split(&mut t, gamma_pos, gamma_neg);
            }
            Dro::Hap2sE {
                gamma_pos,
                gamma_neg,
                margin,
            } => {
                (t.variant, t.margin) = (DroVariant::Hap2sE, Some(margin));
                split(&mut t, gamma_pos, gamma_neg);
            }
            Dro::Ls { lambda } => t.lambda = Some(lambda),
        }
        t
    }
}
