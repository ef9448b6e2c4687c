//! How an attack's images are moved. The default is white-box: the attack's own optimiser (PGD,
//! or C&W's for the attacks defined with it) on the gradient of the attacker's model. Other
//! methods ([`super::registry::METHODS`]) estimate that gradient from queries, or fit one
//! perturbation to every batch.

pub mod nes;
pub mod universal;

use super::budget::Pgd;
use super::context::Context;
use super::cw::{CwLinf, cw_linf};
use super::engine::{Model, Request};
use super::unit::{Optimiser, Plan};
use anyhow::Result;
use burn::tensor::Tensor;

/// A batch's adversarial images, and the forward passes of the model spent on them when the
/// method counts them (black-box methods).
pub struct Perturbed {
    pub images: Tensor<4>,
    pub model_queries: Option<u64>,
}

/// One batch as a method sees it: its images (`[b, c, h, w]` in [0, 1]) and its plan.
pub struct Batch {
    pub images: Tensor<4>,
    pub plan: Box<dyn Plan>,
}

pub trait Method: Send + Sync {
    /// The canonical spec, which [`super::registry::method`] parses back to this method.
    fn spec(&self) -> String;

    /// Whether it asks the model for gradients (white-box methods); black-box ones only embed.
    fn needs_gradient(&self) -> bool {
        true
    }

    /// Whether [`Method::fit`] must see every batch of a run before any is perturbed.
    fn fits_all_batches(&self) -> bool {
        false
    }

    /// What the method shares across batches (one universal perturbation `[1, c, h, w]`).
    fn fit(&self, _attacker: &Context, _batches: &[Batch], _pgd: &Pgd, _seed: u64) -> Result<Option<Tensor<4>>> {
        Ok(None)
    }

    /// Moves the images `x` of one batch against `plan`'s objective on the attacker's model.
    #[allow(clippy::too_many_arguments)]
    fn perturb(
        &self,
        attacker: &Context,
        x: &Tensor<4>,
        plan: &dyn Plan,
        optimiser: Optimiser,
        pgd: &Pgd,
        seed: u64,
        fitted: Option<&Tensor<4>>,
    ) -> Result<Perturbed>;
}

/// `[b, 1, 1, 1]` on `device`: 1 for the rows `plan` moves, 0 for those it keeps clean.
pub(crate) fn moving_rows(plan: &dyn Plan, b: usize, device: &burn::tensor::Device) -> Tensor<4> {
    let m: Vec<f32> = match plan.movable() {
        Some(m) => m.iter().map(|&t| f32::from(u8::from(t))).collect(),
        None => vec![1.0; b],
    };
    Tensor::<4>::from_data(burn::tensor::TensorData::new(m, [b, 1, 1, 1]), device)
}

/// Gradients of the attacker's model, with the attack's own optimiser.
pub struct WhiteBox;

impl Method for WhiteBox {
    fn spec(&self) -> String {
        "white-box".into()
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
        let images = match optimiser {
            Optimiser::Pgd => Request::on(Model::Oracle(attacker.model.as_ref()), plan.objective(), pgd)
                .movable(plan.movable())
                .seed(seed)
                .run(x)?,
            Optimiser::CwLinf { rounds } => {
                let cw = CwLinf {
                    eps: pgd.eps,
                    lr: pgd.step,
                    max_iterations: pgd.steps,
                    budget: rounds * pgd.steps,
                    ..CwLinf::default()
                };
                cw_linf(attacker.model.as_ref(), x, plan.movable(), plan.objective(), &cw)?
            }
        };
        Ok(Perturbed {
            images,
            model_queries: None,
        })
    }
}
