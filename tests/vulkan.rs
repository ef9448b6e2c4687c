//! A GPU device gives the Flex results: forward and backward passes of C2F2 and a ResNet, a
//! PGD step, ACT, CA-TRIDE and MDProp defense steps, an Adam step, and a model trained on one
//! device evaluated on the other. Built with `--features vulkan` or `--features cuda`; the device is `RDML_GPU`
//! (`vulkan`, the default, `cuda`, `cuda:N`, …). CI runs them on Mesa's lavapipe, one test at a
//! time: two threads driving one wgpu device at once sometimes gave a ResNet forward pass wrong
//! results (not seen with one thread, which is how the rdml binary drives its device).
//! `bench/gpu_prepare.sh` packs this test binary, and `bench/gpu.sh` runs it on CUDA and on
//! Vulkan before it measures anything.
#![cfg(any(feature = "vulkan", feature = "cuda"))]

use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Distribution, Tensor};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rdml::attack::budget::{Norm, Pgd};
use rdml::attack::engine::Request;
use rdml::attack::objective::shift::EmbeddingShift;
use rdml::attack::suite::{self, Context};
use rdml::config::Experiment;
use rdml::data::loader::load_batch;
use rdml::device::{DeviceChoice, select};
use rdml::eval::batch_tensor;
use rdml::model::{Arch, EmbeddingNet, ModelConfig};
use rdml::train::{TrainOptions, Trainer, load_run, train};

const TOL: f32 = 1e-3;

fn gpu() -> Device {
    // burn loads optimizer state on `Device::default()`; the binary keeps that on the CPU.
    static ENV: std::sync::Once = std::sync::Once::new();
    // SAFETY: set once, before this test opens the device, from the only thread that runs
    // (CI runs these tests with --test-threads=1).
    ENV.call_once(|| unsafe { std::env::set_var("BURN_DEVICE", "flex") });
    let choice: DeviceChoice = std::env::var("RDML_GPU")
        .unwrap_or_else(|_| "vulkan".into())
        .parse()
        .expect("RDML_GPU: a device name");
    let s = select(choice).unwrap_or_else(|e| panic!("{choice}: {e:#} (CI installs Mesa's lavapipe for vulkan)"));
    eprintln!("gpu device: {}", s.description);
    s.device
}

fn cpu() -> Device {
    rdml::default_device()
}

fn host(t: Tensor<2>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

fn host4(t: Tensor<4>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

/// ‖a − b‖ / ‖b‖, the relative error of the whole tensor.
fn rel(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let d: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let n: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (d.sqrt() / n.sqrt().max(1e-30)) as f32
}

fn assert_close(what: &str, a: &[f32], b: &[f32]) {
    let r = rel(a, b);
    assert!(r <= TOL, "{what}: relative error {r:e} > {TOL:e}");
}

/// Every float parameter of a module, in visiting order, on the host.
fn params(m: &impl Module) -> Vec<Vec<f32>> {
    struct Collect(Vec<Vec<f32>>);
    impl burn::module::ModuleVisitor for Collect {
        fn visit_float<const D: usize>(&mut self, p: &burn::module::Param<Tensor<D>>) {
            self.0
                .push(p.val().into_data().convert::<f32>().try_to_vec::<f32>().unwrap());
        }
    }
    let mut c = Collect(vec![]);
    m.visit(&mut c);
    c.0
}

fn model(arch: Arch, in_shape: [usize; 3], device: &Device) -> EmbeddingNet {
    let cfg = ModelConfig {
        arch,
        embedding_dim: 32,
        l2_normalize: true,
        imagenet_norm: None,
        input_mean: None,
        input_std: None,
        pretrained: None,
        frozen_bn: false,
        bn_sets: 1,
    };
    rdml::seeded(device, 4, || EmbeddingNet::new(&cfg, in_shape, device).unwrap())
}

fn images(shape: [usize; 4], seed: u64, device: &Device) -> Tensor<4> {
    rdml::host_random(seed, shape, Distribution::Default, device)
}

/// Forward (train mode) and backward of `arch` on both devices: embeddings, the gradient with
/// respect to the input images and every parameter gradient agree.
fn forward_backward(arch: Arch, in_shape: [usize; 3], batch: usize) {
    let mut out = vec![];
    for device in [cpu().autodiff(), gpu().autodiff()] {
        let net = model(arch, in_shape, &device);
        let [c, h, w] = in_shape;
        let x = images([batch, c, h, w], 9, &device).require_grad();
        let e = net.forward(x.clone());
        // A loss that weights each output differently, so no gradient cancels out.
        let weights = rdml::host_random(2, e.shape(), Distribution::Normal(0.0, 1.0), &device);
        let loss = (e.clone() * weights).sum();
        let mut grads = loss.backward();
        let gx = x.grad(&grads).expect("input gradient");
        let gp = GradientsParams::from_module(&mut grads, &net);
        struct Collect<'a>(&'a GradientsParams, Vec<Vec<f32>>);
        impl burn::module::ModuleVisitor for Collect<'_> {
            fn visit_float<const D: usize>(&mut self, p: &burn::module::Param<Tensor<D>>) {
                if let Some(g) = self.0.get::<D>(p.id) {
                    self.1.push(g.into_data().convert::<f32>().try_to_vec::<f32>().unwrap());
                }
            }
        }
        let mut c = Collect(&gp, vec![]);
        net.visit(&mut c);
        out.push((host(e.inner()), host4(gx), c.1));
    }
    let (cpu_r, gpu_r) = (&out[0], &out[1]);
    assert_close("embeddings", &gpu_r.0, &cpu_r.0);
    assert_close("input gradient", &gpu_r.1, &cpu_r.1);
    assert_eq!(gpu_r.2.len(), cpu_r.2.len());
    assert!(!cpu_r.2.is_empty());
    for (i, (g, c)) in gpu_r.2.iter().zip(&cpu_r.2).enumerate() {
        assert_close(&format!("parameter gradient {i}"), g, c);
    }
}

