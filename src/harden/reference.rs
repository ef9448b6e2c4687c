//! rdml's own trainer on one batch, for a caller to hold its own loop against: the loss and each
//! parameter's gradient of a run folder's network (a PyTorch checkpoint imported by `rdml import`,
//! say) under a `[defense]` and `[loss]` table, drawing from the stream `rdml train` draws from
//! at the epoch's start. The Python package's equivalence tests compare `rdml.Defense` and
//! `rdml.Loss` in a PyTorch loop with it.

use super::{Images, labels_of, tensor};
use crate::defense::{DefenseConfig, DefenseState};
use crate::loss::{LossConfig, LossParams};
use anyhow::Result;
use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Gradients;
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The step: the run's model, the tables, the seed of the stream, and the epoch it is.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReferenceRequest {
    pub run: PathBuf,
    #[serde(default)]
    pub defense: Option<DefenseConfig>,
    #[serde(default = "super::triplet", deserialize_with = "crate::loss::legacy::read")]
    pub loss: LossConfig,
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub epoch: usize,
    #[serde(default = "one")]
    pub epochs: usize,
}

fn one() -> usize {
    1
}

/// The step's loss and the gradient of each of the network's parameters, by rdml's path
/// (`backbone.C2f2.fc1.weight`; a linear layer's weight is `[in, out]`, PyTorch's transposed).
#[derive(Serialize)]
pub struct Reference {
    pub loss: f32,
    pub beta_grad: Option<f32>,
    pub parameters: Vec<(String, Vec<usize>)>,
    #[serde(skip)]
    pub grads: Vec<Vec<f32>>,
}

/// Runs the step on `images` on `device`.
pub fn run(r: ReferenceRequest, images: Images, device: &Device) -> Result<Reference> {
    let device = device.clone().autodiff();
    let [_, c, h, w] = images.shape;
    let (_, net) = crate::train::load_model(&r.run, [c, h, w], &device)?;
    let x = tensor(&images, &device)?;
    let labels = labels_of(&images.labels, "labels")?;
    let items: Vec<usize> = (0..labels.len()).collect();
    r.loss.validate(true)?;
    let memory = match &r.defense {
        Some(d) => {
            d.validate(&r.loss)?;
            d.unit().memory()
        }
        None => Box::new(crate::defense::memory::Nothing),
    };
    crate::ensure_input!(
        !memory.needs_training_set(),
        "defense: the reference step has no training set for its memory to embed"
    );
    let state = DefenseState {
        epoch: r.epoch,
        epochs: r.epochs,
        ..DefenseState::default()
    };
    let params = LossParams::new(&r.loss, &device);
    let mut rng = crate::data::sampler::epoch_rng(r.seed, r.epoch, 2);
    let (loss, _, _) = crate::train::defended::step_loss(
        r.defense.as_ref(),
        &r.loss,
        &net,
        &params,
        x,
        (&labels, &items),
        (&state, memory.as_ref()),
        &mut rng,
    )?;
    let value = crate::host::scalar(&loss.clone().detach().without_autodiff())?;
    let grads = loss.backward();
    let mut each = ByPath {
        grads: &grads,
        path: vec![],
        out: vec![],
    };
    net.visit(&mut each);
    let beta_grad = match &params.beta {
        Some(b) => Some(b.val().grad(&grads).map_or(Ok(0.0), |g| crate::host::scalar(&g))?),
        None => None,
    };
    let (parameters, grads) = each.out.into_iter().map(|(p, s, g)| ((p, s), g)).unzip();
    Ok(Reference {
        loss: value,
        beta_grad,
        parameters,
        grads,
    })
}

/// Each float parameter's path, shape and gradient (zeros where the loss does not reach it).
struct ByPath<'a> {
    grads: &'a Gradients,
    path: Vec<String>,
    out: Vec<(String, Vec<usize>, Vec<f32>)>,
}

impl ModuleVisitor for ByPath<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let tensor = param.val();
        let shape = tensor.dims().to_vec();
        let n: usize = shape.iter().product();
        let g = tensor
            .grad(self.grads)
            .and_then(|g| crate::host::read(&g.reshape([1, n])).ok())
            .unwrap_or_else(|| vec![0.0; n]);
        self.out.push((self.path.join("."), shape, g));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_parameter_is_named_by_its_path_with_its_gradient() {
        let dev = crate::default_device().autodiff();
        let cfg: crate::model::ModelConfig =
            toml::from_str("arch = \"c2f2\"\nembedding_dim = 4\nl2_normalize = false").unwrap();
        let net = crate::model::EmbeddingNet::new(&cfg, [1, 28, 28], &dev).unwrap();
        let x = Tensor::<4>::ones([2, 1, 28, 28], &dev);
        let grads = net.forward(x).sum().backward();
        let mut each = ByPath {
            grads: &grads,
            path: vec![],
            out: vec![],
        };
        net.visit(&mut each);
        let names: Vec<_> = each.out.iter().map(|(p, s, _)| format!("{p} {s:?}")).collect();
        let layer = |l: &str, w: &str, b: &str| {
            [
                format!("backbone.C2f2.{l}.weight {w}"),
                format!("backbone.C2f2.{l}.bias {b}"),
            ]
        };
        let want: Vec<String> = [
            layer("conv1", "[32, 1, 5, 5]", "[32]"),
            layer("conv2", "[64, 32, 5, 5]", "[64]"),
            layer("fc1", "[3136, 1024]", "[1024]"),
            layer("fc2", "[1024, 4]", "[4]"),
        ]
        .concat();
        assert_eq!(names, want);
        // d Σ e / d b of the last layer's bias: one per image of the batch.
        assert_eq!(each.out[7].2, vec![2.0; 4]);
        assert!(each.out[0].2.iter().any(|&g| g != 0.0));
    }
}
