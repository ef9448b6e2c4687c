//! The attack engine: projected gradient steps on input images, shared by every attack and every
//! defense's inner maximisation. An [`Objective`] maps the embeddings of the perturbed images to a
//! loss that the engine *minimises* (robrank's convention), and may stop the loop early.
//!
//! The model runs in evaluation mode (`Module::valid`: running BN statistics, no parameter
//! gradients); only the input carries autodiff. Images live in [0, 1] and normalisation happens
//! inside the model, so ε is in pixel units.

use super::budget::{Norm, Pgd};
use super::objective::Objective;
use super::oracle::{Net, Oracle};
use crate::model::EmbeddingNet;
use anyhow::{Result, ensure};
use burn::tensor::{Bool, Device, Distribution, Int, Tensor, TensorData};
use std::cell::Cell;

/// How many steps a GPU runs between two reads of the early-stop flag.
pub const GPU_STOP_CHECK: usize = 8;

thread_local! {
    static CHECK_EVERY: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Makes this thread's attacks read their early-stop flag every `n` steps (`None`: by device,
/// as [`Request::run`] says), e.g. to count on the CPU the reads a GPU makes. Results do not change.
pub fn set_stop_check_every(n: Option<usize>) {
    CHECK_EVERY.with(|c| c.set(n));
}

/// The model a [`Request`] attacks: an rdml network (a defense's, in training or evaluation mode)
/// with the batch-norm set it infers with, or any oracle.
#[derive(Clone, Copy)]
pub enum Model<'a> {
    Net(&'a EmbeddingNet),
    Oracle(&'a dyn Oracle),
}

/// One run of the engine: the model (a network as it infers with batch-norm set `bn_set`, or an
/// oracle), the objective it minimises, the budget, the rows that may move (`None`: all) and the
/// random start's seed.
pub struct Request<'a> {
    pub model: Model<'a>,
    pub bn_set: usize,
    pub objective: &'a dyn Objective,
    pub pgd: &'a Pgd,
    pub movable: Option<&'a [bool]>,
    pub seed: u64,
}

impl<'a> Request<'a> {
    /// `objective` under `pgd` on the clean BN set, every row moving, seed 0.
    pub fn new(model: &'a EmbeddingNet, objective: &'a dyn Objective, pgd: &'a Pgd) -> Self {
        Self::on(Model::Net(model), objective, pgd)
    }

    /// `objective` under `pgd` on `model`, every row moving, seed 0.
    pub fn on(model: Model<'a>, objective: &'a dyn Objective, pgd: &'a Pgd) -> Self {
        Self {
            model,
            bn_set: 0,
            objective,
            pgd,
            movable: None,
            seed: 0,
        }
    }

    pub fn bn_set(self, bn_set: usize) -> Self {
        Self { bn_set, ..self }
    }

    pub fn movable(self, movable: Option<&'a [bool]>) -> Self {
        Self { movable, ..self }
    }

    pub fn seed(self, seed: u64) -> Self {
        Self { seed, ..self }
    }

    /// Runs the attack on `x` (`[b, c, h, w]` in [0, 1], on a plain device) and returns the
    /// adversarial images. Rows that may not move have their embeddings computed once
    /// (evaluation mode makes rows independent) and only the movable rows are forwarded at each
    /// step, while the objective still sees all `b` embeddings in order. The early-stop flag is
    /// looked at every step on the CPU, where a read costs nothing, and every
    /// [`GPU_STOP_CHECK`] steps on a GPU.
    pub fn run(&self, x: &Tensor<4>) -> Result<Tensor<4>> {
        let on_cpu = x.device().without_autodiff() == crate::default_device();
        let every = CHECK_EVERY
            .with(Cell::get)
            .unwrap_or(if on_cpu { 1 } else { GPU_STOP_CHECK });
        self.run_checking(x, every)
    }

    /// [`Request::run`], reading the objective's early-stop flag back every `check_every` steps
    /// (0: never). The images are the same for every `check_every`: steps after the stop leave
    /// them be. Nothing else is read back from the device.
    pub fn run_checking(&self, x: &Tensor<4>, check_every: usize) -> Result<Tensor<4>> {
        let (pgd, objective, movable) = (self.pgd, self.objective, self.movable);
        pgd.validate()?;
        let net;
        let target: &dyn Oracle = match self.model {
            Model::Net(m) => {
                net = Net::new(m, self.bn_set);
                &net
            }
            Model::Oracle(o) => {
                ensure!(
                    self.bn_set == 0,
                    "attack: batch-norm set {} asked of an oracle, which infers as it was given",
                    self.bn_set
                );
                o
            }
        };
        crate::attack::oracle::require_gradient(target)?;
        let device: Device = x.device().without_autodiff();
        let x0 = x.clone().without_autodiff();
        let [b, _, _, _] = x0.dims();
        if let Some(m) = movable {
            ensure!(m.len() == b, "attack: {} movable flags for {b} rows", m.len());
        }
        let index = |v: &[usize]| -> Tensor<1, Int> {
            Tensor::<1, Int>::from_data(
                TensorData::new(v.iter().map(|&i| i as i64).collect(), [v.len()]),
                &device,
            )
        };
        let (moving, fixed, inverse) = split_rows(movable, b);
        if moving.is_empty() {
            return Ok(x0);
        }
        let (inverse, restore) = (index(&inverse), !fixed.is_empty());
        let x_move0 = if restore {
            x0.clone().select(0, index(&moving))
        } else {
            x0.clone()
        };
        // Rows the objective does not read stand as zeros (nothing of them reaches the loss).
        let fixed_emb: Option<Tensor<2>> = match (restore, objective.reads_fixed_rows()) {
            (true, true) => Some(target.embed(x0.clone().select(0, index(&fixed)))?.detach()),
            _ => None,
        };
        let mut xa = random_start(&x_move0, pgd, self.seed);
        let rule = objective.stop_rule();
        let loss = |moved: Tensor<2>, k: usize| {
            let fixed_rows = match (&fixed_emb, restore) {
                (Some(f), _) => Some(f.clone().autodiff()),
                (None, true) => Some(Tensor::zeros([fixed.len(), moved.dims()[1]], &moved.device())),
                (None, false) => None,
            };
            let emb = match fixed_rows {
                Some(f) => Tensor::cat(vec![moved, f], 0).select(0, inverse.clone().autodiff()),
                None => moved,
            };
            objective.loss(emb, k)
        };
        let stops = |last: Option<&Tensor<1>>, before: Option<&Tensor<1>>| -> Result<bool> {
            match rule.and_then(|r| r.holds(last, before)) {
                Some(now) => Ok(crate::host::scalar(&now.float())? > 0.0),
                None => Ok(false),
            }
        };
        let random = (pgd.random_start && pgd.eps > 0.0).then_some(&xa);
        let held = match pgd.steps {
            0 => None,
            _ => held_steps(target, &x_move0, random, pgd, &loss, &stops)?,
        };
        if let Some(h) = held {
            xa = h;
        } else {
            xa = self.steps_here(target, xa, &x_move0, &loss, check_every)?;
        }
        Ok(if restore {
            Tensor::cat(vec![xa, x0.select(0, index(&fixed))], 0).select(0, inverse)
        } else {
            xa
        })
    }
}

impl Request<'_> {
    /// The projected steps on rdml's side (rdml's own networks, or an oracle that holds no
    /// batch): from `xa`, each step asks `target` for the gradient of `loss` at the images.
    fn steps_here(
        &self,
        target: &dyn Oracle,
        mut xa: Tensor<4>,
        x_move0: &Tensor<4>,
        loss: &dyn Fn(Tensor<2>, usize) -> Tensor<1>,
        check_every: usize,
    ) -> Result<Tensor<4>> {
        let pgd = self.pgd;
        let rule = self.objective.stop_rule();
        let (mut last, mut before): (Option<Tensor<1>>, Option<Tensor<1>>) = (None, None);
        let mut stopped: Option<Tensor<1, Bool>> = None;
        for k in 0..pgd.steps {
            if let Some(now) = rule.and_then(|r| r.holds(last.as_ref(), before.as_ref())) {
                let s = match stopped.take() {
                    Some(s) => s.bool_or(now),
                    None => now,
                };
                if check_every > 0 && k % check_every == 0 && crate::host::scalar(&s.clone().float())? > 0.0 {
                    break;
                }
                stopped = Some(s);
            }
            let grad = target.gradient(xa.clone(), &|moved| loss(moved, k))?;
            before = last.take();
            last = rule.map(|_| grad.loss);
            let Some(g) = grad.input else { break };
            let next = descend(xa.clone(), x_move0, g, pgd);
            xa = match &stopped {
                Some(s) => next.mask_where(s.clone().reshape([1, 1, 1, 1]).expand(xa.shape()), xa),
                None => next,
            };
        }
        Ok(xa)
    }
}