#[test]
fn c2f2_forward_and_backward_agree() {
    forward_backward(Arch::C2f2, [1, 28, 28], 8);
}

#[test]
fn resnet_forward_and_backward_agree() {
    // ResNet-18 with batch norm in training mode (batch statistics), on small images.
    forward_backward(Arch::Resnet18, [3, 32, 32], 4);
}

/// Quickstart's config on the embedded Fashion-MNIST, 8 pairs of one class each.
fn fashion_batch(device: &Device) -> (Experiment, Tensor<4>, Vec<u32>) {
    let exp = Experiment::load("quickstart", &["model.embedding_dim=32".into()]).unwrap();
    let splits = exp.data.load(0).unwrap();
    let labels = &splits.train.labels;
    let mut idx = vec![];
    for c in 0..8u32 {
        idx.extend((0..labels.len()).filter(|&i| labels[i] == c).take(2));
    }
    let b = load_batch(&splits.train, &idx, None).unwrap();
    (exp, batch_tensor(&b, device), b.labels)
}

#[test]
fn a_pgd_step_agrees() {
    // L∞ steps on every row from the clean images (the ERS suite's case, which burn's kernel
    // fusion got wrong), and L2 steps from a random start on some rows.
    let mask: Vec<bool> = (0..8).map(|i| i % 3 != 0).collect();
    let cases = [(Norm::Linf, false, None), (Norm::L2, true, Some(&mask[..]))];
    for (norm, random_start, movable) in cases {
        let mut out = vec![];
        for device in [cpu(), gpu()] {
            let (exp, _, _) = fashion_batch(&device);
            // Random images: Fashion-MNIST's flat background ties max-pooling windows, and each
            // backend may route a tie's gradient to a different pixel (and an L∞ step follows
            // only the gradient's sign).
            let x = images([8, 1, 28, 28], 11, &device);
            let net = rdml::seeded(&device, 3, || {
                EmbeddingNet::new(&exp.model, [1, 28, 28], &device).unwrap()
            });
            let clean = net.forward(x.clone());
            let pgd = Pgd {
                eps: 0.1,
                step: 0.02,
                steps: 2,
                norm,
                random_start,
                start_radius: 1.0,
                project: true,
            };
            let xa = Request::new(&net, &EmbeddingShift::new(clean), &pgd)
                .movable(movable)
                .seed(5)
                .run(&x)
                .unwrap();
            out.push(host4(xa - x));
        }
        assert_close(&format!("{norm:?} PGD perturbation"), &out[1], &out[0]);
    }
}

