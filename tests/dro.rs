//! The DRO framework (seed 002) against the losses it claims to recover and against direct host
//! computations of its definitions, on random batches of unit embeddings.

use burn::tensor::{Device, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rdml::config::Experiment;
use rdml::loss::dro::{Dro, PairLoss, UncertaintySet};
use rdml::loss::multisim;

/// A tensor's values on the host (the test fails if the read does).
fn read(t: &burn::tensor::Tensor<2>) -> Vec<f32> {
    rdml::host::read(t).unwrap()
}

/// Cosine similarities of `n` random unit vectors in 16-d, and labels of `classes` classes.
fn batch(n: usize, classes: u32, seed: u64) -> (Vec<f32>, Vec<u32>) {
    let d = 16;
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let mut e: Vec<f32> = (0..n * d).map(|_| r.random_range(-1.0..1.0)).collect();
    for row in e.chunks_mut(d) {
        let s = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        row.iter_mut().for_each(|x| *x /= s);
    }
    let mut s = vec![0f32; n * n];
    for i in 0..n {
        for j in 0..n {
            s[i * n + j] = (0..d).map(|k| e[i * d + k] * e[j * d + k]).sum();
        }
    }
    (s, (0..n as u32).map(|i| i % classes).collect())
}

/// DRO over `set` with the margin base loss (m = 0.2, λ = 0.5).
fn weighted(set: UncertaintySet) -> Dro {
    Dro::Weighted {
        set,
        base: PairLoss::Margin {
            margin: 0.2,
            lambda: 0.5,
        },
        keep_zero_loss: false,
    }
}

/// DRO-KL-G with γ⁺ = γ⁻ = `gamma` over the margin base loss with margin `margin`.
fn kl_g(margin: f32, gamma: f32) -> Dro {
    Dro::Weighted {
        set: UncertaintySet::KlG {
            gamma_pos: gamma,
            gamma_neg: gamma,
        },
        base: PairLoss::Margin { margin, lambda: 0.5 },
        keep_zero_loss: false,
    }
}

/// A leaf `[n, n]` tensor on the autodiff device.
fn leaf(s: &[f32], n: usize) -> Tensor<2> {
    Tensor::<2>::from_data(TensorData::new(s.to_vec(), [n, n]), &Device::default().autodiff()).require_grad()
}

/// Value of `f(S)` and its gradient w.r.t. `S`.
fn value_and_grad(s: &[f32], n: usize, f: impl FnOnce(Tensor<2>) -> Tensor<1>) -> (f32, Vec<f32>) {
    let x = leaf(s, n);
    let l = f(x.clone());
    let v = l.clone().into_scalar::<f32>();
    let g = l.backward();
    let grad = x.grad(&g).map(|t| read(&t)).unwrap_or_default();
    (v, grad)
}

fn assert_close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    assert!(worst <= tol, "{what}: max |Δ| = {worst}");
    assert!(a.iter().any(|x| x.abs() > 1e-4), "{what}: gradient is all zero");
}

fn rng() -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(7)
}

/// Host margin loss of every off-diagonal pair: (loss, positive?).
fn host_pairs(s: &[f32], labels: &[u32], m: f32, lambda: f32) -> Vec<(f32, bool)> {
    let n = labels.len();
    let mut out = vec![];
    for i in 0..n {
        for j in 0..n {
            if i != j {
                let pos = labels[i] == labels[j];
                let l = if pos {
                    m + lambda - s[i * n + j]
                } else {
                    m + s[i * n + j] - lambda
                };
                out.push((l.max(0.0), pos));
            }
        }
    }
    out
}

#[test]
fn kl_g_at_gamma_one_has_the_lifted_structure_gradient() {
    let (n, lambda) = (24, 0.5);
    let (s, labels) = batch(n, 4, 1);
    // A margin large enough that every pair's margin loss is active (the paper's assumption).
    let d = kl_g(2.0, 1.0);
    let (_, g_dro) = value_and_grad(&s, n, |x| d.loss(x, &labels, &mut rng()).unwrap());
    // The lifted-structure loss in its similarity form (Eq. 3), summed over anchors as Eq. 6 sums
    // the per-anchor distributions.
    let (pm, nm) = rdml::loss::dro::sign_masks(&labels);
    let (v_ls, g_ls) = value_and_grad(&s, n, |x| {
        let dev = x.device();
        let pm = Tensor::<2>::from_data(TensorData::new(pm, [n, n]), &dev);
        let nm = Tensor::<2>::from_data(TensorData::new(nm, [n, n]), &dev);
        let pos = (x.clone().neg().add_scalar(lambda).exp() * pm).sum_dim(1).log();
        let neg = (x.sub_scalar(lambda).exp() * nm).sum_dim(1).log();
        burn::tensor::activation::relu(pos + neg).sum()
    });
    assert!(v_ls > 0.0);
    assert_close(&g_dro, &g_ls, 1e-6, "DRO-KL-G(γ=1) vs lifted structure");
}

