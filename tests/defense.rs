//! Each defense perturbs exactly the items its paper says, in the direction it says, on a small
//! C2F2 and real Fashion-MNIST images (SPC-2 batch of 8 pairs).

use burn::tensor::{Device, Tensor};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rdml::config::Experiment;
use rdml::data::loader::load_batch;
use rdml::defense::{DefenseConfig, DefenseState, Destination, HmObjective, Perturbed, TripletLayout, perturb};
use rdml::eval::batch_tensor;
use rdml::loss::distance::Distance;
use rdml::loss::miner::Miner;
use rdml::model::EmbeddingNet;

/// A tensor's values on the host (the test fails if the read does).
fn read(t: &burn::tensor::Tensor<2>) -> Vec<f32> {
    rdml::host::read(t).unwrap()
}

const EPS: f32 = 0.1;

/// A small model and one SPC-2 batch; `run` applies a defense's inner maximisation to it.
struct Batch {
    exp: Experiment,
    net: EmbeddingNet,
    x: Tensor<4>,
    labels: Vec<u32>,
}

impl Batch {
    fn run(&self, cfg: &DefenseConfig, state: &DefenseState) -> Perturbed {
        let rng = &mut ChaCha8Rng::seed_from_u64(0);
        let model = rdml::attack::oracle::Net::new(&self.net, 0);
        perturb(cfg, &self.exp.loss, &[&model], &self.x, &self.labels, state, rng).unwrap()
    }
}

fn setup() -> Batch {
    setup_with(&[])
}

/// `setup` with config overrides (`loss=…`).
fn setup_with(overrides: &[&str]) -> Batch {
    let mut o = vec!["model.embedding_dim=32".to_string()];
    o.extend(overrides.iter().map(|s| s.to_string()));
    let exp = Experiment::load("quickstart", &o).unwrap();
    let splits = exp.data.load(0).unwrap();
    let dev = Device::default();
    let net = rdml::seeded(&dev, 3, || EmbeddingNet::new(&exp.model, [1, 28, 28], &dev).unwrap());
    // SPC-2 layout: pairs of one class, 8 classes.
    let labels = &splits.train.labels;
    let mut idx = vec![];
    for c in 0..8u32 {
        let of: Vec<usize> = (0..labels.len()).filter(|&i| labels[i] == c).take(2).collect();
        idx.extend(of);
    }
    let b = load_batch(&splits.train, &idx, None).unwrap();
    let x = batch_tensor(&b, &dev);
    Batch {
        exp,
        net,
        x,
        labels: b.labels,
    }
}

fn pgd_cfg(kind: &str) -> DefenseConfig {
    let text = format!("kind = \"{kind}\"\neps = {EPS}\nstep = 0.01\nsteps = 12\n");
    toml::from_str(&text).unwrap()
}

/// Max |Δ| per row between two image tensors.
fn row_change(a: &Tensor<4>, b: &Tensor<4>) -> Vec<f32> {
    let n = a.dims()[0];
    let d = (a.clone() - b.clone()).abs().reshape([n as i32, -1]).max_dim(1);
    read(&d)
}

fn thirds(v: &[f32]) -> [&[f32]; 3] {
    let t = v.len() / 3;
    [&v[..t], &v[t..2 * t], &v[2 * t..]]
}

/// Embeddings of `x` in evaluation mode, `[a, p, n]` thirds as tensors.
fn embed3(net: &EmbeddingNet, x: &Tensor<4>) -> (Tensor<2>, Tensor<2>, Tensor<2>) {
    let e = net.forward(x.clone());
    TripletLayout { t: e.dims()[0] / 3 }.split(e)
}

fn mean(t: Tensor<1>) -> f32 {
    t.mean().into_scalar::<f32>()
}

#[test]
fn act_moves_positives_and_negatives_toward_each_other_and_not_the_anchor() {
    let b = setup();
    let Batch { net, .. } = &b;
    let p = b.run(&pgd_cfg("act"), &DefenseState::default());
    let ch = row_change(&p.adversarial, &p.original);
    let [a, pos, neg] = thirds(&ch);
    assert!(a.iter().all(|&c| c == 0.0), "anchors moved: {a:?}");
    assert!(pos.iter().chain(neg).all(|&c| c > 0.0 && c <= EPS + 1e-6), "{ch:?}");
    let d = Distance::NormalizedEuclidean;
    let (_, p0, n0) = embed3(net, &p.original);
    let (_, p1, n1) = embed3(net, &p.adversarial);
    let (before, after) = (mean(d.rows(p0, n0)), mean(d.rows(p1, n1)));
    assert!(after < 0.7 * before, "d(p, n) {before} → {after}");
}

