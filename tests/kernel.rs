//! rdml's convolution kernels against burn's own convolution: the same output and the same
//! gradients for the input, the weight and the bias, over strides, asymmetric padding,
//! dilation, 1×1 kernels and a missing bias.

use burn::nn::PaddingConfig2d;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::tensor::{Device, Distribution, Tensor};
use rdml::kernel::conv2d;

fn max_abs_diff<const D: usize>(a: Tensor<D>, b: Tensor<D>) -> f32 {
    (a - b).abs().max().into_scalar::<f32>()
}

fn case(
    c_in: usize,
    c_out: usize,
    k: [usize; 2],
    stride: [usize; 2],
    pad: PaddingConfig2d,
    dil: [usize; 2],
    bias: bool,
) {
    let dev = Device::default().autodiff();
    let (conv, x, probe): (Conv2d, Tensor<4>, Tensor<4>) = rdml::seeded(&dev, 7, || {
        let conv = Conv2dConfig::new([c_in, c_out], k)
            .with_stride(stride)
            .with_padding(pad.clone())
            .with_dilation(dil)
            .with_bias(bias)
            .init(&dev);
        let x = Tensor::<4>::random([3, c_in, 11, 15], Distribution::Normal(0.0, 1.0), &dev);
        let y_dims = conv.forward(x.clone()).dims();
        let probe = Tensor::<4>::random(y_dims, Distribution::Normal(0.0, 1.0), &dev);
        (conv, x, probe)
    });
    let run = |fast: bool| {
        let x = x.clone().require_grad();
        let y = if fast {
            conv2d(&conv, x.clone())
        } else {
            conv.forward(x.clone())
        };
        let grads = (y.clone() * probe.clone()).sum().backward();
        let gw = conv.weight.val().grad(&grads).expect("weight grad");
        let gb = conv.bias.as_ref().map(|b| b.val().grad(&grads).expect("bias grad"));
        (y.inner(), x.grad(&grads).expect("input grad"), gw, gb)
    };
    let (y0, gx0, gw0, gb0) = run(false);
    let (y1, gx1, gw1, gb1) = run(true);
    let what = format!("k {k:?} stride {stride:?} pad {pad:?} dil {dil:?} bias {bias}");
    assert!(
        y0.clone().abs().max().into_scalar::<f32>() > 0.1,
        "{what}: degenerate output"
    );
    assert!(max_abs_diff(y0, y1) < 1e-4, "{what}: forward");
    assert!(max_abs_diff(gx0, gx1) < 1e-4, "{what}: input grad");
    assert!(max_abs_diff(gw0, gw1) < 1e-3, "{what}: weight grad");
    if let (Some(a), Some(b)) = (gb0, gb1) {
        assert!(max_abs_diff(a, b) < 1e-3, "{what}: bias grad");
    }
}

#[test]
fn conv_kernels_match_burn() {
    let explicit = |t, l, b, r| PaddingConfig2d::Explicit(t, l, b, r);
    case(2, 4, [5, 5], [1, 1], explicit(2, 2, 2, 2), [1, 1], true);
    case(3, 5, [3, 3], [2, 2], explicit(1, 1, 1, 1), [1, 1], false);
    case(3, 4, [3, 2], [2, 1], explicit(1, 0, 2, 1), [1, 1], true);
    case(2, 3, [3, 3], [1, 2], PaddingConfig2d::Valid, [2, 1], true);
    case(4, 6, [1, 1], [1, 1], PaddingConfig2d::Valid, [1, 1], false);
    case(4, 6, [1, 1], [2, 2], PaddingConfig2d::Valid, [1, 1], true);
    case(3, 8, [7, 7], [2, 2], explicit(3, 3, 3, 3), [1, 1], false);
}

/// Stride-1 convolutions with whole 16-channel groups take the direct AVX-512 kernels (where
/// the CPU has them): each channel-group width (16, 32, 64), kernel width (3, 5, 7), a row
/// narrower than a tile, asymmetric padding and a non-square kernel.
#[test]
fn direct_conv_kernels_match_burn() {
    let explicit = |t, l, b, r| PaddingConfig2d::Explicit(t, l, b, r);
    case(32, 64, [3, 3], [1, 1], explicit(1, 1, 1, 1), [1, 1], true);
    case(16, 32, [5, 5], [1, 1], explicit(2, 2, 2, 2), [1, 1], false);
    case(64, 16, [7, 7], [1, 1], explicit(3, 3, 3, 3), [1, 1], true);
    case(16, 48, [3, 5], [1, 1], explicit(0, 2, 1, 1), [1, 1], true);
    case(32, 16, [5, 3], [1, 1], PaddingConfig2d::Valid, [1, 1], false);
    // Padding as wide as the kernel: direct forward and weight gradient, im2col input gradient.
    case(16, 16, [3, 3], [1, 1], explicit(3, 3, 3, 3), [1, 1], true);
}