#[test]
fn ls_is_eq_3_summed_over_anchors() {
    let (n, lambda) = (24, 0.5);
    let (s, labels) = batch(n, 4, 1);
    let d = Dro::Ls { lambda };
    let (v, g) = value_and_grad(&s, n, |x| d.loss(x, &labels, &mut rng()).unwrap());
    // Eq. 3 by hand on the host: per anchor, both log-sum-exps, hinge, sum.
    let mut want = 0.0f64;
    for i in 0..n {
        let (mut p, mut q) = (0.0f64, 0.0f64);
        for j in (0..n).filter(|&j| j != i) {
            let sij = s[i * n + j] as f64;
            if labels[i] == labels[j] {
                p += (lambda as f64 - sij).exp();
            } else {
                q += (sij - lambda as f64).exp();
            }
        }
        want += (p.ln() + q.ln()).max(0.0);
    }
    assert!(want > 0.0);
    assert!((v as f64 - want).abs() < 1e-4 * want, "{v} vs {want}");
    // Its gradient is KL-G's at γ = 1 where every pair is active (the paper's Sec. 3.3; this
    // batch is the one of `kl_g_at_gamma_one_has_the_lifted_structure_gradient`).
    let kl_g = kl_g(2.0, 1.0);
    let (_, g_kl) = value_and_grad(&s, n, |x| kl_g.loss(x, &labels, &mut rng()).unwrap());
    assert_close(&g, &g_kl, 1e-5, "LS vs DRO-KL-G(γ=1)");
}

#[test]
fn ms_recovery_has_the_multi_similarity_gradient() {
    let n = 32;
    let (s, labels) = batch(n, 4, 2);
    let (alpha, beta, lambda, eps) = (2.0, 50.0, 0.5, 0.1);
    // c⁺ = c⁻ = λ (m = 0), γ⁺ = 1/α, γ⁻ = 1/β, the same ε-mining.
    let d = Dro::Ms {
        margin: 0.0,
        lambda,
        gamma_pos: 1.0 / alpha,
        gamma_neg: 1.0 / beta,
        epsilon: eps,
    };
    let (_, g_dro) = value_and_grad(&s, n, |x| d.loss(x, &labels, &mut rng()).unwrap());
    let (pm, nm) = multisim::ms_masks(&s, &labels, eps);
    assert!(pm.iter().sum::<f32>() > 0.0 && nm.iter().sum::<f32>() > 0.0);
    let (_, g_ms) = value_and_grad(&s, n, |x| multisim::multisim_loss(x, pm, nm, alpha, beta, lambda));
    assert_close(&g_dro, &g_ms, 1e-6, "DRO-MS vs multi-similarity");
}

#[test]
fn hap2s_e_is_kl_g_with_the_same_gamma() {
    let n = 20;
    let (s, labels) = batch(n, 5, 3);
    let base = kl_g(2.0, 0.3);
    let (_, g_kl) = value_and_grad(&s, n, |x| base.loss(x, &labels, &mut rng()).unwrap());
    let h = Dro::Hap2sE {
        gamma_pos: 0.3,
        gamma_neg: 0.3,
        margin: 2.0,
    };
    let (_, g_h) = value_and_grad(&s, n, |x| h.loss(x, &labels, &mut rng()).unwrap());
    // HAP2S averages over anchors where Eq. 6 sums: the same gradient up to the factor n.
    let g_h: Vec<f32> = g_h.iter().map(|g| g * n as f32).collect();
    assert_close(&g_kl, &g_h, 1e-5, "HAP2S_E vs DRO-KL-G");
}

