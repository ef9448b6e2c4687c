//! A universal perturbation (after Moosavi-Dezfooli et al., CVPR'17, fitted by PGD): one δ for
//! every attacked item, so that a single pattern, added to any image, does the attack's work.
//! Each step descends the attack's loss averaged over all items of the run (every batch's
//! objective, weighted by its size), projected to the ε-ball; the result is then added to each
//! image (only to the rows the attack moves) and scored like any other attack. Ranking attacks
//! have no such perturbation in robrank or the seeds; it measures how far one input-agnostic
//! pattern moves a retrieval model.

use crate::attack::budget::{Norm, Pgd};
use crate::attack::context::Context;
use crate::attack::method::{Batch, Method, Perturbed, moving_rows};
use crate::attack::spec::Params;
use crate::attack::unit::{Optimiser, Plan};
use anyhow::{Context as _, Result, ensure};
use burn::tensor::{Distribution, Tensor};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Universal;

impl Universal {
    /// `universal`.
    pub fn from_spec(_p: &mut Params) -> Result<Box<dyn Method>> {
        Ok(Box::new(Universal))
    }
}

/// `x + δ` on the moved rows, in [0, 1].
fn apply(x: &Tensor<4>, delta: Tensor<4>, mask: Tensor<4>) -> Tensor<4> {
    let [b, c, h, w] = x.dims();
    (x.clone() + delta.expand([b, c, h, w]) * mask).clamp(0.0, 1.0)
}

fn project(d: Tensor<4>, pgd: &Pgd) -> Tensor<4> {
    match pgd.norm {
        Norm::Linf => d.clamp(-pgd.eps, pgd.eps),
        Norm::L2 => {
            let n = d.clone().powi_scalar(2).sum().sqrt();
            let scale = n.clamp_min(pgd.eps).recip().mul_scalar(pgd.eps);
            d * scale.reshape([1, 1, 1, 1])
        }
    }
}

impl Method for Universal {
    fn spec(&self) -> String {
        "universal".into()
    }

    fn fits_all_batches(&self) -> bool {
        true
    }

    fn fit(&self, attacker: &Context, batches: &[Batch], pgd: &Pgd, seed: u64) -> Result<Option<Tensor<4>>> {
        let first = batches
            .first()
            .context("a universal perturbation needs at least one batch")?;
        let [_, c, h, w] = first.images.dims();
        let device = first.images.device().without_autodiff();
        let total: usize = batches.iter().map(|b| b.images.dims()[0]).sum();
        let mut delta: Tensor<4> = if pgd.random_start && pgd.eps > 0.0 {
            let e = pgd.eps as f64;
            project(
                crate::host_random(seed, [1, c, h, w], Distribution::Uniform(-e, e), &device),
                pgd,
            )
        } else {
            Tensor::<4>::zeros([1, c, h, w], &device)
        };
        for k in 0..pgd.steps {
            let mut g = Tensor::<4>::zeros([1, c, h, w], &device);
            for batch in batches {
                let b = batch.images.dims()[0];
                let mask = moving_rows(batch.plan.as_ref(), b, &batch.images.device());
                // The loss's gradient at the perturbed images through the model, then the chain
                // back to δ through `apply` in rdml's own graph.
                let x = apply(&batch.images, delta.clone(), mask.clone());
                let weight = b as f32 / total as f32;
                let loss = |emb: Tensor<2>| batch.plan.objective().loss(emb, k).mul_scalar(weight);
                let Some(gx) = attacker.model.gradient(x, &loss)?.input else {
                    continue;
                };
                let d = delta.clone().autodiff().require_grad();
                let x = apply(&batch.images.clone().autodiff(), d.clone(), mask.autodiff());
                let grads = (x * gx.autodiff()).sum().backward();
                if let Some(gd) = d.grad(&grads) {
                    g = g + gd.without_autodiff();
                }
            }
            let step = match pgd.norm {
                Norm::Linf => g.sign().mul_scalar(pgd.step),
                Norm::L2 => {
                    let n = g.clone().powi_scalar(2).sum().sqrt().clamp_min(1e-12);
                    (g / n.reshape([1, 1, 1, 1])).mul_scalar(pgd.step)
                }
            };
            delta = project(delta - step, pgd);
        }
        Ok(Some(delta))
    }

    fn perturb(
        &self,
        _attacker: &Context,
        x: &Tensor<4>,
        plan: &dyn Plan,
        optimiser: Optimiser,
        _pgd: &Pgd,
        _seed: u64,
        fitted: Option<&Tensor<4>>,
    ) -> Result<Perturbed> {
        ensure!(
            optimiser == Optimiser::Pgd,
            "a universal perturbation is fitted by PGD steps, and this attack is defined with C&W's optimiser: use NN-CW-PGD"
        );
        let delta = fitted.context("the universal perturbation was not fitted before use")?;
        let x = x.clone().without_autodiff();
        let b = x.dims()[0];
        Ok(Perturbed {
            images: apply(&x, delta.clone(), moving_rows(plan, b, &x.device())),
            model_queries: None,
        })
    }
}
