//! Carlini & Wagner's L∞ attack (Carlini & Wagner 2017, Sec. V-C; the authors' `li_attack.py`,
//! which the positive-perturbation paper used for its Tables 4 and 7), batched over rows.
//!
//! Per row: images in tanh space `x = (tanh w + 1)/2`; minimise
//! `c·f(x) + Σ_pixels [|x − x₀| − τ]_+` with Adam for up to `max_iterations` steps, where `f` is the
//! objective's per-row margin (zero once the row is adversarial). On success (checked every
//! `check_every` steps on the image projected to the threat model's ε-ball: adversarial and every
//! pixel within τ), the round's result
//! becomes the row's answer, `τ ← 0.9·min(τ, ‖δ‖∞)` and a new round starts from it; on failure `c`
//! doubles and the round restarts from the last answer. A row ends when `τ < 1/256`, `c` exceeds
//! `largest_const`, or it has used `budget` steps; a row that never succeeds keeps its clean image
//! (the attack failed). `τ` starts at ε: the ε-ball is the threat model, so larger perturbations
//! would be projected away anyway (Carlini's code starts at τ = 1 with no ε).
//!
//! Rows are independent: each has its own τ, c, Adam moments and step count, so one forward pass
//! per step serves the whole batch.

use super::objective::Objective;
use super::oracle::{Oracle, require_gradient};
use anyhow::{Context as _, Result, ensure};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor, TensorData};

/// The attack's constants; `Default` gives `li_attack.py`'s, with 50 steps per round (the
/// positive-perturbation paper's limit) and at most 10 rounds' worth of steps per row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CwLinf {
    /// The threat model's L∞ radius (pixel units) and the first τ.
    pub eps: f32,
    /// Adam's learning rate in tanh space.
    pub lr: f32,
    /// Steps per (τ, c) round.
    pub max_iterations: usize,
    pub check_every: usize,
    pub initial_const: f32,
    pub largest_const: f32,
    pub const_factor: f32,
    /// τ's shrink factor after a success.
    pub decrease_factor: f32,
    /// Halve c after each success.
    pub reduce_const: bool,
    /// Total steps a row may use over all rounds.
    pub budget: usize,
}

impl Default for CwLinf {
    fn default() -> Self {
        Self {
            eps: 0.01,
            lr: 5e-3,
            max_iterations: 50,
            check_every: 10,
            initial_const: 1e-5,
            largest_const: 20.0,
            const_factor: 2.0,
            decrease_factor: 0.9,
            reduce_const: false,
            budget: 500,
        }
    }
}

impl CwLinf {
    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.eps >= 0.0 && self.eps.is_finite(),
            "C&W: eps must be ≥ 0, got {}",
            self.eps
        );
        ensure!(
            self.lr > 0.0 && self.lr.is_finite(),
            "C&W: learning rate must be > 0, got {}",
            self.lr
        );
        ensure!(self.max_iterations >= 1, "C&W: steps per round must be ≥ 1");
        ensure!(self.check_every >= 1, "C&W: check_every must be ≥ 1");
        ensure!(
            self.initial_const > 0.0 && self.largest_const >= self.initial_const && self.const_factor > 1.0,
            "C&W: need 0 < initial_const ≤ largest_const and const_factor > 1"
        );
        ensure!(
            self.decrease_factor > 0.0 && self.decrease_factor < 1.0,
            "C&W: decrease_factor must lie in (0, 1)"
        );
        Ok(())
    }
}

/// What one row is doing.
#[derive(Debug, Clone, Copy)]
struct Row {
    active: bool,
    tau: f32,
    c: f32,
    /// Steps in the current round (Adam's t).
    t: usize,
    used: usize,
}

