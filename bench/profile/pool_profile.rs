//! Max-pool 2×2/2 forward+backward: burn's `max_pool2d` against a reshape + two `max_dim`s, on
//! C2F2's two pooling shapes (batch 256), autodiff device. Usage: cargo run --release --example pool_profile
use burn::tensor::module::max_pool2d;
use burn::tensor::ops::MaxPoolOptions;
use burn::tensor::{Distribution, Tensor};
use std::time::Instant;

fn reshape_pool(x: Tensor<4>) -> Tensor<4> {
    let [n, c, h, w] = x.dims();
    x.reshape([n, c, h / 2, 2, w / 2, 2])
        .max_dim(5)
        .max_dim(3)
        .reshape([n, c, h / 2, w / 2])
}

fn strided_pool(x: Tensor<4>) -> Tensor<4> {
    use burn::tensor::s;
    let a = x.clone().slice(s![.., .., 0..;2, 0..;2]);
    let b = x.clone().slice(s![.., .., 0..;2, 1..;2]);
    let c = x.clone().slice(s![.., .., 1..;2, 0..;2]);
    let d = x.slice(s![.., .., 1..;2, 1..;2]);
    a.max_pair(b).max_pair(c.max_pair(d))
}

fn main() {
    let dev = rdml::default_device().autodiff();
    for shape in [[256, 32, 28, 28], [256, 64, 14, 14]] {
        let x0 = Tensor::<4>::random(shape, Distribution::Normal(0.0, 1.0), &dev);
        // Same values and gradients.
        let xa = x0.clone().require_grad();
        let a = max_pool2d(xa.clone(), MaxPoolOptions::new([2, 2]));
        let xb = x0.clone().require_grad();
        let b = reshape_pool(xb.clone());
        let dv = (a.clone() - b.clone()).abs().max().into_scalar::<f32>();
        let ga = xa.grad(&a.sum().backward()).unwrap();
        let gb = xb.grad(&b.sum().backward()).unwrap();
        let dg = (ga - gb).abs().max().into_scalar::<f32>();
        let time = |f: &dyn Fn(Tensor<4>) -> Tensor<4>| {
            let mut best = f64::MAX;
            for _ in 0..10 {
                let x = x0.clone().require_grad();
                let t = Instant::now();
                let y = f(x.clone());
                let g = x.grad(&y.sum().backward()).unwrap();
                let _ = g.into_data();
                best = best.min(t.elapsed().as_secs_f64());
            }
            best * 1e3
        };
        let t1 = time(&|x| max_pool2d(x, MaxPoolOptions::new([2, 2])));
        let t2 = time(&reshape_pool);
        let t3 = time(&strided_pool);
        let xc = x0.clone().require_grad();
        let c = strided_pool(xc.clone());
        let dv3 = (max_pool2d(x0.clone(), MaxPoolOptions::new([2, 2])) - c.clone())
            .abs()
            .max()
            .into_scalar::<f32>();
        println!(
            "{shape:?}: max_pool2d {t1:.2} ms, reshape+max_dim {t2:.2} ms (|Δvalue| {dv}, |Δgrad| {dg}), strided+max_pair {t3:.2} ms (|Δvalue| {dv3})"
        );
    }
}