/// A defended training step gives the CPU's loss and weights: ACT; CA-TRIDE's anchor
/// perturbation on semihard triplets mined on the device (the CPU told to mine as a GPU does);
/// MDProp's STAX and MTAX, whose targets are clean rows gathered on the device.
#[test]
fn the_defense_steps_agree() {
    use rdml::loss::device_miner::set_mine_on_device;
    let defenses = [
        "kind = \"act\"\neps = 0.1\nstep = 0.02\nsteps = 2\n",
        "kind = \"ca-tride\"\neps = 0.1\nstep = 0.02\nsteps = 2\nmode = \"anp-only\"\nprogressive = false\n",
        "kind = \"mdprop\"\neps = 0.1\nstep = 0.02\nsteps = 2\ndistributions = [{ kind = \"stax\" }, { kind = \"mtax\", targets = 3 }]\n",
    ];
    for defense in defenses {
        let mut out = vec![];
        for (device, on) in [(cpu().autodiff(), Some(true)), (gpu().autodiff(), None)] {
            set_mine_on_device(on);
            let (mut exp, _, labels) = fashion_batch(&device);
            // Random images, as in the PGD test (pooling ties), in the SPC-2 layout of 8 pairs.
            let x = images([16, 1, 28, 28], 12, &device);
            exp.defense = Some(toml::from_str(defense).unwrap());
            let trainer = Trainer::new(&exp, [1, 28, 28], &device).unwrap();
            let rng = &mut ChaCha8Rng::seed_from_u64(0);
            let items: Vec<usize> = (0..labels.len()).collect();
            let (trainer, loss, _) = trainer.step(&exp, x, &labels, &items, rng).unwrap();
            out.push((loss as f32, params(&trainer.net)));
        }
        set_mine_on_device(None);
        let (l_cpu, l_gpu) = (out[0].0, out[1].0);
        let name = defense.lines().next().unwrap_or_default();
        assert!(
            (l_gpu - l_cpu).abs() <= TOL * l_cpu.abs().max(1e-3),
            "{name}: loss {l_gpu} vs {l_cpu}"
        );
        for (i, (g, c)) in out[1].1.iter().zip(&out[0].1).enumerate() {
            assert_close(&format!("{name}: parameter {i} after the step"), g, c);
        }
    }
}

/// The device miners choose the same triplets on the GPU as on the CPU told to mine as a GPU
/// does: the same keys from the same seed, the same distances within rounding.
#[test]
fn the_device_miners_agree() {
    use rdml::loss::device_miner::{mine, set_mine_on_device};
    use rdml::loss::distance::Distance;
    use rdml::loss::miner::{Miner, Mining};
    let labels: Vec<u32> = (0..32).map(|i| i / 2).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let v: Vec<f32> = (0..32 * 16).map(|_| rand::Rng::random::<f32>(&mut rng) - 0.5).collect();
    for miner in [Miner::Semihard, Miner::Softhard, Miner::Distance, Miner::Hardest] {
        let mining = Mining {
            miner,
            margin: 0.2,
            ..Mining::default()
        };
        let mut out = vec![];
        for (device, on) in [(cpu(), Some(true)), (gpu(), None)] {
            set_mine_on_device(on);
            let e = Tensor::<2>::from_data(burn::tensor::TensorData::new(v.clone(), [32, 16]), &device);
            let e = rdml::model::l2_normalize(e);
            assert!(rdml::loss::device_miner::mines_on_device(&device));
            let t = mine(
                &mining,
                Distance::NormalizedEuclidean,
                &e,
                &labels,
                &mut ChaCha8Rng::seed_from_u64(1),
            );
            out.push((
                t.anchor.clone(),
                t.positive.host().unwrap().into_owned(),
                t.negative.host().unwrap().into_owned(),
            ));
        }
        set_mine_on_device(None);
        assert_eq!(out[0], out[1], "{miner:?}");
    }
}

#[test]
fn an_adam_step_agrees() {
    // rdml's fused Adam on the CPU, burn's Adam on the GPU, three steps with weight decay.
    let mut out = vec![];
    for device in [cpu().autodiff(), gpu().autodiff()] {
        let mut net = model(Arch::C2f2, [1, 28, 28], &device);
        let mut optim = ModuleOptimizer::from(rdml::kernel::adam::FusedAdam::new(0.9, 0.999, 1e-8, Some(1e-4)));
        for step in 0..3 {
            let x = images([4, 1, 28, 28], 20 + step, &device);
            let loss = net.forward(x).powi_scalar(3).sum();
            let mut grads = loss.backward();
            let g = GradientsParams::from_module(&mut grads, &net);
            net = optim.step(1e-2, net, g);
        }
        out.push(params(&net));
    }
    for (i, (g, c)) in out[1].iter().zip(&out[0]).enumerate() {
        assert_close(&format!("parameter {i} after 3 Adam steps"), g, c);
    }
}

