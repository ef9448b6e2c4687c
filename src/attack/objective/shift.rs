//! Embedding shift (robrank's ES attack; EST's inner maximisation): maximise ‖f(x̃) − f(x)‖,
//! i.e. minimise its negative. At the first step the clean embedding is offset by ±1e-7 so that
//! the gradient of the norm is defined (f(x̃) = f(x) there).

use super::dist_rows;
use crate::attack::objective::Objective;
use burn::tensor::{Distribution, Tensor};

pub struct EmbeddingShift {
    pub clean: Tensor<2>,
}

impl Objective for EmbeddingShift {
    fn loss(&self, emb: Tensor<2>, step: usize) -> Tensor<1> {
        let reference = if step == 0 {
            // A fixed seed: the offset only breaks the tie, and the same call must give the same attack.
            let device = self.clean.device();
            let noise: Tensor<2> =
                crate::host_random(0x5eed, self.clean.shape(), Distribution::Bernoulli(0.5), &device)
                    .mul_scalar(2e-7)
                    .sub_scalar(1e-7);
            self.clean.clone() + noise
        } else {
            self.clean.clone()
        };
        dist_rows(emb, reference).mean().neg()
    }
    /// Without the first step's jitter, which only breaks the zero gradient at the start.
    fn row_losses(&self, emb: Tensor<2>) -> Option<Tensor<1>> {
        let [b, _] = emb.dims();
        Some(dist_rows(emb, self.clean.clone()).reshape([b]).neg())
    }
}
