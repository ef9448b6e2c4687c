//! Black-box attacks by natural evolution strategies (NES; Ilyas et al., ICML'18), as robrank's
//! `--nes`: the gradient PGD steps on is estimated from the attacked model's embeddings alone,
//! by antithetic Gaussian sampling around each image, `ĝ = Σ_j [ℓ(x + σu_j) − ℓ(x − σu_j)] u_j /
//! (σ P)` over a population of P (robrank: 100, σ = ε/0.5). Each row's loss is its own term of
//! the attack's objective ([`Objective::row_losses`]), so rows are estimated independently. The
//! forward passes spent per query are reported.

use crate::attack::budget::Pgd;
use crate::attack::context::Context;
use crate::attack::engine::{descend, random_start};
use crate::attack::method::{Method, Perturbed, moving_rows};
use crate::attack::objective::Objective;
use crate::attack::oracle::Oracle;
use crate::attack::spec::Params;
use crate::attack::unit::{Optimiser, Plan};
use anyhow::{Context as _, Result, ensure};
use burn::tensor::{Distribution, Tensor};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Nes {
    /// Samples per gradient estimate (antithetic pairs count twice).
    pub population: usize,
    /// Sampling radius; `None`: robrank's ε/0.5.
    pub sigma: Option<f32>,
}

impl Nes {
    /// `nes[:pop=P][:sigma=σ]`.
    pub fn from_spec(p: &mut Params) -> Result<Box<dyn Method>> {
        let population = p
            .number("pop", "an even population ≥ 2", |n: &usize| {
                *n >= 2 && n.is_multiple_of(2)
            })?
            .unwrap_or(100);
        let sigma = p.number("sigma", "a radius > 0", |s: &f32| s.is_finite() && *s > 0.0)?;
        Ok(Box::new(Nes { population, sigma }))
    }
}

impl Method for Nes {
    fn spec(&self) -> String {
        match self.sigma {
            Some(s) => format!("nes:pop={}:sigma={s}", self.population),
            None => format!("nes:pop={}", self.population),
        }
    }

    fn needs_gradient(&self) -> bool {
        false
    }

    fn perturb(
        &self,
        attacker: &Context,
        x: &Tensor<4>,
        plan: &dyn Plan,
        optimiser: Optimiser,
        pgd: &Pgd,
        seed: u64,
        _fitted: Option<&Tensor<4>>,
    ) -> Result<Perturbed> {
        ensure!(
            optimiser == Optimiser::Pgd,
            "NES estimates the gradient of PGD steps, and this attack is defined with C&W's optimiser: use NN-CW-PGD"
        );
        let sigma = self.sigma.unwrap_or(pgd.eps / 0.5);
        let x0 = x.clone().without_autodiff();
        let [b, _, _, _] = x0.dims();
        let mask = moving_rows(plan, b, &x0.device());
        let moved = plan.movable().map_or(b, |m| m.iter().filter(|&&t| t).count()) as u64;
        let mut xa = random_start(&x0, pgd, seed);
        for k in 0..pgd.steps {
            let g = estimate_gradient(
                attacker.model.as_ref(),
                &xa,
                plan.objective(),
                self.population,
                sigma,
                seed.wrapping_mul(0x9E37_79B9).wrapping_add(k as u64),
            )?;
            let stepped = descend(xa.clone(), &x0, g, pgd);
            xa = stepped * mask.clone() + xa * mask.clone().neg().add_scalar(1.0);
        }
        Ok(Perturbed {
            images: xa,
            model_queries: Some(moved * (pgd.steps * self.population) as u64),
        })
    }
}

/// NES's estimate of the gradient of each row's loss at `x` `[b, c, h, w]`, from `population`
/// forward passes of `model` (no gradient of the model is used).
pub fn estimate_gradient(
    model: &dyn Oracle,
    x: &Tensor<4>,
    objective: &dyn Objective,
    population: usize,
    sigma: f32,
    seed: u64,
) -> Result<Tensor<4>> {
    let [b, _, _, _] = x.dims();
    let losses = |x: Tensor<4>| -> Result<Tensor<4>> {
        Ok(objective
            .row_losses(model.embed(x)?)
            .context("NES needs each row's loss, and this attack's objective does not split by row")?
            .reshape([b, 1, 1, 1]))
    };
    let pairs = (population / 2).max(1);
    let mut g = x.zeros_like();
    for j in 0..pairs {
        let u: Tensor<4> = crate::host_random(
            seed.wrapping_mul(1000).wrapping_add(j as u64),
            x.shape(),
            Distribution::Normal(0.0, 1.0),
            &x.device(),
        );
        let du = u.clone().mul_scalar(sigma);
        let diff = losses(x.clone() + du.clone())? - losses(x.clone() - du)?;
        g = g + u * diff;
    }
    Ok(g.div_scalar(sigma * (2 * pairs) as f32))
}
