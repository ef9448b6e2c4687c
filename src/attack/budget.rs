//! An attack's budget: the norm of its ball, ε, the step, the iterations and a random start
//! (robrank's PGD settings), validated once for every attack and defense that uses one.

use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Norm {
    Linf,
    L2,
}

impl std::str::FromStr for Norm {
    type Err = anyhow::Error;
    /// `linf` or `l2`, as `--norm` and the Python package spell them.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "linf" => Ok(Norm::Linf),
            "l2" => Ok(Norm::L2),
            _ => anyhow::bail!("norm = {s:?}: expected \"linf\" or \"l2\""),
        }
    }
}

/// A projected-gradient plan: budget, step, iterations, norm, random start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pgd {
    pub eps: f32,
    pub step: f32,
    pub steps: usize,
    #[serde(default = "linf")]
    pub norm: Norm,
    #[serde(default)]
    pub random_start: bool,
    /// The random start's box, `start_radius`·ε on each side (N-FGSM's k, de Jorge et al. 2022:
    /// noise of 2ε); 1 is the ε-box itself (FGSM-RS, Wong et al. 2020). Unread without a random
    /// start.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub start_radius: f32,
    /// Whether each step is projected back onto the ε-ball around the clean images (`false`:
    /// N-FGSM's `clip = -1`, only the pixels' [0, 1] bounds kept).
    #[serde(default = "crate::field::yes", skip_serializing_if = "crate::field::is_yes")]
    pub project: bool,
}

fn linf() -> Norm {
    Norm::Linf
}

fn one() -> f32 {
    1.0
}

fn is_one(r: &f32) -> bool {
    *r == 1.0
}

impl Pgd {
    /// FGSM: one step of size ε.
    pub fn fgsm(eps: f32) -> Self {
        Self {
            eps,
            step: eps,
            steps: 1,
            norm: Norm::Linf,
            random_start: false,
            start_radius: 1.0,
            project: true,
        }
    }
    pub fn validate(&self) -> Result<()> {
        self.validate_as("attack ")
    }

    /// Validates with the keys named as `prefix` + `eps`/`step`/`steps` (`defense.`, `attack `;
    /// `⟨`: the options as each front end names them, [`crate::field`]).
    pub fn validate_as(&self, prefix: &str) -> Result<()> {
        let key = |k: &str| match prefix {
            "⟨" => format!("⟨{k}⟩"),
            p => format!("{p}{k}"),
        };
        let (eps, step) = (key("eps"), key("step"));
        ensure!(self.eps.is_finite(), "{eps} must be a finite number, got {}", self.eps);
        ensure!(self.eps >= 0.0, "{eps} must be ≥ 0, got {}", self.eps);
        // Pixels live in [0, 1]: an L∞ radius above 1 allows every image, which is no budget
        // (and usually a radius given in 0–255 units by mistake: 8/255 is written 0.0314).
        // An option token takes its value as each front end writes it (`--eps 5`, `eps=5`); a
        // config key reads `defense.eps = 5`.
        let is = if prefix == "⟨" { " " } else { " = " };
        ensure!(
            self.norm != Norm::Linf || self.eps <= 1.0,
            "{eps}{is}{} is an L∞ radius in pixel units, which live in [0, 1]; expected ≤ 1 (8/255 is 0.0314)",
            self.eps
        );
        ensure!(
            self.step.is_finite(),
            "{step} must be a finite number, got {}",
            self.step
        );
        ensure!(self.step >= 0.0, "{step} must be ≥ 0, got {}", self.step);
        ensure!(self.steps >= 1, "{} must be ≥ 1", key("steps"));
        ensure!(
            self.start_radius.is_finite() && self.start_radius > 0.0,
            "{} must be a finite number > 0 (the random start's radius in units of ε), got {}",
            key("noise"),
            self.start_radius
        );
        Ok(())
    }
}
