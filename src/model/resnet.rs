//! ResNet-18 and ResNet-50 in torchvision's layout (parameter names `conv1`, `bn1`,
//! `layer{1..4}.{i}.conv{1,2,3}`/`bn{1,2,3}`, `layer{k}.0.downsample.{0,1}` → here
//! `downsample.conv`/`downsample.bn`, `fc`), with the classifier replaced by an embedding layer
//! and every batch norm a [`MultiBatchNorm`].

use super::multi_bn::MultiBatchNorm;
use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};

/// How the blocks of a ResNet are built: channel widths, BN sets, frozen BN.
#[derive(Debug, Clone, Copy)]
pub struct BnSpec {
    pub sets: usize,
    pub frozen: bool,
}

fn conv(i: usize, o: usize, k: usize, stride: usize, device: &Device) -> Conv2d {
    let p = k / 2;
    Conv2dConfig::new([i, o], [k, k])
        .with_stride([stride, stride])
        .with_padding(PaddingConfig2d::Explicit(p, p, p, p))
        .with_bias(false)
        .init(device)
}

#[derive(Module, Debug)]
pub struct Downsample {
    pub conv: Conv2d,
    pub bn: MultiBatchNorm,
}

impl Downsample {
    fn new(i: usize, o: usize, stride: usize, bn: BnSpec, device: &Device) -> Self {
        Self {
            conv: conv(i, o, 1, stride, device),
            bn: MultiBatchNorm::new(o, bn.sets, bn.frozen, device),
        }
    }
    fn forward(&self, x: Tensor<4>, set: usize) -> Tensor<4> {
        self.bn.forward(crate::kernel::conv2d(&self.conv, x), set)
    }
}

/// A residual block kind.
pub trait Block: Module + Sized {
    const EXPANSION: usize;
    fn new(inp: usize, width: usize, stride: usize, bn: BnSpec, device: &Device) -> Self;
    fn forward(&self, x: Tensor<4>, set: usize) -> Tensor<4>;
    /// Applies `f` to every batch norm of the block.
    fn map_bns(self, f: &dyn Fn(MultiBatchNorm) -> MultiBatchNorm) -> Self;
}

impl Downsample {
    fn map_bns(mut self, f: &dyn Fn(MultiBatchNorm) -> MultiBatchNorm) -> Self {
        self.bn = f(self.bn);
        self
    }
}

#[derive(Module, Debug)]
pub struct BasicBlock {
    pub conv1: Conv2d,
    pub bn1: MultiBatchNorm,
    pub conv2: Conv2d,
    pub bn2: MultiBatchNorm,
    pub downsample: Option<Downsample>,
}

impl Block for BasicBlock {
    const EXPANSION: usize = 1;
    fn new(inp: usize, width: usize, stride: usize, bn: BnSpec, device: &Device) -> Self {
        let mbn = |c| MultiBatchNorm::new(c, bn.sets, bn.frozen, device);
        Self {
            conv1: conv(inp, width, 3, stride, device),
            bn1: mbn(width),
            conv2: conv(width, width, 3, 1, device),
            bn2: mbn(width),
            downsample: (stride != 1 || inp != width).then(|| Downsample::new(inp, width, stride, bn, device)),
        }
    }
    fn forward(&self, x: Tensor<4>, set: usize) -> Tensor<4> {
        let identity = match &self.downsample {
            Some(d) => d.forward(x.clone(), set),
            None => x.clone(),
        };
        let y = relu(self.bn1.forward(crate::kernel::conv2d(&self.conv1, x), set));
        let y = self.bn2.forward(crate::kernel::conv2d(&self.conv2, y), set);
        relu(y + identity)
    }
    fn map_bns(mut self, f: &dyn Fn(MultiBatchNorm) -> MultiBatchNorm) -> Self {
        self.bn1 = f(self.bn1);
        self.bn2 = f(self.bn2);
        self.downsample = self.downsample.map(|d| d.map_bns(f));
        self
    }
}

#[derive(Module, Debug)]
pub struct Bottleneck {
    pub conv1: Conv2d,
    pub bn1: MultiBatchNorm,
    pub conv2: Conv2d,
    pub bn2: MultiBatchNorm,
    pub conv3: Conv2d,
    pub bn3: MultiBatchNorm,
    pub downsample: Option<Downsample>,
}

