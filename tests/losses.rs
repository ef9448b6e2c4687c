//! Losses against direct host computations of their defining formulas.

use burn::tensor::{Device, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rdml::loss::distance::Distance;
use rdml::loss::miner::Triplets;
use rdml::loss::{contrastive, lifted, multisim, npair, triplet};

fn batch(n: usize, d: usize, seed: u64) -> Vec<f32> {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let mut v: Vec<f32> = (0..n * d).map(|_| r.random_range(-1.0..1.0)).collect();
    for row in v.chunks_mut(d) {
        let s = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        row.iter_mut().for_each(|x| *x /= s);
    }
    v
}

fn t2(v: &[f32], n: usize, d: usize) -> Tensor<2> {
    Tensor::<2>::from_data(TensorData::new(v.to_vec(), [n, d]), &Device::default())
}

fn scalar(t: Tensor<1>) -> f32 {
    t.into_scalar::<f32>()
}

fn dist(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>().sqrt()
}

#[test]
fn triplet_and_contrastive_hand_values() {
    // a = (1,0), p = (0,1), n = (-1,0): d(a,p) = √2, d(a,n) = 2.
    let e = t2(&[1.0, 0.0, 0.0, 1.0, -1.0, 0.0], 3, 2);
    let t = Triplets {
        anchor: vec![0],
        positive: vec![1].into(),
        negative: vec![2].into(),
    };
    let l = scalar(triplet::triplet_loss(&e, &t, Distance::NormalizedEuclidean, 1.0));
    assert!((l - (2f32.sqrt() - 2.0 + 1.0)).abs() < 1e-5, "{l}");
    assert_eq!(
        scalar(triplet::triplet_loss(&e, &t, Distance::NormalizedEuclidean, 0.2)),
        0.0
    );
    // Cosine: d(a,p) = 1, d(a,n) = 2 → [1 − 2 + 1.5]_+ = 0.5.
    let l = scalar(triplet::triplet_loss(&e, &t, Distance::Cosine, 1.5));
    assert!((l - 0.5).abs() < 1e-5, "{l}");
    // Contrastive with m⁻ = 2.5: pairs (√2) and [2.5 − 2]_+ = 0.5, averaged.
    let l = scalar(contrastive::contrastive_loss(
        &e,
        &t,
        Distance::NormalizedEuclidean,
        0.0,
        2.5,
    ));
    assert!((l - (2f32.sqrt() + 0.5) / 2.0).abs() < 1e-5, "{l}");
}

#[test]
fn lifted_multisim_npair_match_their_formulas() {
    let (n, d) = (8, 5);
    let v = batch(n, d, 3);
    let labels = [0u32, 0, 1, 1, 2, 2, 0, 3];
    let row = |i: usize| &v[i * d..(i + 1) * d];
    // Lifted structure (Song et al. Eq. 4), margin 1.
    let mut sum = 0.0f64;
    let mut pairs = 0;
    for i in 0..n {
        for j in i + 1..n {
            if labels[i] != labels[j] {
                continue;
            }
            pairs += 1;
            let mut s = 0.0f64;
            for k in 0..n {
                if labels[k] != labels[i] {
                    s += (1.0 - dist(row(i), row(k)) as f64).exp();
                }
                if labels[k] != labels[j] {
                    s += (1.0 - dist(row(j), row(k)) as f64).exp();
                }
            }
            let jij = s.ln() + dist(row(i), row(j)) as f64;
            sum += jij.max(0.0).powi(2);
        }
    }
    let want = sum / (2.0 * pairs as f64);
    let got = scalar(lifted::lifted_loss(
        Distance::Euclidean.matrix(t2(&v, n, d)),
        &labels,
        1.0,
    )) as f64;
    assert!((got - want).abs() < 1e-4 * want.max(1.0), "lifted {got} vs {want}");

    // Multi-similarity with all pairs kept (ε large).
    let (alpha, beta, base) = (2.0f64, 40.0f64, 0.5f64);
    let sim = |i: usize, j: usize| row(i).iter().zip(row(j)).map(|(a, b)| a * b).sum::<f32>() as f64;
    let mut want = 0.0;
    for i in 0..n {
        let (mut p, mut q) = (0.0, 0.0);
        for j in 0..n {
            if j != i && labels[j] == labels[i] {
                p += (-alpha * (sim(i, j) - base)).exp();
            } else if labels[j] != labels[i] {
                q += (beta * (sim(i, j) - base)).exp();
            }
        }
        let has_pos = (0..n).any(|j| j != i && labels[j] == labels[i]);
        if has_pos {
            want += (1.0 + p).ln() / alpha + (1.0 + q).ln() / beta;
        }
    }
    want /= n as f64;
    let s_host: Vec<f32> = (0..n * n).map(|k| sim(k / n, k % n) as f32).collect();
    let (pm, nm) = multisim::ms_masks(&s_host, &labels, 10.0);
    let e = t2(&v, n, d);
    let got = scalar(multisim::multisim_loss(
        e.clone().matmul(e.transpose()),
        pm,
        nm,
        2.0,
        40.0,
        0.5,
    )) as f64;
    assert!((got - want).abs() < 1e-4 * want.max(1.0), "ms {got} vs {want}");

    // N-pair over pairs (0,1), (2,3), (4,5): classes distinct, no masking.
    let pairs = [(0usize, 1usize), (2, 3), (4, 5)];
    let mut want = 0.0;
    for (i, &(a, _)) in pairs.iter().enumerate() {
        let logits: Vec<f64> = pairs.iter().map(|&(_, p)| sim(a, p)).collect();
        let lse = logits.iter().map(|l| l.exp()).sum::<f64>().ln();
        want += lse - logits[i];
    }
    want /= 3.0;
    want += pairs
        .iter()
        .map(|&(a, p)| (sim(a, a) + sim(p, p)) * 0.01 / 2.0)
        .sum::<f64>()
        / 3.0;
    let got = scalar(npair::npair_loss(&t2(&v, n, d), &pairs, &labels, 0.01)) as f64;
    assert!((got - want).abs() < 1e-5, "npair {got} vs {want}");
}