#[test]
fn conv_kernels_without_autodiff() {
    let dev = Device::default();
    let (conv, x) = rdml::seeded(&dev, 3, || {
        let conv = Conv2dConfig::new([2, 3], [3, 3])
            .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
            .init(&dev);
        (
            conv,
            Tensor::<4>::random([2, 2, 6, 6], Distribution::Normal(0.0, 1.0), &dev),
        )
    });
    let diff = max_abs_diff(conv.forward(x.clone()), conv2d(&conv, x));
    assert!(diff < 1e-5, "forward without autodiff differs by {diff}");
}

fn pool_case(k: [usize; 2], stride: [usize; 2], pad: usize, hw: [usize; 2]) {
    use burn::nn::pool::MaxPool2dConfig;
    let dev = Device::default().autodiff();
    let pool = MaxPool2dConfig::new(k)
        .with_strides(stride)
        .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
        .init();
    let (x, probe) = rdml::seeded(&dev, 5, || {
        let x = Tensor::<4>::random([2, 3, hw[0], hw[1]], Distribution::Normal(0.0, 1.0), &dev);
        let dims = pool.forward(x.clone()).dims();
        (x, Tensor::<4>::random(dims, Distribution::Normal(0.0, 1.0), &dev))
    });
    let run = |fast: bool| {
        let x = x.clone().require_grad();
        let y = if fast {
            rdml::kernel::max_pool2d(&pool, x.clone())
        } else {
            pool.forward(x.clone())
        };
        let grads = (y.clone() * probe.clone()).sum().backward();
        (y.inner(), x.grad(&grads).expect("input grad"))
    };
    let ((y0, g0), (y1, g1)) = (run(false), run(true));
    let what = format!("pool k {k:?} stride {stride:?} pad {pad} input {hw:?}");
    assert_eq!(y0.dims(), y1.dims(), "{what}: shape");
    assert!(max_abs_diff(y0, y1) == 0.0, "{what}: forward");
    assert!(max_abs_diff(g0.clone(), g1) == 0.0, "{what}: input grad");
    assert!(g0.abs().sum().into_scalar::<f32>() > 0.5, "{what}: degenerate gradient");
}

#[test]
fn max_pool_kernel_matches_burn() {
    pool_case([2, 2], [2, 2], 0, [8, 6]);
    pool_case([2, 2], [2, 2], 0, [7, 5]);
    pool_case([3, 3], [2, 2], 1, [9, 8]);
    pool_case([3, 2], [1, 2], 1, [5, 7]);
}

/// rdml's fused Adam gives burn's Adam's parameters (weight decay on, 6 steps), and a state
/// saved by one resumes in the other with the same result.
#[test]
fn fused_adam_matches_burn_adam() {
    use burn::nn::{Linear, LinearConfig};
    use burn::optim::decay::WeightDecayConfig;
    use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
    use rdml::kernel::adam::FusedAdam;

    let dev = Device::default().autodiff();
    let (net, x): (Linear, Tensor<2>) = rdml::seeded(&dev, 11, || {
        (
            LinearConfig::new(40, 30).init(&dev),
            Tensor::<2>::random([8, 40], Distribution::Normal(0.0, 1.0), &dev),
        )
    });
    let burn_adam = || {
        AdamConfig::new()
            .with_beta_1(0.8)
            .with_beta_2(0.99)
            .with_epsilon(1e-6)
            .with_weight_decay(Some(WeightDecayConfig::new(0.01)))
            .init()
    };
    let fused = || ModuleOptimizer::from(FusedAdam::new(0.8, 0.99, 1e-6, Some(0.01)));
    let step = |opt: ModuleOptimizer, net: Linear| {
        let mut opt = opt;
        let loss = net.forward(x.clone()).powi_scalar(2).sum();
        let grads = GradientsParams::from_grads(loss.backward(), &net);
        let net = opt.step(1e-2, net, grads);
        (opt, net)
    };
    let (mut a, mut net_a) = (burn_adam(), net.clone());
    let (mut b, mut net_b) = (fused(), net.clone());
    for _ in 0..6 {
        (a, net_a) = step(a, net_a);
        (b, net_b) = step(b, net_b);
    }
    let diff = max_abs_diff(net_a.weight.val(), net_b.weight.val());
    let moved = max_abs_diff(net.weight.val(), net_b.weight.val());
    assert!(diff <= 1e-7, "fused Adam differs from burn's by {diff}");
    assert!(moved > 1e-2, "the parameters barely moved ({moved})");

    let dir = std::env::temp_dir().join(format!("rdml-adam-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    b.save(dir.join("fused.bpk")).expect("save fused state");
    let a2 = burn_adam()
        .load(dir.join("fused.bpk"))
        .expect("burn's Adam loads the fused state");
    let (_, next_a) = step(a2, net_b.clone());
    let (_, next_b) = step(b, net_b);
    std::fs::remove_dir_all(&dir).ok();
    let diff = max_abs_diff(next_a.weight.val(), next_b.weight.val());
    assert!(diff <= 1e-7, "resumed step differs by {diff}");
}