/// Whether the stop rule holds, given the last two steps' losses.
type StopCheck<'a> = dyn Fn(Option<&Tensor<1>>, Option<&Tensor<1>>) -> Result<bool> + 'a;

/// The steps on the model's side where `target` holds the batch ([`Oracle::held_steps`]): per
/// step rdml turns the moving rows' embeddings into `loss`'s gradient on them and says whether
/// another step follows, as [`Request::steps_here`] would stop (the stop rule read every step:
/// the images are the same for every `check_every`). `None` where `target` holds no batch.
fn held_steps(
    target: &dyn Oracle,
    x_move0: &Tensor<4>,
    start: Option<&Tensor<4>>,
    pgd: &Pgd,
    loss: &dyn Fn(Tensor<2>, usize) -> Tensor<1>,
    stops: &StopCheck,
) -> Result<Option<Tensor<4>>> {
    let (mut last, mut before): (Option<Tensor<1>>, Option<Tensor<1>>) = (None, None);
    let mut next = |e: Tensor<2>, k: usize| -> Result<Option<(Tensor<2>, bool)>> {
        let e = e.autodiff().require_grad();
        let l = loss(e.clone(), k);
        let value = l.clone().detach().without_autodiff();
        let grads = l.backward();
        before = last.take();
        last = Some(value);
        let Some(g) = e.grad(&grads) else { return Ok(None) };
        let more = k + 1 < pgd.steps && !stops(last.as_ref(), before.as_ref())?;
        Ok(Some((g.without_autodiff(), more)))
    };
    target.held_steps(x_move0, start, pgd, &mut next)
}