/// Runs the attack on `x` (`[b, c, h, w]` in [0, 1]); rows with `active[i] == false` are left
/// clean. The objective must give per-row margins ([`Objective::per_row`]).
pub fn cw_linf(
    model: &dyn Oracle,
    x: &Tensor<4>,
    active: Option<&[bool]>,
    objective: &dyn Objective,
    cfg: &CwLinf,
) -> Result<Tensor<4>> {
    let x0 = x.clone().without_autodiff();
    if cfg.eps == 0.0 {
        return Ok(x0);
    }
    cfg.validate()?;
    require_gradient(model)?;
    let device: Device = x.device().without_autodiff();
    let [b, ch, h, w] = x0.dims();
    let mut rows = initial_rows(active, b, cfg)?;
    let atanh = |img: Tensor<4>| {
        let y = img.mul_scalar(2.0).sub_scalar(1.0).mul_scalar(0.999_999);
        // atanh(y) = ½ ln((1 + y)/(1 − y))
        (y.clone().add_scalar(1.0) / y.neg().add_scalar(1.0))
            .log()
            .mul_scalar(0.5)
    };
    // One value per row as a `[b, 1, 1, 1]` column that broadcasts over the image.
    let column = |v: Vec<f32>| Tensor::<4>::from_data(TensorData::new(v, [b, 1, 1, 1]), &device);
    let per_row = |rows: &[Row], f: &dyn Fn(&Row) -> f32| column(rows.iter().map(f).collect());
    let flags = |f: &[bool]| column(f.iter().map(|&s| f32::from(u8::from(s))).collect());
    let margins_of = |emb: Tensor<2>| {
        objective
            .per_row(emb)
            .context("C&W needs an objective with per-row margins")
    };
    let (beta1, beta2) = (0.9f32, 0.999f32);
    // The last success of each row (its clean image until then): the answer, and where every new
    // round starts.
    let mut best = x0.clone();
    let mut wt = atanh(x0.clone());
    let mut m = Tensor::<4>::zeros([b, ch, h, w], &device);
    let mut v = Tensor::<4>::zeros([b, ch, h, w], &device);
    while rows.iter().any(|r| r.active) {
        // One Adam step for every active row.
        let live = per_row(&rows, &|r| f32::from(u8::from(r.active)));
        let tau = per_row(&rows, &|r| r.tau);
        let cst = per_row(&rows, &|r| r.c);
        let Some(g) = tanh_space_gradient(model, objective, &wt, &x0, (&cst, &live, &tau))? else {
            break;
        };
        let g = g.without_autodiff() * live.clone();
        for r in rows.iter_mut().filter(|r| r.active) {
            r.t += 1;
            r.used += 1;
        }
        m = m.mul_scalar(beta1) + g.clone().mul_scalar(1.0 - beta1);
        v = v.mul_scalar(beta2) + g.powi_scalar(2).mul_scalar(1.0 - beta2);
        let c1 = per_row(&rows, &|r| 1.0 - beta1.powi(r.t.max(1) as i32));
        let c2 = per_row(&rows, &|r| 1.0 - beta2.powi(r.t.max(1) as i32));
        let update = (m.clone() / c1) / ((v.clone() / c2).sqrt().add_scalar(1e-8));
        wt = wt - update.mul_scalar(cfg.lr) * live;

        // Rows at a check point: is the projected image adversarial?
        let due: Vec<bool> = rows
            .iter()
            .map(|r| r.active && (r.t % cfg.check_every == 0 || r.t >= cfg.max_iterations || r.used >= cfg.budget))
            .collect();
        if !due.iter().any(|&d| d) {
            continue;
        }
        let xc = wt.clone().tanh().add_scalar(1.0).mul_scalar(0.5);
        let proj = (x0.clone() + (xc - x0.clone()).clamp(-cfg.eps, cfg.eps)).clamp(0.0, 1.0);
        let margins = crate::host::read1(&margins_of(model.embed(proj.clone())?)?)?;
        let linf = crate::host::read1(&(proj.clone() - x0.clone()).abs().max_dims(&[1, 2, 3]).reshape([b]))?;
        let (success, restart) = judge(&mut rows, &due, &margins, &linf, cfg);
        if success.iter().any(|&s| s) {
            let s = flags(&success);
            best = best * s.clone().neg().add_scalar(1.0) + proj * s;
        }
        if restart.iter().any(|&s| s) {
            let r = flags(&restart);
            let keep = r.clone().neg().add_scalar(1.0);
            wt = wt * keep.clone() + atanh(best.clone()) * r;
            m = m * keep.clone();
            v = v * keep;
        }
    }
    Ok(best)
}

