//! Batch normalisation with several parameter sets per layer, selected per forward pass: MDProp
//! and AdvProp keep one set for clean data (used at inference) and one per extra distribution.
//! Running variance follows PyTorch (unbiased batch variance), so imported statistics evolve the
//! same way as in the reference code.

use burn::module::Module;
use burn::nn::{BatchNorm, BatchNormConfig};
use burn::tensor::{Device, Tensor};

#[derive(Module, Debug)]
pub struct MultiBatchNorm {
    pub sets: Vec<BatchNorm>,
    /// Frozen BN (robrank's ResNet setting): always normalise with the running statistics and
    /// never update them; the affine parameters still train.
    pub frozen: bool,
}

impl MultiBatchNorm {
    pub fn new(features: usize, sets: usize, frozen: bool, device: &Device) -> Self {
        let sets = (0..sets.max(1))
            .map(|_| BatchNormConfig::new(features).init(device))
            .collect();
        Self { sets, frozen }
    }

    pub fn num_sets(&self) -> usize {
        self.sets.len()
    }

    /// Normalises `x` with parameter set `set` (clamped to the last set).
    pub fn forward(&self, x: Tensor<4>, set: usize) -> Tensor<4> {
        let bn = &self.sets[set.min(self.sets.len() - 1)];
        let device = x.device();
        let training = device.is_autodiff() && bn.training.is_enabled() && !self.frozen;
        if !training {
            return burn::tensor::module::batch_norm(
                x,
                bn.gamma.val(),
                bn.beta.val(),
                bn.running_mean.value_sync().to_device(&device),
                bn.running_var.value_sync().to_device(&device),
                bn.epsilon,
            );
        }
        let [b, _, h, w] = x.dims();
        let n = (b * h * w) as f64;
        let out = burn::tensor::module::batch_norm_train(x, bn.gamma.val(), bn.beta.val(), bn.epsilon);
        let unbiased = if n > 1.0 { n / (n - 1.0) } else { 1.0 };
        let m = bn.momentum;
        let mean = bn.running_mean.value_sync().to_device(&device);
        let var = bn.running_var.value_sync().to_device(&device);
        bn.running_mean
            .update(mean.mul_scalar(1.0 - m).add(out.mean.detach().mul_scalar(m)).detach());
        bn.running_var.update(
            var.mul_scalar(1.0 - m)
                .add(out.variance.detach().mul_scalar(m * unbiased))
                .detach(),
        );
        out.output
    }

    /// Puts set `k` in set 0's place (and set 0 in `k`'s), so that every clean-set forward uses it.
    pub fn swap_into_main(mut self, k: usize) -> Self {
        if k < self.sets.len() {
            self.sets.swap(0, k);
        }
        self
    }

    /// Copies parameter set 0 into every other set (MDProp initialises the auxiliary sets from the
    /// pretrained main set).
    pub fn copy_main_to_aux(mut self) -> Self {
        let main = &self.sets[0];
        let (g, b) = (main.gamma.val(), main.beta.val());
        let (rm, rv) = (main.running_mean.value_sync(), main.running_var.value_sync());
        let device = g.device();
        for s in self.sets.iter_mut().skip(1) {
            let mut fresh = BatchNormConfig::new(g.dims()[0]).init(&device);
            fresh.gamma = burn::module::Param::from_tensor(g.clone().detach());
            fresh.beta = burn::module::Param::from_tensor(b.clone().detach());
            fresh.running_mean = burn::module::RunningState::new(rm.clone());
            fresh.running_var = burn::module::RunningState::new(rv.clone());
            *s = fresh;
        }
        self
    }
}
