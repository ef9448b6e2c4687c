//! Embedding shift (robrank's ES attack; EST's inner maximisation): maximise ‖f(x̃) − f(x)‖,
//! i.e. minimise its negative. At the first step f(x̃) = f(x), where the norm has no gradient:
//! the clean embedding is offset by a tiny amount there, which sets the first step's direction.

use super::dist_rows;
use crate::attack::objective::Objective;
use crate::loss::distance::Distance;
use burn::tensor::{Distribution, Tensor};

/// The first step's offset of the clean embedding.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FirstStep {
    /// ±1e-7 per coordinate, drawn from a fixed seed (no direction preferred).
    Jitter,
    /// The same value in every coordinate: robrank's, [`FirstStep::robrank`].
    Constant(f32),
}

impl FirstStep {
    /// robrank's first step (`advrank.py`): its loss is `F.pairwise_distance(f(x̃), f(x) + 1e-7)`,
    /// whose own `eps = 1e-6` is added to the difference, so the offset is `1e-7 − 1e-6 = −9e-7`
    /// in every coordinate; its cosine metric (`1 − cos(f(x̃), f(x) + 1e-7)`) has no such eps, and
    /// on unit embeddings the offset `+1e-7` sends the Euclidean norm's first step the same way.
    pub fn robrank(distance: Distance) -> Self {
        match distance {
            Distance::Cosine => Self::Constant(1e-7),
            Distance::Euclidean | Distance::NormalizedEuclidean => Self::Constant(-9e-7),
        }
    }
}

pub struct EmbeddingShift {
    pub clean: Tensor<2>,
    pub first_step: FirstStep,
}

impl EmbeddingShift {
    /// rdml's embedding shift from `clean`, its first step from [`FirstStep::Jitter`].
    pub fn new(clean: Tensor<2>) -> Self {
        Self {
            clean,
            first_step: FirstStep::Jitter,
        }
    }

    /// The embedding the distance is taken from at `step`.
    fn reference(&self, step: usize) -> Tensor<2> {
        match (step, self.first_step) {
            (0, FirstStep::Jitter) => {
                // A fixed seed: the offset only breaks the tie, and the same call must give the same attack.
                let device = self.clean.device();
                let noise: Tensor<2> =
                    crate::host_random(0x5eed, self.clean.shape(), Distribution::Bernoulli(0.5), &device)
                        .mul_scalar(2e-7)
                        .sub_scalar(1e-7);
                self.clean.clone() + noise
            }
            (0, FirstStep::Constant(c)) => self.clean.clone().add_scalar(c),
            _ => self.clean.clone(),
        }
    }
}

impl Objective for EmbeddingShift {
    fn loss(&self, emb: Tensor<2>, step: usize) -> Tensor<1> {
        dist_rows(emb, self.reference(step)).mean().neg()
    }
    /// Without the first step's offset, which only breaks the zero gradient at the start.
    fn row_losses(&self, emb: Tensor<2>) -> Option<Tensor<1>> {
        let [b, _] = emb.dims();
        Some(dist_rows(emb, self.clean.clone()).reshape([b]).neg())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{Device, TensorData};

    /// The offset at step 0, on coordinates of a unit embedding's size (1/32: f32 spacing 4e-9).
    fn first_reference(first_step: FirstStep) -> Vec<f32> {
        let clean = Tensor::<2>::from_data(TensorData::new(vec![0.03125f32; 8], [2, 4]), &Device::default());
        let shift = EmbeddingShift { clean, first_step };
        let offset = shift.reference(0) - shift.reference(1);
        crate::host::read(&offset).unwrap()
    }

    /// robrank's first step moves every coordinate the same way (up for its Euclidean metrics, down
    /// for its cosine one); rdml's jitter moves them both ways.
    #[test]
    fn robranks_first_offset_is_one_constant_and_rdmls_a_jitter() {
        let close = |v: &[f32], c: f32| v.iter().all(|x| (x - c).abs() < 1e-8);
        assert!(close(
            &first_reference(FirstStep::robrank(Distance::NormalizedEuclidean)),
            -9e-7
        ));
        assert!(close(&first_reference(FirstStep::robrank(Distance::Euclidean)), -9e-7));
        assert!(close(&first_reference(FirstStep::robrank(Distance::Cosine)), 1e-7));
        let jitter = first_reference(FirstStep::Jitter);
        assert!(jitter.iter().all(|x| (x.abs() - 1e-7).abs() < 1e-8), "{jitter:?}");
        assert!(
            jitter.iter().any(|&x| x > 0.0) && jitter.iter().any(|&x| x < 0.0),
            "{jitter:?}"
        );
    }
}
