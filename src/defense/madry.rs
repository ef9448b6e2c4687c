//! Madry adversarial training adapted to the triplet loss (robrank's AMD baseline): the mined
//! (a, p, n) are all perturbed to maximise the triplet hardness `d(ã,p̃) − d(ã,ñ)`, and the model
//! is trained on the triplet loss of the perturbed triplet.

use super::TripletLayout;
use crate::attack::engine::Objective;
use crate::loss;
use burn::tensor::Tensor;

/// Minimises `mean(d(ã,ñ) − d(ã,p̃))`, i.e. maximises the hardness of every triplet.
pub struct MaxHardness {
    pub layout: TripletLayout,
    pub distance: loss::distance::Distance,
}

impl Objective for MaxHardness {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        let (a, p, n) = self.layout.split(emb);
        super::hardness(a, p, n, self.distance).mean().neg()
    }
}