#[test]
fn madry_moves_the_whole_triplet_and_raises_its_hardness() {
    let b = setup();
    let Batch { net, .. } = &b;
    let p = b.run(&pgd_cfg("madry"), &DefenseState::default());
    assert!(
        row_change(&p.adversarial, &p.original)
            .iter()
            .all(|&c| c > 0.0 && c <= EPS + 1e-6)
    );
    let d = Distance::NormalizedEuclidean;
    let (a0, p0, n0) = embed3(net, &p.original);
    let (a1, p1, n1) = embed3(net, &p.adversarial);
    let h0 = mean(rdml::defense::hardness(a0, p0, n0, d));
    let h1 = mean(rdml::defense::hardness(a1, p1, n1, d));
    assert!(h1 > h0 + 0.1, "hardness {h0} → {h1}");
}

#[test]
fn est_shifts_every_image_and_the_shift_grows_with_eps() {
    let b = setup();
    let Batch { net, x, .. } = &b;
    let shift = |eps: f32| {
        let cfg: DefenseConfig =
            toml::from_str(&format!("kind = \"est\"\neps = {eps}\nstep = 0.01\nsteps = 8\n")).unwrap();
        let p = b.run(&cfg, &DefenseState::default());
        assert_eq!(p.adversarial.dims(), x.dims());
        let moved = row_change(&p.adversarial, &p.original);
        let e0 = net.forward(p.original.clone());
        let e1 = net.forward(p.adversarial.clone());
        (moved, mean(Distance::Euclidean.rows(e0, e1)))
    };
    let (m0, s0) = shift(0.0);
    assert!(m0.iter().all(|&c| c == 0.0) && s0 < 1e-5, "ε = 0 moved: {s0}");
    let (m1, s1) = shift(0.03);
    let (_, s2) = shift(0.1);
    assert!(m1.iter().all(|&c| c > 0.0));
    assert!(0.0 < s1 && s1 < s2, "shift {s1} (ε 0.03) vs {s2} (ε 0.1)");
}

fn hm(destination: Destination, source: Miner) -> DefenseConfig {
    DefenseConfig::Hm(rdml::defense::hm::HmConfig {
        eps: EPS,
        step: 0.005,
        steps: 24,
        source,
        destination,
        objective: HmObjective::Et,
        ics: None,
        start: Default::default(),
        noise: None,
        project: true,
    })
}

#[test]
fn hm_stops_at_the_destination_hardness() {
    let b = setup();
    let Batch { net, .. } = &b;
    // LGA with ℓ̄_{t−1} = 0.1 and γ = 0.2: H_D = −0.1 for every triplet.
    let state = DefenseState::default().remembering("prev_loss", 0.1);
    let p = b.run(&hm(Destination::Lga, Miner::Random), &state);
    let d = Distance::NormalizedEuclidean;
    let (a0, p0, n0) = embed3(net, &p.original);
    let (a1, p1, n1) = embed3(net, &p.adversarial);
    let h0 = read(&rdml::defense::hardness(a0, p0, n0, d).unsqueeze_dim(1));
    let h1 = read(&rdml::defense::hardness(a1, p1, n1, d).unsqueeze_dim(1));
    let ch = row_change(&p.adversarial, &p.original);
    let t = h0.len();
    let (mut easy, mut reached) = (0, 0);
    for k in 0..t {
        let rows = [ch[k], ch[t + k], ch[2 * t + k]];
        if h0[k] >= -0.1 {
            // Already at least as hard as the destination: ET has no gradient, nothing moves.
            assert!(rows.iter().all(|&c| c == 0.0), "triplet {k} (H {}) moved", h0[k]);
        } else {
            easy += 1;
            assert!(rows.iter().any(|&c| c > 0.0));
            // Pushed up to the destination and not far past it (one step's overshoot).
            assert!(h1[k] > h0[k], "triplet {k}: {} → {}", h0[k], h1[k]);
            assert!(h1[k] < -0.1 + 0.1, "triplet {k} overshot: {}", h1[k]);
            if h1[k] >= -0.1 - 1e-3 {
                reached += 1;
            }
        }
    }
    assert!(easy > 0, "no triplet below the destination: {h0:?}");
    assert!(reached * 2 >= easy, "{reached} of {easy} reached H_D: {h1:?}");
}

#[test]
fn hm_with_equal_source_and_destination_does_not_attack() {
    let b = setup();
    let p = b.run(&hm(Destination::Semihard, Miner::Semihard), &DefenseState::default());
    assert!(row_change(&p.adversarial, &p.original).iter().all(|&c| c == 0.0));
}