impl Block for Bottleneck {
    const EXPANSION: usize = 4;
    fn new(inp: usize, width: usize, stride: usize, bn: BnSpec, device: &Device) -> Self {
        let mbn = |c| MultiBatchNorm::new(c, bn.sets, bn.frozen, device);
        let out = width * 4;
        Self {
            conv1: conv(inp, width, 1, 1, device),
            bn1: mbn(width),
            // torchvision (v1.5) puts the stride on the 3×3 convolution.
            conv2: conv(width, width, 3, stride, device),
            bn2: mbn(width),
            conv3: conv(width, out, 1, 1, device),
            bn3: mbn(out),
            downsample: (stride != 1 || inp != out).then(|| Downsample::new(inp, out, stride, bn, device)),
        }
    }
    fn forward(&self, x: Tensor<4>, set: usize) -> Tensor<4> {
        let identity = match &self.downsample {
            Some(d) => d.forward(x.clone(), set),
            None => x.clone(),
        };
        let y = relu(self.bn1.forward(crate::kernel::conv2d(&self.conv1, x), set));
        let y = relu(self.bn2.forward(crate::kernel::conv2d(&self.conv2, y), set));
        let y = self.bn3.forward(crate::kernel::conv2d(&self.conv3, y), set);
        relu(y + identity)
    }
    fn map_bns(mut self, f: &dyn Fn(MultiBatchNorm) -> MultiBatchNorm) -> Self {
        self.bn1 = f(self.bn1);
        self.bn2 = f(self.bn2);
        self.bn3 = f(self.bn3);
        self.downsample = self.downsample.map(|d| d.map_bns(f));
        self
    }
}

#[derive(Module, Debug)]
pub struct ResNet<K: Module + Block> {
    pub conv1: Conv2d,
    pub bn1: MultiBatchNorm,
    pub maxpool: MaxPool2d,
    pub layer1: Vec<K>,
    pub layer2: Vec<K>,
    pub layer3: Vec<K>,
    pub layer4: Vec<K>,
    pub fc: Linear,
}

impl<K: Block> ResNet<K> {
    /// `depths` = blocks per stage: `[2, 2, 2, 2]` for ResNet-18, `[3, 4, 6, 3]` for ResNet-50.
    pub fn new(in_channels: usize, depths: [usize; 4], embedding_dim: usize, bn: BnSpec, device: &Device) -> Self {
        let mut inp = 64;
        let mut stage = |width: usize, n: usize, stride: usize| {
            let mut v = Vec::with_capacity(n);
            for i in 0..n {
                v.push(K::new(inp, width, if i == 0 { stride } else { 1 }, bn, device));
                inp = width * K::EXPANSION;
            }
            v
        };
        let layer1 = stage(64, depths[0], 1);
        let layer2 = stage(128, depths[1], 2);
        let layer3 = stage(256, depths[2], 2);
        let layer4 = stage(512, depths[3], 2);
        Self {
            conv1: Conv2dConfig::new([in_channels, 64], [7, 7])
                .with_stride([2, 2])
                .with_padding(PaddingConfig2d::Explicit(3, 3, 3, 3))
                .with_bias(false)
                .init(device),
            bn1: MultiBatchNorm::new(64, bn.sets, bn.frozen, device),
            maxpool: MaxPool2dConfig::new([3, 3])
                .with_strides([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(),
            layer1,
            layer2,
            layer3,
            layer4,
            fc: LinearConfig::new(512 * K::EXPANSION, embedding_dim).init(device),
        }
    }

    pub fn forward(&self, x: Tensor<4>, set: usize) -> Tensor<2> {
        self.fc.forward(self.features(x, set))
    }

    /// The pooled backbone features (torchvision's input to `fc`), `[b, 512·expansion]`.
    pub fn features(&self, x: Tensor<4>, set: usize) -> Tensor<2> {
        let stem = relu(self.bn1.forward(crate::kernel::conv2d(&self.conv1, x), set));
        let mut x = crate::kernel::max_pool2d(&self.maxpool, stem);
        for layer in [&self.layer1, &self.layer2, &self.layer3, &self.layer4] {
            for b in layer {
                x = b.forward(x, set);
            }
        }
        let [b, c, _, _] = x.dims();
        burn::tensor::module::adaptive_avg_pool2d(x, [1, 1]).reshape([b, c])
    }
}
