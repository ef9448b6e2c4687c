//! Experiment: 5×5 "same" convolution as unfold (strided view) + matmul, against burn's conv2d.
use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Distribution, Tensor};
use std::time::Instant;

fn time<F: FnMut()>(name: &str, mut f: F) {
    f();
    let t = Instant::now();
    for _ in 0..5 {
        f();
    }
    println!("{name:<48} {:.1} ms", t.elapsed().as_secs_f64() * 200.0);
}

/// x [B,C,H,W], w [O,C,k,k], pad k/2, stride 1 → [B,O,H,W]
fn conv_unfold(x: Tensor<4>, w: Tensor<4>) -> Tensor<4> {
    let [b, c, h, wd] = x.dims();
    let [o, _, k, _] = w.dims();
    let p = k / 2;
    let xp = x.pad([(p, p), (p, p)], burn::tensor::ops::PadMode::Constant(0.0));
    let u = xp.unfold::<5, _>(2, k, 1).unfold::<6, _>(3, k, 1); // [B,C,H,W,k,k]
    let u = u.permute([0, 2, 3, 1, 4, 5]).reshape([b * h * wd, c * k * k]);
    let wm = w.reshape([o, c * k * k]).transpose();
    let y = u.matmul(wm); // [BHW, O]
    y.reshape([b, h, wd, o]).permute([0, 3, 1, 2])
}

fn main() {
    let dev = Device::default();
    let opt = ConvOptions::new([1, 1], [2, 2], [1, 1], 1);
    for (c, o, hw) in [(1usize, 32usize, 28usize), (32, 64, 14)] {
        let x = Tensor::<4>::random([256, c, hw, hw], Distribution::Uniform(-1.0, 1.0), &dev);
        let w = Tensor::<4>::random([o, c, 5, 5], Distribution::Uniform(-1.0, 1.0), &dev);
        let a = conv2d(x.clone(), w.clone(), None, opt.clone());
        let b = conv_unfold(x.clone(), w.clone());
        let d = (a - b).abs().max().into_scalar::<f32>();
        println!("c{c}->{o}: max |diff| {d:e}");
        time(&format!("c{c}->{o} burn conv2d fwd"), || {
            let _ = conv2d(x.clone(), w.clone(), None, opt.clone()).into_data();
        });
        time(&format!("c{c}->{o} unfold fwd"), || {
            let _ = conv_unfold(x.clone(), w.clone()).into_data();
        });
        let ad = dev.clone().autodiff();
        let xa = Tensor::<4>::random([256, c, hw, hw], Distribution::Uniform(-1.0, 1.0), &ad);
        let xg = xa.clone().require_grad();
        let wa = Tensor::<4>::random([o, c, 5, 5], Distribution::Uniform(-1.0, 1.0), &ad);
        let wg = wa.clone().require_grad();
        for (name, xx, ww) in [("weight grad", &xa, &wg), ("input grad", &xg, &wa), ("both", &xg, &wg)] {
            time(&format!("c{c}->{o} burn fwd+bwd {name}"), || {
                let _ = conv2d(xx.clone(), ww.clone(), None, opt.clone()).sum().backward();
            });
            time(&format!("c{c}->{o} unfold fwd+bwd {name}"), || {
                let _ = conv_unfold(xx.clone(), ww.clone()).sum().backward();
            });
        }
    }
}