#[test]
fn triplet_defenses_require_the_triplet_loss() {
    let e = Experiment::load("fashion-c2f2-act", &["loss={kind=\"multi-similarity\"}".into()])
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(e.contains("needs loss.kind = \"triplet\""), "{e}");
}

fn ca_tride(mode: &str) -> DefenseConfig {
    let text = format!("kind = \"ca-tride\"\neps = {EPS}\nstep = 0.02\nsteps = 16\nmode = \"{mode}\"\n");
    toml::from_str(&text).unwrap()
}

fn at(steps_done: u64) -> DefenseState {
    // Second epoch of two: the progressive step is half the configured one.
    DefenseState {
        steps_done,
        epoch: 1,
        epochs: 2,
        ..DefenseState::default()
    }
}

#[test]
fn ca_tride_alternates_cap_and_anp_and_each_moves_only_its_items() {
    let b = setup();
    let Batch { net, .. } = &b;
    let d = Distance::NormalizedEuclidean;
    let collapseness = |x: &Tensor<4>| {
        let (a, p, n) = embed3(net, x);
        rdml::defense::ca_tride::collapseness(d.rows(a.clone(), p), d.rows(a, n), 10.0).into_scalar::<f32>()
    };
    // Step 0 (CAP): anchors frozen, candidates moved, collapseness raised.
    let cap = b.run(&ca_tride("tride"), &at(0));
    let ch = row_change(&cap.adversarial, &cap.original);
    let [a, p, n] = thirds(&ch);
    assert!(a.iter().all(|&c| c == 0.0), "CAP moved anchors");
    assert!(p.iter().chain(n).all(|&c| c > 0.0 && c <= EPS + 1e-6), "{ch:?}");
    let (c0, c1) = (collapseness(&cap.original), collapseness(&cap.adversarial));
    assert!(c1 > c0, "CAP: C {c0} → {c1}");
    // Step 1 (ANP): only anchors move.
    let anp = b.run(&ca_tride("tride"), &at(1));
    let ch = row_change(&anp.adversarial, &anp.original);
    let [a, p, n] = thirds(&ch);
    assert!(p.iter().chain(n).all(|&c| c == 0.0), "ANP moved candidates");
    assert!(a.iter().all(|&c| c > 0.0 && c <= EPS + 1e-6), "{ch:?}");
    // CAP-only never perturbs anchors, whatever the step.
    let only = b.run(&ca_tride("cap-only"), &at(1));
    assert!(
        thirds(&row_change(&only.adversarial, &only.original))[0]
            .iter()
            .all(|&c| c == 0.0)
    );
    // First epoch: the progressive step is zero, nothing moves.
    let first = DefenseState { epoch: 0, ..at(0) };
    let none = b.run(&ca_tride("tride"), &first);
    assert!(row_change(&none.adversarial, &none.original).iter().all(|&c| c == 0.0));
}

#[test]
fn ca_tride_code_anp_moves_only_anchors_and_lowers_its_loss() {
    use rdml::attack::objective::Objective;
    use rdml::defense::TripletLayout;
    use rdml::defense::ca_tride::{Adversary, TrideObjective};
    let b = setup();
    let text = format!("kind = \"ca-tride\"\neps = {EPS}\nstep = 0.02\nsteps = 16\ncode_anp = true\n");
    let cfg: DefenseConfig = toml::from_str(&text).unwrap();
    let anp = b.run(&cfg, &at(1));
    let ch = row_change(&anp.adversarial, &anp.original);
    let [a, p, n] = thirds(&ch);
    assert!(p.iter().chain(n).all(|&c| c == 0.0), "ANP moved candidates");
    assert!(
        a.iter().any(|&c| c > 0.0) && a.iter().all(|&c| c <= EPS + 1e-6),
        "{ch:?}"
    );
    let clean = b.net.forward(anp.original.clone());
    let t = clean.dims()[0] / 3;
    let obj = TrideObjective {
        layout: TripletLayout { t },
        distance: Distance::NormalizedEuclidean,
        cap: false,
        adversary: Adversary::Collapseness,
        lambda: 10.0,
        code_anp: true,
        clean_anchor: clean.clone().narrow(0, 0, t),
        top_rank: true,
        collapse_aware: true,
    };
    let before = obj.loss(clean, 1).into_scalar::<f32>();
    let after = obj.loss(b.net.forward(anp.adversarial.clone()), 1).into_scalar::<f32>();
    assert!(before > 0.0 && after < before, "code ANP loss {before} → {after}");
}