#[test]
fn top_k_is_the_mean_with_all_pairs_and_the_max_with_one() {
    let n = 16;
    let (s, labels) = batch(n, 4, 4);
    let pairs = host_pairs(&s, &labels, 0.2, 0.5);
    let all = n * (n - 1);
    let mean = pairs.iter().map(|p| p.0).sum::<f32>() / all as f32;
    let max = pairs.iter().map(|p| p.0).fold(0f32, f32::max);
    assert!(
        pairs.iter().filter(|p| p.0 > 0.0).count() < all,
        "want some zero-loss pairs"
    );
    let value = |k: usize| {
        let d = weighted(UncertaintySet::TopK { k });
        value_and_grad(&s, n, |x| d.loss(x, &labels, &mut rng()).unwrap()).0
    };
    assert!((value(all) - mean).abs() < 1e-6, "{} vs {mean}", value(all));
    assert!((value(1) - max).abs() < 1e-6, "{} vs {max}", value(1));
    // K = 10: the ten largest, over 10.
    let mut ls: Vec<f32> = pairs.iter().map(|p| p.0).collect();
    ls.sort_by(|a, b| b.total_cmp(a));
    let top10 = ls[..10].iter().sum::<f32>() / 10.0;
    assert!((value(10) - top10).abs() < 1e-6);
}

#[test]
fn top_k_pn_takes_half_from_each_sign() {
    let n = 18;
    let (s, labels) = batch(n, 3, 5);
    let pairs = host_pairs(&s, &labels, 0.2, 0.5);
    let top = |pos: bool, k: usize| {
        let mut v: Vec<f32> = pairs.iter().filter(|p| p.1 == pos).map(|p| p.0).collect();
        v.sort_by(|a, b| b.total_cmp(a));
        v[..k].iter().sum::<f32>()
    };
    let k = 24;
    let d = weighted(UncertaintySet::TopKPn { k });
    let (v, g) = value_and_grad(&s, n, |x| d.loss(x, &labels, &mut rng()).unwrap());
    let want = (top(true, 12) + top(false, 12)) / k as f32;
    assert!((v - want).abs() < 1e-6, "{v} vs {want}");
    // Exactly 12 positive and 12 negative entries carry a gradient of ∓1/K.
    let (mut gp, mut gn) = (0, 0);
    for i in 0..n {
        for j in 0..n {
            let x = g[i * n + j];
            if x != 0.0 {
                assert!((x.abs() - 1.0 / k as f32).abs() < 1e-7);
                if labels[i] == labels[j] { gp += 1 } else { gn += 1 }
            }
        }
    }
    assert_eq!((gp, gn), (12, 12));
    // K/2 = 150 exceeds the 90 positive pairs: the mean runs over the pairs selected, not K.
    let k = 300;
    let d = weighted(UncertaintySet::TopKPn { k });
    let (v, _) = value_and_grad(&s, n, |x| d.loss(x, &labels, &mut rng()).unwrap());
    let active = |pos: bool| pairs.iter().filter(|p| p.1 == pos && p.0 > 0.0).count().min(k / 2);
    let chosen = active(true) + active(false);
    assert!(chosen < k, "{chosen}");
    let want = (top(true, active(true)) + top(false, active(false))) / chosen as f32;
    assert!((v - want).abs() < 1e-6, "{v} vs {want} ({chosen} pairs)");
}

#[test]
fn kl_weights_are_the_softmax_of_losses_and_sampling_estimates_them() {
    let n = 20;
    let (s, labels) = batch(n, 4, 6);
    let gamma = 0.3;
    let ls: Vec<f32> = host_pairs(&s, &labels, 0.2, 0.5)
        .into_iter()
        .map(|p| p.0)
        .filter(|&l| l > 0.0)
        .collect();
    let z: f64 = ls.iter().map(|&l| (l as f64 / gamma).exp()).sum();
    let want: f64 = ls.iter().map(|&l| (l as f64 / gamma).exp() / z * l as f64).sum();
    let d = weighted(UncertaintySet::Kl {
        gamma: gamma as f32,
        sample_pairs: None,
    });
    let exact = value_and_grad(&s, n, |x| d.loss(x, &labels, &mut rng()).unwrap()).0;
    assert!((exact as f64 - want).abs() < 1e-5, "{exact} vs {want}");
    // p-sampling: the mean loss of pairs drawn from p* is an unbiased estimate of Σ p* l.
    let sampled = weighted(UncertaintySet::Kl {
        gamma: gamma as f32,
        sample_pairs: Some(50),
    });
    let mut r = rng();
    let est: f64 = (0..400)
        .map(|_| value_and_grad(&s, n, |x| sampled.loss(x, &labels, &mut r).unwrap()).0 as f64)
        .sum::<f64>()
        / 400.0;
    assert!((est - want).abs() < 0.01 * want, "{est} vs {want}");
}

