//! Times the parts of one C2F2 training step (batch 256, 28×28) to find where time goes.
use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Distribution, Tensor};
use rdml::kernel::adam::FusedAdam;
use rdml::model::{Arch, EmbeddingNet, ModelConfig};
use std::time::Instant;

fn main() {
    rdml::tune_allocator();
    let dev = Device::default().autodiff();
    let cfg = ModelConfig {
        arch: Arch::C2f2,
        embedding_dim: 512,
        l2_normalize: true,
        imagenet_norm: None,
        input_mean: None,
        input_std: None,
        pretrained: None,
        frozen_bn: false,
        bn_sets: 1,
    };
    let mut net = EmbeddingNet::new(&cfg, [1, 28, 28], &dev).unwrap();
    let mut opt = ModuleOptimizer::from(FusedAdam::new(0.9, 0.999, 1e-5, Some(1e-7)));
    let x = Tensor::<4>::random([256, 1, 28, 28], Distribution::Uniform(0.0, 1.0), &dev);
    let plain = dev.clone().without_autodiff();
    let xp = Tensor::<4>::random([256, 1, 28, 28], Distribution::Uniform(0.0, 1.0), &plain);
    for it in 0..6 {
        let t = Instant::now();
        let e = net.valid().forward(xp.clone());
        let _ = e.into_data();
        let f_plain = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let e = net.forward(x.clone());
        let l = e.clone().powi_scalar(2).sum();
        let _v = l.clone().into_scalar::<f32>();
        let f = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut g = l.backward();
        let b = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let gp = GradientsParams::from_module(&mut g, &net);
        net = opt.step(1e-3, net, gp);
        let _ = net.valid().forward(xp.clone().narrow(0, 0, 1)).into_data();
        let s = t.elapsed().as_secs_f64();
        println!("iter {it}: eval-forward {f_plain:.3}s  train-forward {f:.3}s  backward {b:.3}s  step {s:.3}s");
    }
}