#[test]
fn collapseness_weights_closer_pairs_more() {
    use burn::tensor::TensorData;
    let t = |v: Vec<f32>| Tensor::<1>::from_data(TensorData::new(v, [3]), &Device::default());
    // d(a,p) = [0.1, 0.5, 0.9]: with λ = 10 the weighted mean leans to 0.1; d(a,n) constant 1.
    let c = rdml::defense::ca_tride::collapseness(t(vec![0.1, 0.5, 0.9]), t(vec![1.0; 3]), 10.0).into_scalar::<f32>();
    let w = [1.0f32, (-4.0f32).exp(), (-8.0f32).exp()];
    let want = (0.1 * w[0] + 0.5 * w[1] + 0.9 * w[2]) / w.iter().sum::<f32>() - 1.0;
    assert!((c - want).abs() < 1e-6, "{c} vs {want}");
}

#[test]
fn top_half_mean_averages_and_differentiates_the_smaller_half() {
    use burn::tensor::TensorData;
    let dev = Device::default().autodiff();
    let d = Tensor::<1>::from_data(TensorData::new(vec![3.0f32, 1.0, 2.0, 5.0, 4.0], [5]), &dev).require_grad();
    // Five values: the smaller ⌈5/2⌉ = 3 are 1, 2, 3.
    let m = rdml::defense::ca_tride::top_half_mean(d.clone());
    assert!((m.clone().into_scalar::<f32>() - 2.0).abs() < 1e-6);
    let g = d.grad(&m.backward()).unwrap().into_data().try_to_vec::<f32>().unwrap();
    let third = 1.0 / 3.0;
    assert!(
        g.iter()
            .zip([third, third, third, 0.0, 0.0])
            .all(|(a, b)| (a - b).abs() < 1e-6),
        "{g:?}"
    );
}

fn positive(target: &str, rate: f32) -> DefenseConfig {
    let text = format!(
        "kind = \"positive-perturbation\"\neps = {EPS}\nstep = 0.02\nsteps = 8\nrate = {rate}\ntarget = \"{target}\"\n"
    );
    toml::from_str(&text).unwrap()
}

#[test]
fn positive_perturbation_moves_positives_away_from_anchors_at_the_attack_rate() {
    let b = setup();
    let Batch { net, .. } = &b;
    let d = Distance::NormalizedEuclidean;
    let state = DefenseState::default();
    let p = b.run(&positive("positive", 1.0), &state);
    let ch = row_change(&p.adversarial, &p.original);
    let [a, pos, neg] = thirds(&ch);
    assert!(
        a.iter().chain(neg).all(|&c| c == 0.0),
        "only positives may move: {ch:?}"
    );
    assert!(pos.iter().all(|&c| c > 0.0 && c <= EPS + 1e-6));
    let (a0, p0, _) = embed3(net, &p.original);
    let (a1, p1, _) = embed3(net, &p.adversarial);
    let (before, after) = (mean(d.rows(a0, p0)), mean(d.rows(a1, p1)));
    assert!(after > before + 0.05, "d(a, p) {before} → {after}");
    // Rate 0: nothing moves; rate 0.5 on 8 tuples: some but not all positives.
    let none = b.run(&positive("positive", 0.0), &state);
    assert!(row_change(&none.adversarial, &none.original).iter().all(|&c| c == 0.0));
    let half = b.run(&positive("positive", 0.5), &state);
    let moved = thirds(&row_change(&half.adversarial, &half.original))[1]
        .iter()
        .filter(|&&c| c > 0.0)
        .count();
    assert!(0 < moved && moved < 8, "{moved} of 8 positives moved at rate 0.5");
    // Appendix F: the negative target pulls negatives toward the anchor, nothing else moves.
    let n = b.run(&positive("negative", 1.0), &state);
    let ch = row_change(&n.adversarial, &n.original);
    let [a, pos, neg] = thirds(&ch);
    assert!(a.iter().chain(pos).all(|&c| c == 0.0) && neg.iter().all(|&c| c > 0.0));
    let (a0, _, n0) = embed3(net, &n.original);
    let (a1, _, n1) = embed3(net, &n.adversarial);
    assert!(mean(d.rows(a1, n1)) < mean(d.rows(a0, n0)));
}