/// The rows of a batch of `b` that move, those that stay, and the order that puts
/// `[moving; fixed]` back into place.
fn split_rows(movable: Option<&[bool]>, b: usize) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let all_move = movable.is_none_or(|m| m.iter().all(|&t| t));
    let (moving, fixed): (Vec<usize>, Vec<usize>) = match movable {
        Some(m) if !all_move => (0..b).partition(|&i| m[i]),
        _ => ((0..b).collect(), vec![]),
    };
    let mut inverse = vec![0usize; b];
    for (pos, &row) in moving.iter().chain(&fixed).enumerate() {
        inverse[row] = pos;
    }
    (moving, fixed, inverse)
}

/// The start of a PGD run from clean images `x0`: `x0` itself, or with `pgd.random_start` a
/// uniformly random point of the box of `start_radius`·ε (FGSM-RS: the ε-box; N-FGSM: 2ε),
/// scaled into that L2 ball for L2, clamped to [0, 1].
pub fn random_start(x0: &Tensor<4>, pgd: &Pgd, seed: u64) -> Tensor<4> {
    if !(pgd.random_start && pgd.eps > 0.0) {
        return x0.clone();
    }
    let radius = pgd.eps * pgd.start_radius;
    let r = radius as f64;
    let noise: Tensor<4> = crate::host_random(seed, x0.shape(), Distribution::Uniform(-r, r), &x0.device());
    let noise = match pgd.norm {
        Norm::Linf => noise,
        Norm::L2 => project_l2(noise, radius),
    };
    (x0.clone() + noise).clamp(0.0, 1.0)
}

/// One projected step down the (true or estimated) gradient `g` of the loss at `xa`: the sign
/// step for L∞, the normalised step for L2, then back into the ε-ball around `x0` (unless
/// `pgd.project` is off: N-FGSM) and [0, 1].
pub fn descend(xa: Tensor<4>, x0: &Tensor<4>, g: Tensor<4>, pgd: &Pgd) -> Tensor<4> {
    let delta = match pgd.norm {
        Norm::Linf => g.sign().mul_scalar(pgd.step),
        Norm::L2 => {
            let n = g.clone().powi_scalar(2).sum_dims(&[1, 2, 3]).sqrt().clamp_min(1e-12);
            (g / n).mul_scalar(pgd.step)
        }
    };
    let xa = xa - delta;
    if !pgd.project {
        return xa.clamp(0.0, 1.0);
    }
    let d = xa - x0.clone();
    let d = match pgd.norm {
        Norm::Linf => d.clamp(-pgd.eps, pgd.eps),
        Norm::L2 => project_l2(d, pgd.eps),
    };
    (x0.clone() + d).clamp(0.0, 1.0)
}

/// Scales each row of `d` down to L2 norm ≤ ε.
fn project_l2(d: Tensor<4>, eps: f32) -> Tensor<4> {
    let n = d.clone().powi_scalar(2).sum_dims(&[1, 2, 3]).sqrt();
    let scale = n.clone().clamp_min(eps).recip().mul_scalar(eps);
    d * scale
}
