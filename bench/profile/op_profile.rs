//! Times single burn ops on the default device (plain and autodiff) to locate slow kernels.
use burn::tensor::module::{conv2d, max_pool2d};
use burn::tensor::ops::{ConvOptions, MaxPoolOptions};
use burn::tensor::{Device, Distribution, Tensor};
use std::time::Instant;

fn time<F: FnMut()>(name: &str, mut f: F) {
    f();
    let t = Instant::now();
    for _ in 0..5 {
        f();
    }
    println!("{name:<40} {:.1} ms", t.elapsed().as_secs_f64() * 200.0);
}

fn main() {
    rdml_kernels();
    let dev = Device::default();
    let r = |s: [usize; 4]| Tensor::<4>::random(s, Distribution::Uniform(-1.0, 1.0), &dev);
    let x1 = r([256, 1, 28, 28]);
    let w1 = r([32, 1, 5, 5]);
    let x2 = r([256, 32, 14, 14]);
    let w2 = r([64, 32, 5, 5]);
    let opt = ConvOptions::new([1, 1], [2, 2], [1, 1], 1);
    time("conv1 fwd 256x1x28x28 -> 32", || {
        let _ = conv2d(x1.clone(), w1.clone(), None, opt.clone()).into_data();
    });
    time("conv2 fwd 256x32x14x14 -> 64", || {
        let _ = conv2d(x2.clone(), w2.clone(), None, opt.clone()).into_data();
    });
    let a = Tensor::<2>::random([256, 3136], Distribution::Uniform(-1.0, 1.0), &dev);
    let b = Tensor::<2>::random([3136, 1024], Distribution::Uniform(-1.0, 1.0), &dev);
    time("matmul 256x3136 @ 3136x1024", || {
        let _ = a.clone().matmul(b.clone()).into_data();
    });
    let p = r([256, 32, 28, 28]);
    time("maxpool 256x32x28x28", || {
        let _ = max_pool2d(p.clone(), MaxPoolOptions::new([2, 2])).into_data();
    });
    time("relu 256x32x28x28", || {
        let _ = burn::tensor::activation::relu(p.clone()).into_data();
    });
    let ad = dev.clone().autodiff();
    let x2a = Tensor::<4>::random([256, 32, 14, 14], Distribution::Uniform(-1.0, 1.0), &ad).require_grad();
    let w2a = Tensor::<4>::random([64, 32, 5, 5], Distribution::Uniform(-1.0, 1.0), &ad).require_grad();
    time("conv2 fwd+bwd (autodiff)", || {
        let y = conv2d(x2a.clone(), w2a.clone(), None, opt.clone());
        let _ = y.sum().backward();
    });
    let x1a = Tensor::<4>::random([256, 1, 28, 28], Distribution::Uniform(-1.0, 1.0), &ad).require_grad();
    let w1a = Tensor::<4>::random([32, 1, 5, 5], Distribution::Uniform(-1.0, 1.0), &ad).require_grad();
    time("conv1 fwd+bwd (autodiff)", || {
        let y = conv2d(x1a.clone(), w1a.clone(), None, opt.clone());
        let _ = y.sum().backward();
    });
    let pa = Tensor::<4>::random([256, 32, 28, 28], Distribution::Uniform(-1.0, 1.0), &ad).require_grad();
    time("maxpool fwd+bwd (autodiff)", || {
        let y = max_pool2d(pa.clone(), MaxPoolOptions::new([2, 2]));
        let _ = y.sum().backward();
    });
    let x2c = Tensor::<4>::random([256, 32, 14, 14], Distribution::Uniform(-1.0, 1.0), &ad);
    time("conv2 fwd+bwd (weight grad only)", || {
        let y = conv2d(x2c.clone(), w2a.clone(), None, opt.clone());
        let _ = y.sum().backward();
    });
    let w2c = Tensor::<4>::random([64, 32, 5, 5], Distribution::Uniform(-1.0, 1.0), &ad);
    time("conv2 fwd+bwd (input grad only)", || {
        let y = conv2d(x2a.clone(), w2c.clone(), None, opt.clone());
        let _ = y.sum().backward();
    });
    let aa = Tensor::<2>::random([256, 3136], Distribution::Uniform(-1.0, 1.0), &ad).require_grad();
    let ba = Tensor::<2>::random([3136, 1024], Distribution::Uniform(-1.0, 1.0), &ad).require_grad();
    time("matmul fwd+bwd (autodiff)", || {
        let _ = aa.clone().matmul(ba.clone()).sum().backward();
    });
}

#[allow(dead_code)]
fn split_backward() {}

/// The same convolutions through rdml's kernels (`rdml::kernel::conv2d`).
fn rdml_kernels() {
    use burn::nn::PaddingConfig2d;
    use burn::nn::conv::Conv2dConfig;
    for ad in [false, true] {
        let dev = if ad {
            Device::default().autodiff()
        } else {
            Device::default()
        };
        let conv = |i, o| {
            Conv2dConfig::new([i, o], [5, 5])
                .with_padding(PaddingConfig2d::Explicit(2, 2, 2, 2))
                .init(&dev)
        };
        let (c1, c2) = (conv(1, 32), conv(32, 64));
        let r = |s: [usize; 4]| Tensor::<4>::random(s, Distribution::Uniform(-1.0, 1.0), &dev);
        let (x1, x2) = (r([256, 1, 28, 28]), r([256, 32, 14, 14]));
        if !ad {
            time("rdml conv1 fwd", || {
                let _ = rdml::kernel::conv2d(&c1, x1.clone()).into_data();
            });
            time("rdml conv2 fwd", || {
                let _ = rdml::kernel::conv2d(&c2, x2.clone()).into_data();
            });
        } else {
            time("rdml conv1 fwd+bwd (weight grad)", || {
                let _ = rdml::kernel::conv2d(&c1, x1.clone()).sum().backward();
            });
            time("rdml conv2 fwd+bwd (weight grad)", || {
                let _ = rdml::kernel::conv2d(&c2, x2.clone()).sum().backward();
            });
            let x2g = x2.clone().require_grad();
            time("rdml conv2 fwd+bwd (weight+input grad)", || {
                let _ = rdml::kernel::conv2d(&c2, x2g.clone()).sum().backward();
            });
        }
    }
}
