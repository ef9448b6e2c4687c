//! Times each layer of C2F2's forward pass (batch 256) through rdml's kernels.
use burn::tensor::activation::relu;
use burn::tensor::{Device, Distribution, Tensor};
use rdml::kernel::{conv2d, max_pool2d};
use rdml::model::c2f2::C2f2;
use std::time::Instant;

fn t<T>(name: &str, f: impl FnOnce() -> T, sync: impl Fn(&T)) -> T {
    let s = Instant::now();
    let r = f();
    sync(&r);
    println!("  {name:<8} {:6.1} ms", s.elapsed().as_secs_f64() * 1e3);
    r
}

fn main() {
    let dev = Device::default();
    let m = C2f2::new([1, 28, 28], 512, &dev);
    let x = Tensor::<4>::random([256, 1, 28, 28], Distribution::Uniform(0.0, 1.0), &dev);
    let s4 = |t: &Tensor<4>| {
        let _ = t.clone().slice([0..1, 0..1, 0..1, 0..1]).into_data();
    };
    let s2 = |t: &Tensor<2>| {
        let _ = t.clone().slice([0..1, 0..1]).into_data();
    };
    for _ in 0..3 {
        let a = t("conv1", || conv2d(&m.conv1, x.clone()), s4);
        let a = t("relu1", || relu(a), s4);
        let a = t("pool1", || max_pool2d(&m.pool, a), s4);
        let a = t("conv2", || conv2d(&m.conv2, a), s4);
        let a = t("relu2", || relu(a), s4);
        let a = t("pool2", || max_pool2d(&m.pool, a), s4);
        let f: Tensor<2> = t("flatten", || a.flatten(1, 3), s2);
        let f = t("fc1", || m.fc1.forward(f), s2);
        let f = t("relu3", || relu(f), s2);
        let _ = t("fc2", || m.fc2.forward(f), s2);
        println!();
    }
}