/// The gradient in tanh space `w` of `Σ_rows live·(c·margin + Σ_pixels [|x − x₀| − τ]_+)`: the
/// margin's through the model (its gradient at the image), then the chain through tanh and the
/// excess term (which does not involve the model) in rdml's own graph; `None` where the loss
/// does not reach the images.
fn tanh_space_gradient(
    model: &dyn Oracle,
    objective: &dyn Objective,
    wt: &Tensor<4>,
    x0: &Tensor<4>,
    (cst, live, tau): (&Tensor<4>, &Tensor<4>, &Tensor<4>),
) -> Result<Option<Tensor<4>>> {
    let b = wt.dims()[0];
    let weighted = (cst.clone() * live.clone()).reshape([b]);
    let no_margins = std::cell::Cell::new(false);
    let margin_loss = |emb: Tensor<2>| match objective.per_row(emb.clone()) {
        Some(m) => (m * weighted.clone().autodiff()).sum(),
        None => {
            no_margins.set(true);
            emb.sum().mul_scalar(0.0)
        }
    };
    let image = wt.clone().tanh().add_scalar(1.0).mul_scalar(0.5);
    let g_image = model.gradient(image, &margin_loss)?.input;
    ensure!(!no_margins.get(), "C&W needs an objective with per-row margins");
    let Some(g_image) = g_image else { return Ok(None) };
    let wi = wt.clone().autodiff().require_grad();
    let xi = wi.clone().tanh().add_scalar(1.0).mul_scalar(0.5);
    let excess = relu((xi.clone() - x0.clone().autodiff()).abs() - tau.clone().autodiff()).sum_dims(&[1, 2, 3]);
    let loss = (xi * g_image.autodiff()).sum() + (excess * live.clone().autodiff()).sum();
    let grads = loss.backward();
    Ok(wi.grad(&grads))
}

/// Every row's state before its first round: τ at the budget, the initial constant.
fn initial_rows(active: Option<&[bool]>, b: usize, cfg: &CwLinf) -> Result<Vec<Row>> {
    if let Some(a) = active {
        ensure!(a.len() == b, "C&W: {} active flags for {b} rows", a.len());
    }
    Ok((0..b)
        .map(|i| Row {
            active: active.is_none_or(|a| a[i]),
            tau: cfg.eps,
            c: cfg.initial_const,
            t: 0,
            used: 0,
        })
        .collect())
}

/// Judges the rows at a check point from their projected images' margins and L∞ sizes: a row
/// succeeds (its τ shrinks, its round restarts from the new best) or, at the end of its round,
/// restarts with a larger constant; it stops once τ, the constant or the budget runs out.
/// Returns which rows succeeded and which restart.
fn judge(rows: &mut [Row], due: &[bool], margins: &[f32], linf: &[f32], cfg: &CwLinf) -> (Vec<bool>, Vec<bool>) {
    let b = rows.len();
    let mut success = vec![false; b];
    let mut restart = vec![false; b];
    for i in (0..b).filter(|&i| due[i]) {
        let r = &mut rows[i];
        // li_attack.py accepts a round only when its whole loss is ~0: adversarial, and the
        // penalty gone, i.e. every pixel within τ.
        if margins[i] <= 0.0 && linf[i] <= r.tau + 1e-6 {
            success[i] = true;
            restart[i] = true;
            r.tau = r.tau.min(linf[i]) * cfg.decrease_factor;
            if cfg.reduce_const {
                r.c /= 2.0;
            }
            r.t = 0;
            if r.tau < 1.0 / 256.0 {
                r.active = false;
            }
        } else if r.t >= cfg.max_iterations {
            restart[i] = true;
            r.c *= cfg.const_factor;
            r.t = 0;
            if r.c > cfg.largest_const {
                r.active = false;
            }
        }
        if r.used >= cfg.budget {
            r.active = false;
        }
    }
    (success, restart)
}