#[test]
fn a_model_trained_on_one_device_evaluates_the_same_on_the_other() {
    let tmp = std::env::temp_dir().join(format!("rdml-test-vulkan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let exp = Experiment::load(
        "quickstart",
        &[
            "train.epochs=1".into(),
            "train.max_batches=3".into(),
            "train.sampler.pairs=32".into(),
            "model.embedding_dim=32".into(),
            "eval.nmi=false".into(),
            // 300 test images (of the shipped 10,000): lavapipe embeds the test split six
            // times here, at a few seconds per hundred images.
            "data.train_fraction=0.97".into(),
        ],
    )
    .unwrap();
    let mut reports = vec![];
    for (name, device) in [("cpu", cpu()), ("gpu", gpu())] {
        let out = tmp.join(name);
        let opts = TrainOptions {
            out: out.clone(),
            resume: false,
            progress: false,
            ..Default::default()
        };
        let r = train(&exp, &opts, &device).unwrap();
        reports.push((out, r));
    }
    // The same run on both devices (same seed, same batches) ends close.
    let (a, b) = (&reports[0].1, &reports[1].1);
    let (la, lb) = (a.epochs[0].mean_loss, b.epochs[0].mean_loss);
    assert!((la - lb).abs() <= 1e-3 * la.abs(), "training loss cpu {la} vs gpu {lb}");
    for (dir, _) in &reports {
        let mut metrics = vec![];
        for device in [cpu(), gpu()] {
            let run = load_run(dir, None, &device).unwrap();
            metrics.push(rdml::eval::evaluate(&run.net, &run.test, &run.exp.eval, run.exp.seed, &device).unwrap());
        }
        let (m_cpu, m_gpu) = (&metrics[0], &metrics[1]);
        for k in [1, 2, 4, 8] {
            let (c, g) = (m_cpu.recall_at(k).unwrap(), m_gpu.recall_at(k).unwrap());
            assert!((c - g).abs() <= 1e-3, "{}: R@{k} cpu {c} vs gpu {g}", dir.display());
        }
        let (c, g) = (m_cpu.retrieval.map_at_r, m_gpu.retrieval.map_at_r);
        assert!((c - g).abs() <= 1e-3, "{}: MAP@R cpu {c} vs gpu {g}", dir.display());
        // And attacked: embedding shift (ES) on 16 queries, 4 L∞ steps, on each device.
        let mut scores = vec![];
        for device in [cpu(), gpu()] {
            let run = load_run(dir, None, &device).unwrap();
            let ctx = Context::new(&run.net, &run.test.query, &device, false).unwrap();
            let pgd = Pgd {
                eps: 0.1,
                step: 0.03,
                steps: 4,
                norm: Norm::Linf,
                random_start: false,
                start_radius: 1.0,
                project: true,
            };
            scores.push(
                suite::run(
                    &ctx,
                    rdml::attack::registry::attack("ES").unwrap().as_ref(),
                    &pgd,
                    16,
                    16,
                    0,
                )
                .unwrap()
                .scores,
            );
        }
        assert_eq!(scores[0].len(), scores[1].len());
        for (c, g) in scores[0].iter().zip(&scores[1]) {
            let tol = 1e-3 * c.value.abs().max(1.0);
            assert!(
                (c.value - g.value).abs() <= tol,
                "{}: {} cpu {} vs gpu {}",
                dir.display(),
                c.name,
                c.value,
                g.value
            );
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

#[cfg(feature = "vulkan")]
#[test]
fn a_missing_driver_or_adapter_is_an_error_not_a_panic() {
    let e = select(DeviceChoice::Vulkan(Some(99))).unwrap_err().to_string();
    assert!(e.contains("⟨device⟩ vulkan:99: this machine has"), "{e}");
    let rdml = env!("CARGO_BIN_EXE_rdml");
    // No driver: the loader finds no ICD file.
    let out = std::process::Command::new(rdml)
        .args(["eval", "--model", "/nonexistent", "--device", "vulkan"])
        .env("VK_DRIVER_FILES", "/nonexistent/icd.json")
        .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no Vulkan device found"), "{err}");
    // `auto` falls back to the CPU there, and says so.
    let out = std::process::Command::new(rdml)
        .args(["devices"])
        .env("VK_DRIVER_FILES", "/nonexistent/icd.json")
        .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("auto → cpu"), "{text}");
}

/// A device's failure to allocate surfaces at the next read as an error that gets the
/// out-of-memory advice, not as a panic. 256 GiB is past any one GPU's memory and past the
/// largest buffer of any Vulkan driver (lavapipe's is 128 MiB).
#[test]
fn a_tensor_too_large_for_the_device_is_an_error_with_advice() {
    let dev = gpu();
    let big = Tensor::<2>::ones([1 << 26, 1024], &dev) * 2.0;
    let before = rdml::host::reads();
    let e = rdml::host::read(&big.slice([0..2, 0..4])).expect_err("256 GiB on one device");
    assert_eq!(rdml::host::reads(), before + 1);
    let msg = format!("{e:#}");
    let advice = rdml::device::out_of_memory_advice(&msg).unwrap_or_else(|| panic!("no advice for: {msg}"));
    assert!(advice.contains("lower the batch size"), "{advice}");
    // What the command line and Python print: the advice and the device's line that says why.
    let report = rdml::device::out_of_memory_report(&msg).unwrap();
    let why = report
        .lines()
        .last()
        .unwrap_or("")
        .to_ascii_lowercase()
        .replace('_', " ");
    assert!(
        why.starts_with("(from the device: ") && (why.contains("allocat") || why.contains("out of")),
        "{report}"
    );
    // The device still works after the failure.
    let small = Tensor::<2>::ones([2, 4], &dev) * 2.0;
    assert_eq!(rdml::host::read(&small).unwrap(), vec![2.0; 8]);
}
