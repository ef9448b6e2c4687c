//! What every attack of a suite needs: the model in evaluation mode, the test set, its clean
//! embeddings (host and device copies) and the distance helpers the selections use.

use crate::data::ImageSet;
use crate::eval::embed;
use crate::eval::knn::Embeddings;
use crate::loss::to_host;
use crate::model::EmbeddingNet;
use anyhow::Result;
use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};

/// The test set, its clean embeddings and the model: what every attack needs.
pub struct Context {
    pub model: EmbeddingNet,
    pub set: ImageSet,
    pub clean: Embeddings,
    pub(super) cand: Tensor<2>,
    pub(super) cand_sq: Tensor<2>,
    pub device: Device,
    /// Reproduce robrank's GTM target index and LTM self mask.
    pub robrank_compat: bool,
}

impl Context {
    pub fn new(model: &EmbeddingNet, set: &ImageSet, device: &Device, robrank_compat: bool) -> Result<Self> {
        let device = device.clone().without_autodiff();
        let model = model.valid();
        let clean = embed(&model, set, 256, &device)?;
        let cand = Tensor::<2>::from_data(TensorData::new(clean.data.clone(), [clean.n, clean.dim]), &device);
        let cand_sq = cand.clone().powi_scalar(2).sum_dim(1).transpose();
        Ok(Self {
            model,
            set: set.clone(),
            clean,
            cand,
            cand_sq,
            device,
            robrank_compat,
        })
    }

    pub(super) fn rows_host(&self, idx: &[usize]) -> Vec<f32> {
        idx.iter().flat_map(|&i| self.clean.row(i).iter().copied()).collect()
    }

    pub(super) fn rows(&self, idx: &[usize]) -> Tensor<2> {
        Tensor::<2>::from_data(
            TensorData::new(self.rows_host(idx), [idx.len(), self.clean.dim]),
            &self.device,
        )
    }

    /// Squared-free Euclidean distances of host row `e` to all candidates.
    pub(super) fn host_dists(&self, e: &[f32]) -> Vec<f32> {
        use rayon::prelude::*;
        (0..self.clean.n)
            .into_par_iter()
            .map(|j| euclid(self.clean.row(j), e))
            .collect()
    }
}

pub(super) fn embed_tensor(model: &EmbeddingNet, x: Tensor<4>) -> Vec<f32> {
    to_host(&model.forward(x))
}

/// Euclidean distance of two host embeddings.
pub(super) fn euclid(a: &[f32], b: &[f32]) -> f32 {
    crate::loss::distance::Distance::Euclidean.host(a, b)
}
