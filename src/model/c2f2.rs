//! robrank's C2F2 for 28×28 images: conv 5×5 32 → ReLU → max-pool 2 → conv 5×5 64 → ReLU →
//! max-pool 2 → fc 1024 → ReLU → fc embedding (no batch norm).

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};

#[derive(Module, Debug)]
pub struct C2f2 {
    pub conv1: Conv2d,
    pub conv2: Conv2d,
    pub pool: MaxPool2d,
    pub fc1: Linear,
    pub fc2: Linear,
}

impl C2f2 {
    /// `in_shape` is `[c, h, w]` of the input images.
    pub fn new(in_shape: [usize; 3], embedding_dim: usize, device: &Device) -> Self {
        let [c, h, w] = in_shape;
        let conv = |i, o| {
            Conv2dConfig::new([i, o], [5, 5])
                .with_padding(PaddingConfig2d::Explicit(2, 2, 2, 2))
                .init(device)
        };
        let flat = 64 * (h / 4) * (w / 4);
        Self {
            conv1: conv(c, 32),
            conv2: conv(32, 64),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            fc1: LinearConfig::new(flat, 1024).init(device),
            fc2: LinearConfig::new(1024, embedding_dim).init(device),
        }
    }

    pub fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        use crate::kernel::{conv2d, max_pool2d};
        // Max-pooling before the ReLU: the two commute (ReLU is monotone, and the first maximum
        // of a window with a positive maximum is the same pixel either way), so outputs and
        // gradients are robrank's, with the ReLU on a quarter of the values.
        let x = relu(max_pool2d(&self.pool, conv2d(&self.conv1, x)));
        let x = relu(max_pool2d(&self.pool, conv2d(&self.conv2, x)));
        let x: Tensor<2> = x.flatten(1, 3);
        self.fc2.forward(relu(self.fc1.forward(x)))
    }
}