#[test]
fn mdprop_trains_separate_batch_norm_sets_and_infers_with_the_clean_one() {
    let d = "{kind=\"mdprop\",eps=0.03,step=0.01,steps=2,distributions=[{kind=\"stax\"},{kind=\"mtax\",targets=3}]}";
    // A wrong number of BN sets is refused with the number needed.
    let e = Experiment::load(
        "synthetic-two-gaussians",
        &["defense={kind=\"advprop\",eps=0.03,step=0.01,steps=2}".into()],
    )
    .err()
    .map(|e| format!("{e:#}"))
    .unwrap_or_default();
    assert!(e.contains("model.bn_sets = 2"), "{e}");
    let (exp, trainer, loss) = mdprop_step(3, d, false).unwrap();
    assert!(loss.is_finite());
    let splits = exp.data.load(0).unwrap();
    let dev = Device::default();
    let b = load_batch(&splits.train, &(0..16).collect::<Vec<_>>(), None).unwrap();
    use burn::module::Module;
    let net = trainer.net.valid();
    let xt = batch_tensor(&b, &dev);
    let per_set: Vec<Vec<f32>> = (0..3).map(|s| read(&net.forward_set(xt.clone(), s))).collect();
    // Each set saw its own distribution, so their running statistics (and outputs) now differ.
    assert_ne!(per_set[0], per_set[1]);
    assert_ne!(per_set[1], per_set[2]);
    // Evaluation embeds with the clean set only.
    let set = splits.train.subset("t", &(0..16).collect::<Vec<_>>());
    let e = rdml::eval::embed(&trainer.net, &set, 16, &dev).unwrap();
    let worst = e
        .data
        .iter()
        .zip(&per_set[0])
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-5, "embed differs from BN set 0 by {worst}");
}

/// Seed 000 Appendix F, anchor target under the contrastive loss: `x₁ + γρ₍₁,₂₎` per pair, so the
/// anchor of a positive pair and the anchor of a negative pair are two copies perturbed apart.
#[test]
fn contrastive_anchor_target_perturbs_each_pair_on_its_own() {
    let b = setup_with(&["loss={kind=\"contrastive\"}"]);
    let d = Distance::NormalizedEuclidean;
    let p = b.run(&positive("anchor", 1.0), &DefenseState::default());
    let t = p.triplets.as_ref().unwrap().len();
    assert_eq!(p.original.dims()[0], 4 * t, "rows [a, p, n, a′]");
    let ch = row_change(&p.adversarial, &p.original);
    assert!(ch[t..3 * t].iter().all(|&c| c == 0.0), "p and n stay: {ch:?}");
    assert!(ch[..t].iter().chain(&ch[3 * t..]).all(|&c| c > 0.0 && c <= EPS + 1e-6));
    let e0 = b.net.forward(p.original.clone());
    let e1 = b.net.forward(p.adversarial.clone());
    let part = |e: &Tensor<2>, k: usize| e.clone().narrow(0, k * t, t);
    // The positive pair's anchor moves away from p; the negative pair's toward n.
    assert!(mean(d.rows(part(&e1, 0), part(&e1, 1))) > mean(d.rows(part(&e0, 0), part(&e0, 1))) + 0.02);
    assert!(mean(d.rows(part(&e1, 3), part(&e1, 2))) < mean(d.rows(part(&e0, 3), part(&e0, 2))) - 0.02);
    assert_eq!(
        read(&part(&e0, 0)),
        read(&part(&e0, 3)),
        "both copies start at the anchor"
    );
    assert!(mean(d.rows(part(&e1, 0), part(&e1, 3))) > 0.02, "the two copies differ");
    // The triplet loss keeps one joint ρ₍₁,₂,₃₎ per triplet.
    let joint = setup().run(&positive("anchor", 1.0), &DefenseState::default());
    assert_eq!(joint.original.dims()[0], 3 * joint.triplets.unwrap().len());
}

/// An autodiff copy of the batch's model (same seed, so the same weights) and images.
fn trainable(b: &Batch) -> (EmbeddingNet, Tensor<4>) {
    let dev = Device::default().autodiff();
    let net = rdml::seeded(&dev, 3, || EmbeddingNet::new(&b.exp.model, [1, 28, 28], &dev).unwrap());
    (net, b.x.clone().autodiff())
}

fn defended(b: &Batch, cfg: &DefenseConfig) -> f32 {
    let (net, x) = trainable(b);
    let params = rdml::loss::LossParams::new(&b.exp.loss, &x.device());
    let rng = &mut ChaCha8Rng::seed_from_u64(0);
    let out = rdml::train::defended::defended_loss(
        cfg,
        &b.exp.loss,
        &net,
        &params,
        x,
        (&b.labels, &(0..b.labels.len()).collect::<Vec<_>>()),
        &DefenseState::default(),
        cfg.unit().memory().as_ref(),
        rng,
    )
    .unwrap();
    out.loss.into_scalar::<f32>()
}

