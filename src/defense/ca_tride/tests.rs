//! CA-TRIDE's equations by hand.

use super::*;

#[test]
fn margin_schedules_by_hand() {
    let m = |s, e| margin_schedule(s, 0.2, e, 10).unwrap();
    // Eq. 32 at the last epoch (e/2E → 1/2): 0.2·(1 − 1/4) = 0.15; the reference's 0.05.
    assert!((m(MarginSchedule::Paper, 10) - 0.15).abs() < 1e-6);
    assert!((m(MarginSchedule::Reference, 10) - 0.05).abs() < 1e-6);
    assert!((m(MarginSchedule::Paper, 5) - 0.2 * (1.0 - 0.0625)).abs() < 1e-6);
    assert_eq!(margin_schedule(MarginSchedule::Off, 0.2, 3, 10), None);
    #[derive(Deserialize)]
    struct T {
        m: MarginSchedule,
    }
    let p = |t: &str| toml::from_str::<T>(t).map(|t| t.m);
    assert_eq!(p("m = true").unwrap(), MarginSchedule::Paper);
    assert_eq!(p("m = false").unwrap(), MarginSchedule::Off);
    assert_eq!(p("m = \"reference\"").unwrap(), MarginSchedule::Reference);
    assert!(p("m = \"eq32\"").is_err());
}

fn dev() -> burn::tensor::Device {
    crate::default_device().autodiff()
}

#[test]
fn top_rank_triplet_has_no_hinge_unless_asked() {
    // d(A,P) = 0, d(A,N) = 2 (Euclidean): Eq. 13 gives γ(0 − 2 + 0.04) = 0.5·(−1.96).
    let a = Tensor::<2>::from_floats([[0.0, 0.0]], &dev());
    let n = Tensor::<2>::from_floats([[2.0, 0.0]], &dev());
    let l =
        |h| top_rank_triplet(a.clone(), a.clone(), n.clone(), Distance::Euclidean, 0.5, 0.04, h).into_scalar::<f32>();
    assert!((l(false) + 0.98).abs() < 1e-5, "{}", l(false));
    assert_eq!(l(true), 0.0);
}

/// The CAP/ANP objective on one triplet, ANP (anchor moving) unless `cap`.
fn tride(cap: bool, top_rank: bool, collapse_aware: bool) -> TrideObjective {
    TrideObjective {
        layout: TripletLayout { t: 1 },
        distance: Distance::Euclidean,
        cap,
        adversary: Adversary::Hardness,
        lambda: 10.0,
        code_anp: false,
        clean_anchor: Tensor::<2>::from_floats([[0.5, 0.0]], &dev()),
        top_rank,
        collapse_aware,
    }
}

#[test]
fn without_tpr_anp_is_the_clipped_collapse_term_and_naive_adversaries_are_unclipped() {
    // a = (0,0), p = (1,0), n = (3,0): C = d(a,p) − d(a,n) = −2, so −C = 2; A₀ = (0.5, 0).
    let emb = || Tensor::<2>::from_floats([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0]], &dev());
    let l = |o: TrideObjective| o.loss(emb(), 0).into_scalar::<f32>();
    // Δ_TR = e^0 (d(Ã, N) − d(Ã, A₀)) = 3 − 0.5: with TPR the loss is [2 + 2.5]_+.
    assert!((l(tride(false, true, true)) - 4.5).abs() < 1e-4);
    // "w/o TPR": ANP's loss is [−C]_+ alone, as CAP's.
    assert!((l(tride(false, false, true)) - 2.0).abs() < 1e-4);
    assert!((l(tride(true, true, true)) - 2.0).abs() < 1e-4);
    // Past the collapse point (C = d(a,p) − d(a,n) = 2 > 0): the collapse-aware CAP stops
    // at 0, the naive one keeps going below it and never stops early.
    let collapsed = || Tensor::<2>::from_floats([[0.0, 0.0], [3.0, 0.0], [1.0, 0.0]], &dev());
    let aware = tride(true, true, true);
    let naive = tride(true, true, false);
    assert_eq!(aware.loss(collapsed(), 0).into_scalar::<f32>(), 0.0);
    assert!((naive.loss(collapsed(), 0).into_scalar::<f32>() + 2.0).abs() < 1e-4);
    assert_eq!(aware.stop_rule(), Some(StopRule::Below(1e-5)));
    assert_eq!(naive.stop_rule(), None);
}

#[test]
fn collapseness_weights_carry_gradient() {
    // f(d) = Σ w d / Σ w, w = e^{−λ d}: ∂f/∂d_i = w_i (1 − λ(d_i − f)) / Σ w. With the
    // weights detached it would be w_i / Σ w; compare with central differences.
    let (lambda, d) = (2.0f32, [0.3f32, 0.7, 1.1]);
    let f = |d: &[f32]| {
        let w: Vec<f32> = d.iter().map(|x| (-lambda * x).exp()).collect();
        w.iter().zip(d).map(|(w, x)| w * x).sum::<f32>() / w.iter().sum::<f32>()
    };
    let t = Tensor::<1>::from_floats(d, &dev()).require_grad();
    let g = weighted_mean(t.clone(), lambda).backward();
    let grad = t.grad(&g).unwrap().into_data().try_into_vec::<f32>().unwrap();
    for i in 0..3 {
        let (mut hi, mut lo) = (d, d);
        hi[i] += 1e-3;
        lo[i] -= 1e-3;
        let num = (f(&hi) - f(&lo)) / 2e-3;
        assert!(
            (grad[i] - num).abs() < 1e-3,
            "∂/∂d{i}: autodiff {} vs numeric {num}",
            grad[i]
        );
    }
}