#[test]
fn binomial_base_loss_values() {
    let n = 12;
    let (s, labels) = batch(n, 3, 8);
    let (a, b, lambda) = (2.0f64, 50.0f64, 0.5f64);
    let mut sum = 0.0;
    for i in 0..n {
        for j in 0..n {
            if i != j {
                let x = s[i * n + j] as f64 - lambda;
                sum += if labels[i] == labels[j] {
                    (-a * x).exp().ln_1p() / a
                } else {
                    (b * x).exp().ln_1p() / b
                };
            }
        }
    }
    let all = n * (n - 1);
    let d = Dro::Weighted {
        set: UncertaintySet::TopK { k: all },
        base: PairLoss::Binomial {
            alpha: a as f32,
            beta: b as f32,
            lambda: lambda as f32,
        },
        keep_zero_loss: false,
    };
    let v = value_and_grad(&s, n, |x| d.loss(x, &labels, &mut rng()).unwrap()).0 as f64;
    assert!((v - sum / all as f64).abs() < 1e-5, "{v}");
}

#[test]
fn config_rejects_options_the_variant_does_not_use() {
    let parse = |loss: &str| {
        let text = format!(
            "name = \"t\"\n[data]\ndataset = \"synthetic\"\n[model]\narch = \"c2f2\"\n[train]\nepochs = 1\nsampler = {{ kind = \"spc2\", pairs = 8 }}\noptimizer = {{ lr = 1e-3 }}\n[loss]\nkind = \"dro\"\n{loss}\n"
        );
        Experiment::from_toml(&text, "t.toml", &[])
    };
    let e = parse("variant = \"kl\"\nk = 10")
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(e.contains("loss.k is not used by variant \"kl\""), "{e}");
    let e = parse("variant = \"top-k\"")
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(e.contains("loss.k"), "{e}");
    let e = parse("variant = \"ms\"\nbase = \"binomial\"")
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(e.contains("binomial"), "{e}");
    let ok = parse("variant = \"kl-g\"\ngamma = 0.01");
    assert!(ok.is_ok(), "{:?}", ok.err());
}

/// DRO-TopK's k is checked against the ordered pairs of the training batch when the config loads.
#[test]
fn topk_beyond_the_batch_pairs_is_refused_naming_the_field() {
    let load = |k: usize| {
        rdml::config::Experiment::load(
            "fashion-c2f2-dro-topk",
            &[format!("loss.k={k}"), "train.sampler.pairs=4".into()],
        )
    };
    // 8 items: 56 ordered pairs.
    assert!(load(56).is_ok());
    let e = load(57).err().map(|e| format!("{e:#}")).unwrap_or_default();
    assert!(
        e.contains("loss.k = 57 exceeds the 56 ordered pairs of a batch of 8"),
        "{e}"
    );
}

/// Every DRO preset's table is read into its variant once, and what rdml writes of it reads back
/// to the same loss; an option's default is the paper's.
#[test]
fn dro_tables_read_into_their_variant_and_write_back() {
    use rdml::loss::LossConfig;
    for (name, _) in rdml::config::PRESETS.iter().filter(|p| p.0.contains("dro")) {
        let e = Experiment::load(name, &[]).unwrap();
        let LossConfig::Dro(d) = e.loss else {
            panic!("{name}: not a DRO loss")
        };
        let back = Experiment::from_toml(&e.to_toml().unwrap(), "written", &[]).unwrap();
        assert_eq!(back.loss, LossConfig::Dro(d), "{name}");
        let json: Experiment = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert_eq!(json.loss, LossConfig::Dro(d), "{name}");
    }
    let kl = Experiment::load("fashion-c2f2-dro-kl", &["loss.gamma=0.3".into()]).unwrap();
    assert_eq!(
        kl.loss,
        LossConfig::Dro(weighted(UncertaintySet::Kl {
            gamma: 0.3,
            sample_pairs: None
        }))
    );
    let ms = Experiment::load("fashion-c2f2-dro-ms", &[]).unwrap();
    let LossConfig::Dro(Dro::Ms {
        gamma_pos,
        gamma_neg,
        epsilon,
        ..
    }) = ms.loss
    else {
        panic!("not MS: {:?}", ms.loss)
    };
    assert_eq!((gamma_pos, gamma_neg, epsilon), (0.5, 0.02, 0.1));
    // A run.json of an earlier rdml wrote every option, null where unset.
    let old = serde_json::json!({"kind": "dro", "variant": "top-k", "base": "margin", "k": 64,
        "gamma": null, "gamma_pos": null, "gamma_neg": null, "margin": 0.2, "lambda": 0.5,
        "alpha": null, "beta": null, "sample_pairs": null, "epsilon": null, "keep_zero_loss": false});
    let read: LossConfig = serde_json::from_value(old).unwrap();
    assert_eq!(read, LossConfig::Dro(weighted(UncertaintySet::TopK { k: 64 })));
}