/// Seed 000 Eq. 13: formulation 3's regulariser `λ·(1/n) Σ_i max_z d(z, x_i)` sums over every
/// sample of the batch, not only the mined anchors (8 of the 16 images here).
#[test]
fn formulation_3_regularises_every_sample_of_the_batch() {
    use rdml::attack::engine;
    use rdml::attack::objective::shift::EmbeddingShift;
    let b = setup();
    let d = Distance::NormalizedEuclidean;
    let budget = "eps = 0.1\nstep = 0.02\nsteps = 4\n";
    let pp = |extra: &str| -> DefenseConfig {
        toml::from_str(&format!(
            "kind = \"positive-perturbation\"\n{budget}rate = 0.0\n{extra}"
        ))
        .unwrap()
    };
    let clean_loss = defended(&b, &pp(""));
    let with_reg = defended(&b, &pp("regularizer = 2.0\n"));
    let f3: DefenseConfig = toml::from_str(&format!("kind = \"formulation-3\"\n{budget}lambda = 2.0\n")).unwrap();
    let formulation_3 = defended(&b, &f3);
    // By hand: the ES attack on every image, the mean shift of all 16 and of the 8 anchors.
    let clean = b.net.forward(b.x.clone());
    let pgd = f3.pgd();
    let z = engine::Request::new(&b.net, &EmbeddingShift::new(clean.clone()), &pgd)
        .run(&b.x)
        .unwrap();
    let shift = read(&d.rows(b.net.forward(z), clean).reshape([-1, 1]));
    let all = shift.iter().sum::<f32>() / shift.len() as f32;
    let tr = b.run(&pp(""), &DefenseState::default()).triplets.unwrap();
    let anchors = tr.anchor.iter().map(|&i| shift[i]).sum::<f32>() / tr.len() as f32;
    assert_eq!(shift.len(), 16);
    assert!(
        (anchors - all).abs() > 1e-3,
        "the test cannot tell them apart: {anchors} vs {all}"
    );
    for got in [with_reg, formulation_3] {
        assert!(
            (got - clean_loss - 2.0 * all).abs() < 1e-4,
            "{got} − {clean_loss} vs 2·{all}"
        );
    }
}

/// Seed 000 Eq. 11: one δ per image, shared by every tuple the image is in, all images moving.
#[test]
fn formulation_1_perturbs_each_image_once_for_all_its_tuples() {
    let b = setup();
    let p = b.run(&pgd_cfg("formulation-1"), &DefenseState::default());
    let rows = TripletLayout::gather_index(p.triplets.as_ref().unwrap())
        .host()
        .unwrap()
        .into_owned();
    let ch = row_change(&p.adversarial, &p.original);
    // Images only in tuples already satisfied (zero hinge, zero gradient) stay.
    assert!(ch.iter().all(|&c| c <= EPS + 1e-6), "{ch:?}");
    assert!(ch.iter().filter(|&&c| c > 0.0).count() > ch.len() / 2, "{ch:?}");
    let mut repeats = 0;
    for i in 0..rows.len() {
        for j in i + 1..rows.len() {
            if rows[i] == rows[j] {
                repeats += 1;
                let (a, c) = (
                    p.adversarial.clone().narrow(0, i, 1),
                    p.adversarial.clone().narrow(0, j, 1),
                );
                assert_eq!(row_change(&a, &c), vec![0.0], "rows {i} and {j} are image {}", rows[i]);
            }
        }
    }
    assert!(repeats > 0, "no image is in two tuples: the test shows nothing");
    // Madry's per-row copies of the same image move apart.
    let m = b.run(&pgd_cfg("madry"), &DefenseState::default());
    let mrows = TripletLayout::gather_index(m.triplets.as_ref().unwrap())
        .host()
        .unwrap()
        .into_owned();
    let differ = (0..mrows.len())
        .flat_map(|i| (i + 1..mrows.len()).map(move |j| (i, j)))
        .filter(|&(i, j)| mrows[i] == mrows[j])
        .any(|(i, j)| {
            let (a, c) = (
                m.adversarial.clone().narrow(0, i, 1),
                m.adversarial.clone().narrow(0, j, 1),
            );
            row_change(&a, &c)[0] > 0.0
        });
    assert!(differ);
    assert!(triplet_loss(&b, &p.adversarial) > triplet_loss(&b, &p.original) + 0.01);
}

