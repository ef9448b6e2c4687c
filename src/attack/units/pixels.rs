//! A test model whose embedding is the image's pixels, so that a test places every item by hand
//! and knows every gradient.

use crate::attack::context::Context;
use crate::attack::oracle::{Gradient, Oracle};
use crate::data::{ImageSet, Source};
use anyhow::Result;
use burn::tensor::Tensor;
use std::sync::Arc;

pub struct Pixels;

impl Oracle for Pixels {
    fn embed(&self, x: Tensor<4>) -> Result<Tensor<2>> {
        let [b, c, h, w] = x.dims();
        Ok(x.reshape([b, c * h * w]))
    }

    fn gradient(&self, x: Tensor<4>, loss: &dyn Fn(Tensor<2>) -> Tensor<1>) -> Result<Gradient> {
        let xi = x.autodiff().require_grad();
        let l = loss(self.embed(xi.clone())?);
        let value = l.clone().detach().without_autodiff();
        let grads = l.backward();
        Ok(Gradient {
            loss: value,
            input: xi.grad(&grads).map(|g| g.without_autodiff()),
        })
    }
}

/// Items of `width` pixels each (`points` row by row) with their labels.
pub fn context_of(points: &[f32], width: usize, labels: &[u32], robrank_compat: bool) -> Context {
    context_on(points, width, labels, robrank_compat, &crate::ranks::Ranks::alone())
}

/// [`context_of`], its work split over `ranks`.
pub fn context_on(
    points: &[f32],
    width: usize,
    labels: &[u32],
    robrank_compat: bool,
    ranks: &crate::ranks::Ranks,
) -> Context {
    let n = points.len() / width;
    let source = Source::Floats {
        data: points.to_vec(),
        channels: 1,
        height: 1,
        width,
    };
    let set = ImageSet::new("pixels", Arc::new(source), (0..n).collect(), labels.to_vec());
    let device = crate::default_device();
    Context::of_ranked(Arc::new(Pixels), &set, (8, ranks), &device, robrank_compat).unwrap()
}

/// Items of one pixel each, at `points` on a line.
pub fn context(points: &[f32], labels: &[u32], robrank_compat: bool) -> Context {
    context_of(points, 1, labels, robrank_compat)
}