/// Seed 000 Eq. 12: each sample perturbed with the rest of the batch intact, so only the anchor
/// rows move, and an image that is also another tuple's positive or negative stays clean there.
#[test]
fn formulation_2_perturbs_anchors_against_the_intact_batch() {
    let b = setup();
    let p = b.run(&pgd_cfg("formulation-2"), &DefenseState::default());
    let tr = p.triplets.as_ref().unwrap();
    let t = tr.len();
    let ch = row_change(&p.adversarial, &p.original);
    assert!(ch[..t].iter().all(|&c| c <= EPS + 1e-6), "{ch:?}");
    assert!(ch[..t].iter().filter(|&&c| c > 0.0).count() >= t / 2, "{ch:?}");
    assert!(ch[t..].iter().all(|&c| c == 0.0), "p and n stay clean: {ch:?}");
    assert!(
        (tr.negative.host().unwrap().iter())
            .chain(tr.positive.host().unwrap().iter())
            .any(|i| tr.anchor.contains(i)),
        "no anchor is another tuple's p or n: the test shows less"
    );
    assert!(triplet_loss(&b, &p.adversarial) > triplet_loss(&b, &p.original) + 0.01);
    // Refused for losses without tuples.
    let e = Experiment::load(
        "quickstart",
        &[
            "loss={kind=\"multi-similarity\"}".into(),
            "defense={kind=\"formulation-2\",eps=0.1,step=0.01,steps=2}".into(),
        ],
    )
    .err()
    .map(|e| format!("{e:#}"))
    .unwrap_or_default();
    assert!(e.contains("formulation-2") && e.contains("contrastive"), "{e}");
}

/// The triplet loss (margin 0.2) of stacked `[a, p, n]` rows in evaluation mode.
fn triplet_loss(b: &Batch, x: &Tensor<4>) -> f32 {
    let e = b.net.forward(x.clone());
    let t = e.dims()[0] / 3;
    rdml::loss::triplet::triplet_loss(&e, &TripletLayout { t }.stacked(), Distance::NormalizedEuclidean, 0.2)
        .into_scalar::<f32>()
}

/// A synthetic ResNet-18 experiment with `model.bn_sets` and an MDProp `[defense]`, and one
/// training step on its first 16 items.
fn mdprop_step(bn_sets: usize, defense: &str, bank: bool) -> anyhow::Result<(Experiment, rdml::train::Trainer, f64)> {
    use rdml::train::Trainer;
    let exp = Experiment::load(
        "synthetic-two-gaussians",
        &[
            "data.synthetic.shape=[3,32,32]".into(),
            "data.synthetic.train=16".into(),
            "data.synthetic.test=8".into(),
            "model.embedding_dim=8".into(),
            format!("model.bn_sets={bn_sets}"),
            format!("defense={defense}"),
        ],
    )?;
    let splits = exp.data.load(0)?;
    let dev = Device::default().autodiff();
    let mut trainer = Trainer::new(&exp, [3, 32, 32], &dev)?;
    if bank {
        trainer.start_epoch(&exp, &splits.train, &dev)?;
    }
    let b = load_batch(&splits.train, &(0..16).collect::<Vec<_>>(), None)?;
    let x = batch_tensor(&b, &dev);
    let (trainer, loss, _) = trainer.step(&exp, x, &b.labels, &b.positions, &mut ChaCha8Rng::seed_from_u64(0))?;
    Ok((exp, trainer, loss))
}

/// Seed 004 §5: the shared-BN "AT" baseline (STAX through the clean set) and MTAX without
/// separate BNs run on a one-set ResNet; UX (Eq. 8) trains with the training-set features.
#[test]
fn mdprop_runs_with_a_shared_batch_norm_and_ux_from_the_training_set() {
    let at = "{kind=\"mdprop\",eps=0.03,step=0.01,steps=2,separate_bn=false,distributions=[{kind=\"stax\"}]}";
    let (_, trainer, loss) = mdprop_step(1, at, false).unwrap();
    assert!(loss.is_finite());
    let e = trainer
        .net
        .with_inference_bn_set(1)
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(e.contains("1 batch-norm set"), "{e}");
    let mtax =
        "{kind=\"mdprop\",eps=0.03,step=0.01,steps=2,separate_bn=false,distributions=[{kind=\"mtax\",targets=3}]}";
    assert!(mdprop_step(1, mtax, false).unwrap().2.is_finite());
    // With separate BNs the same config needs a set per distribution.
    let e = mdprop_step(1, &at.replace("separate_bn=false,", ""), false)
        .err()
        .map(|e| format!("{e:#}"));
    assert!(e.unwrap_or_default().contains("model.bn_sets = 2"));
    let ux = "{kind=\"mdprop\",eps=0.03,step=0.01,steps=2,distributions=[{kind=\"ux\"}]}";
    assert!(mdprop_step(2, ux, true).unwrap().2.is_finite());
    let e = mdprop_step(2, ux, false)
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(e.contains("training set"), "{e}");
}

/// Seed 004 §5's ablation: inference with an auxiliary BN set (`rdml eval --bn-set K`).
#[test]
fn inference_can_use_an_auxiliary_batch_norm_set() {
    use burn::module::Module;
    let d = "{kind=\"mdprop\",eps=0.03,step=0.01,steps=2,distributions=[{kind=\"stax\"},{kind=\"mtax\",targets=3}]}";
    let (_, trainer, _) = mdprop_step(3, d, false).unwrap();
    let net = trainer.net.valid();
    let x: Tensor<4> = rdml::host_random(
        1,
        [4, 3, 32, 32],
        burn::tensor::Distribution::Default,
        &Device::default(),
    );
    for k in 0..3 {
        let swapped = net.clone().with_inference_bn_set(k).unwrap();
        assert_eq!(
            read(&swapped.forward(x.clone())),
            read(&net.forward_set(x.clone(), k)),
            "set {k}"
        );
    }
    assert_ne!(read(&net.forward_set(x.clone(), 1)), read(&net.forward(x.clone())));
    assert!(net.with_inference_bn_set(3).is_err());
}

fn act_with(extra: &str) -> DefenseConfig {
    let text = format!("kind = \"act\"\neps = {EPS}\nstep = {EPS}\nsteps = 1\n{extra}");
    toml::from_str(&text).unwrap()
}

#[test]
fn the_inner_start_and_projection_are_options_and_today_s_defaults_are_unchanged() {
    use rdml::attack::budget::Pgd;
    // Today's table: a clean start, projected, and a record that writes nothing new.
    let clean = act_with("");
    assert_eq!(
        clean.pgd(),
        Pgd {
            step: EPS,
            ..Pgd::fgsm(EPS)
        }
    );
    assert_eq!(
        serde_json::to_value(&clean).unwrap(),
        serde_json::json!({"kind": "act", "eps": EPS, "step": EPS, "steps": 1})
    );
    let nfgsm = act_with("start = \"noise\"\nproject = false\n");
    let pgd = nfgsm.pgd();
    assert!(pgd.random_start && !pgd.project && pgd.start_radius == 2.0, "{pgd:?}");
    let round: DefenseConfig = serde_json::from_value(serde_json::to_value(&nfgsm).unwrap()).unwrap();
    assert_eq!(round, nfgsm);
    let wrong = act_with("noise = 3.0\n").validate(&setup().exp.loss).unwrap_err();
    assert!(
        format!("{wrong:#}").contains("defense.noise = 3 is the radius of N-FGSM's start"),
        "{wrong:#}"
    );
    let bad = act_with("start = \"noise\"\nnoise = -1.0\n")
        .validate(&setup().exp.loss)
        .unwrap_err();
    assert!(
        format!("{bad:#}").contains("defense.noise must be a finite number > 0"),
        "{bad:#}"
    );

    // One step of ε from N-FGSM's 2ε noise, unprojected, leaves the ε-ball (up to 3ε); FGSM-RS
    // and a clean start stay in it; each random start is drawn from the step's stream.
    let b = setup();
    let most = |cfg: &DefenseConfig| {
        let p = b.run(cfg, &DefenseState::default());
        let ch = row_change(&p.adversarial, &p.original);
        let [a, pos, neg] = thirds(&ch);
        assert!(a.iter().all(|&c| c == 0.0), "anchors moved: {a:?}");
        (pos.iter().chain(neg).fold(0f32, |m, &c| m.max(c)), p.adversarial)
    };
    let (far, nf) = most(&nfgsm);
    assert!(far > 1.5 * EPS && far <= 3.0 * EPS + 1e-6, "N-FGSM moved {far}");
    let (near, rs) = most(&act_with("start = \"uniform\"\n"));
    assert!(near <= EPS + 1e-6 && near > 0.0, "FGSM-RS moved {near}");
    let (c, cl) = most(&clean);
    assert!(c <= EPS + 1e-6);
    let differ = |a: &Tensor<4>, b: &Tensor<4>| (a.clone() - b.clone()).abs().max().into_scalar::<f32>() > 0.0;
    assert!(differ(&rs, &cl) && differ(&nf, &rs));
}
