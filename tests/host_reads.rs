//! How often a training step and an attack batch wait on the device: every read back goes through
//! `rdml::host` and is counted there. On a GPU each read is a sync, so the PGD engine reads
//! nothing per step (its early stop is decided on the device and looked at every
//! `GPU_STOP_CHECK` steps), and a step's reads do not grow with its PGD steps. Counted here on the
//! CPU, with the engine told to look at the stop flag as it does on a GPU.

mod common;

use burn::module::Module;
use burn::tensor::{Device, Tensor};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rdml::attack::budget::{Norm, Pgd};
use rdml::attack::engine::{GPU_STOP_CHECK, set_stop_check_every};
use rdml::attack::suite::{Context, Setup, robustness};
use rdml::config::Experiment;
use rdml::data::loader::load_batch;
use rdml::eval::batch_tensor;
use rdml::loss::device_miner::set_mine_on_device;
use rdml::train::Trainer;

/// What `f` returns and how many reads this thread made during it.
fn reads_during<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let r0 = rdml::host::reads();
    let v = f();
    (v, rdml::host::reads() - r0)
}

/// The quickstart setting (C2F2, 16 SPC-2 pairs of the embedded split) with `sets` applied: the
/// experiment, a new trainer and one batch (training device, plain device, labels, positions).
fn setup(sets: &[&str]) -> (Experiment, Trainer, Tensor<4>, Tensor<4>, rdml::data::loader::HostBatch) {
    let mut sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    sets.push("model.embedding_dim=32".into());
    let exp = Experiment::load("quickstart", &sets).unwrap();
    let splits = exp.data.load(0).unwrap();
    let dev = Device::default().autodiff();
    let mut trainer = Trainer::new(&exp, [1, 28, 28], &dev).unwrap();
    // MDProp's UX targets (a no-op for every other setting).
    trainer.start_epoch(&exp, &splits.train, &dev).unwrap();
    // Two items of each of the first 8 classes.
    let mut items = vec![];
    for c in 0..8u32 {
        let of_c = splits
            .train
            .labels
            .iter()
            .enumerate()
            .filter(|(_, l)| **l == c)
            .map(|(i, _)| i);
        items.extend(of_c.take(2));
    }
    let b = load_batch(&splits.train, &items, None).unwrap();
    let x = batch_tensor(&b, &dev);
    let x_plain = batch_tensor(&b, &Device::default());
    (exp, trainer, x, x_plain, b)
}

/// One training step of the quickstart setting with `sets` applied; returns the loss, the step's
/// reads and the trained weights.
fn step(sets: &[&str]) -> (f64, u64, Vec<f32>) {
    let (exp, trainer, x, x_plain, b) = setup(sets);
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let ((trainer, loss), reads) = reads_during(|| {
        let (t, loss, _) = trainer.step(&exp, x, &b.labels, &b.positions, &mut rng).unwrap();
        (t, loss)
    });
    // The trained model, seen through its embeddings of the batch.
    let w = rdml::host::read(&trainer.net.valid().forward(x_plain)).unwrap();
    (loss, reads, w)
}

/// HM's linear gradual adversary needs the previous step's adversarial loss: it comes back in the
/// same read as the step's own loss, so every step reads once when HM mines on the device (on
/// the CPU's host miners, also the clean embeddings and their distances).
#[test]
fn hm_reads_the_previous_adversarial_loss_with_its_own() {
    let hm = "defense={kind=\"hm\",eps=0.3,step=0.0118,steps=2,source=\"softhard\",destination=\"lga\"}";
    let run = |on_device: bool| {
        set_mine_on_device(Some(on_device));
        let (exp, mut trainer, x, x_plain, b) = setup(&[hm]);
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let mut reads = vec![];
        for _ in 0..3 {
            let (t, r) = reads_during(|| {
                trainer
                    .step(&exp, x.clone(), &b.labels, &b.positions, &mut rng)
                    .unwrap()
                    .0
            });
            trainer = t;
            reads.push(r);
        }
        set_mine_on_device(None);
        let prev = trainer
            .defense_memory
            .get::<rdml::defense::hm::Lga>()
            .unwrap()
            .prev_loss;
        (
            reads,
            prev,
            rdml::host::read(&trainer.net.valid().forward(x_plain)).unwrap(),
        )
    };
    let (reads, prev, _) = run(true);
    assert_eq!(reads, [1, 1, 1]);
    assert!(
        prev != 2.0 && prev.is_finite(),
        "the adversarial loss was not kept: {prev}"
    );
    let (host_reads, host_prev, _) = run(false);
    assert!(host_reads.iter().all(|&r| r == 3), "{host_reads:?}");
    assert!(host_prev.is_finite());
}

/// The triplet step with random negatives (robrank's) reads its loss alone: the collapse
/// diagnostics stay on the device until the epoch ends. A distance-based miner reads the
/// embeddings and their distance matrix to mine on the host.
#[test]
fn a_triplet_step_reads_its_loss_alone() {
    let (_, reads, _) = step(&[]);
    assert_eq!(reads, 1);
    let (_, reads, _) = step(&["loss.miner=\"semihard\""]);
    assert_eq!(reads, 3);
}

/// What a GPU does: the distance-based miners choose on the device, and the step reads its loss
/// alone, plain or under a defense that perturbs the mined triplets (ACT, Madry, formulation 2,
/// positive perturbation).
#[test]
fn a_step_mining_on_the_device_reads_its_loss_alone() {
    set_stop_check_every(Some(GPU_STOP_CHECK));
    set_mine_on_device(Some(true));
    for miner in ["semihard", "softhard", "distance", "hardest"] {
        let m = format!("loss.miner=\"{miner}\"");
        let (loss, reads, _) = step(&[&m]);
        assert_eq!(reads, 1, "{miner}");
        assert!(loss.is_finite() && loss > 0.0, "{miner}: {loss}");
    }
    let defenses = [
        "{kind=\"act\",eps=0.3,step=0.0118,steps=2}",
        "{kind=\"madry\",eps=0.3,step=0.0118,steps=2}",
        "{kind=\"formulation-2\",eps=0.3,step=0.0118,steps=2}",
        "{kind=\"positive-perturbation\",eps=0.3,step=0.0118,steps=2,rate=1.0,target=\"anchor\"}",
    ];
    for d in defenses {
        let (_, reads, _) = step(&["loss.miner=\"semihard\"", &format!("defense={d}")]);
        assert_eq!(reads, 1, "{d}");
    }
    // HM's source and destination are mined there too, and its destination hardness computed.
    for (source, destination) in [("softhard", "lga"), ("semihard", "hardest"), ("random", "distance")] {
        let hm = format!(
            "defense={{kind=\"hm\",eps=0.3,step=0.0118,steps=2,source=\"{source}\",destination=\"{destination}\",ics=0.5}}"
        );
        let (loss, reads, _) = step(&[&hm]);
        assert_eq!(reads, 1, "{hm}");
        assert!(loss.is_finite() && loss > 0.0, "{hm}: {loss}");
    }
    set_mine_on_device(None);
    // The CPU by default still mines on the host copy.
    let (_, reads, _) = step(&["loss.miner=\"semihard\""]);
    assert_eq!(reads, 3);
}

/// CA-TRIDE mines its triplets (by the scheduled semihard margin, or the loss's own miner) and
/// takes its clean anchors where the embeddings are: on a GPU its CAP and ANP steps read their
/// loss alone. MDProp's STAX / MTAX targets are clean rows gathered on the device and UX targets
/// come from the host-side bank, so it reads its loss alone on every device.
#[test]
fn ca_tride_and_mdprop_steps_read_their_loss_alone() {
    set_stop_check_every(Some(GPU_STOP_CHECK));
    set_mine_on_device(Some(true));
    let tride = "kind=\"ca-tride\",eps=0.3,step=0.0118,steps=2,progressive=false";
    for extra in [
        "mode=\"cap-only\"",
        "mode=\"anp-only\"",
        "mode=\"anp-only\",code_anp=true,margin_schedule=\"reference\"",
        "mode=\"cap-only\",margin_schedule=\"off\"",
    ] {
        let d = format!("defense={{{tride},{extra}}}");
        let (loss, reads, _) = step(&["loss.miner=\"softhard\"", &d]);
        assert_eq!(reads, 1, "{d}");
        assert!(loss.is_finite(), "{d}: {loss}");
    }
    set_mine_on_device(None);
    // On the CPU's host miners, the scheduled semihard margin reads the clean embeddings and
    // their distances, as a plain semihard step does.
    let d = format!("defense={{{tride},mode=\"cap-only\"}}");
    let (_, reads, _) = step(&[&d]);
    assert_eq!(reads, 3, "{d}");
    let mdprop = "kind=\"mdprop\",eps=0.3,step=0.0118,steps=2";
    for dists in [
        "[{kind=\"stax\"},{kind=\"mtax\",targets=3}]",
        "[{kind=\"ux\",targets=2}],separate_bn=false",
    ] {
        let d = format!("defense={{{mdprop},distributions={dists}}}");
        let (loss, reads, _) = step(&[&d]);
        assert_eq!(reads, 1, "{d}");
        assert!(loss.is_finite() && loss > 0.0, "{d}: {loss}");
    }
    let (_, reads, _) = step(&["defense={kind=\"advprop\",eps=0.3,step=0.0118,steps=2}"]);
    assert_eq!(reads, 1, "advprop");
    set_stop_check_every(None);
}

/// ACT's 2 or 8 PGD steps read the same: nothing per step, its loss once.
#[test]
fn an_act_step_reads_the_same_whatever_its_pgd_steps() {
    set_stop_check_every(Some(GPU_STOP_CHECK));
    let act = |steps: usize| format!("defense={{kind=\"act\",eps=0.3,step=0.0118,steps={steps}}}");
    let (_, two, _) = step(&[&act(2)]);
    let (_, eight, _) = step(&[&act(8)]);
    assert_eq!(two, eight);
    // Its loss alone: random negatives need no embeddings on the host, and the diagnostics
    // wait on the device for the epoch's end.
    assert_eq!(two, 1);
}

/// HM stops its PGD on the device (robrank's saturation test): a GPU reads the flag once per
/// `GPU_STOP_CHECK` steps, and the weights are those of a flag read at every step.
#[test]
fn an_hm_step_looks_at_its_stop_flag_every_few_steps_with_the_same_weights() {
    let hm = |steps: usize| {
        format!(
            "defense={{kind=\"hm\",eps=0.3,step=0.0118,steps={steps},source=\"softhard\",destination=\"lga\",objective=\"et\",ics=0.5}}"
        )
    };
    set_stop_check_every(Some(GPU_STOP_CHECK));
    let (loss_gpu, two, _) = step(&[&hm(2)]);
    let (_, eight, w_gpu) = step(&[&hm(8)]);
    assert_eq!(two, eight, "no read per PGD step within the first {GPU_STOP_CHECK}");
    let (_, sixteen, _) = step(&[&hm(16)]);
    assert_eq!(sixteen, eight + 1, "one look at the flag at step {GPU_STOP_CHECK}");
    set_stop_check_every(Some(1));
    let (_, every, w_cpu) = step(&[&hm(8)]);
    assert!(
        every > eight,
        "reading the flag at every step reads more ({every} vs {eight})"
    );
    assert_eq!(w_gpu, w_cpu, "the weights do not depend on how often the flag is read");
    let (loss_cpu2, _, _) = step(&[&hm(2)]);
    assert_eq!(loss_gpu, loss_cpu2);
}

/// The rob28 suite on one batch: the same reads for 2 and 6 PGD steps, and one or two per
/// attack, to score it.
#[test]
fn a_rob28_attack_batch_reads_nothing_per_pgd_step() {
    set_stop_check_every(Some(GPU_STOP_CHECK));
    let (net, test) = common::small();
    let dev = Device::default();
    let ctx = Context::new(&net, &test, &dev, false).unwrap();
    let run = |steps: usize| {
        let pgd = Pgd {
            eps: 77.0 / 255.0,
            step: 3.0 / 255.0,
            steps,
            norm: Norm::Linf,
            random_start: false,
            start_radius: 1.0,
            project: true,
        };
        let setup = Setup::white_box(&ctx, &pgd, 16, 16, 0);
        reads_during(|| robustness(&setup).unwrap()).1
    };
    let two = run(2);
    assert_eq!(two, run(6));
    // Nine attacks of one batch each.
    // Each attack reads its attacked embeddings once, to score them; CA+ and CA− also read
    // their queries' distances to every candidate.
    assert_eq!(two, 9 + 2);
}

/// An objective that pushes the embeddings' mean down, stopping below `bound` when given one.
struct MeanDown(Option<f32>);

impl rdml::attack::objective::Objective for MeanDown {
    fn loss(&self, emb: burn::tensor::Tensor<2>, _step: usize) -> burn::tensor::Tensor<1> {
        emb.mean()
    }
    fn stop_rule(&self) -> Option<rdml::attack::objective::StopRule> {
        self.0.map(rdml::attack::objective::StopRule::Below)
    }
}

/// The device-side early stop gives the images of a loop that broke at the stop, however often
/// its flag is read (every step, every 3 or 8, never), and reads nothing else.
#[test]
fn the_early_stop_gives_the_same_images_however_often_it_is_read() {
    use rdml::attack::engine::Request;
    let (net, test) = common::small();
    let dev = Device::default();
    let b = load_batch(&test, &(0..8).collect::<Vec<_>>(), None).unwrap();
    let x = batch_tensor(&b, &dev);
    let pgd = Pgd {
        eps: 0.3,
        step: 0.02,
        steps: 12,
        norm: Norm::Linf,
        random_start: false,
        start_radius: 1.0,
        project: true,
    };
    let mean = |x: &burn::tensor::Tensor<4>| rdml::host::scalar(&net.valid().forward(x.clone()).mean()).unwrap();
    let free = Request::new(&net, &MeanDown(None), &pgd).run(&x).unwrap();
    let (l0, l_end) = (mean(&x), mean(&free));
    assert!(l_end < l0, "{l_end} < {l0}");
    let bound = Some((l0 + l_end) / 2.0);
    let host4 = |t: &burn::tensor::Tensor<4>| rdml::host::read(&t.clone().reshape([8, 28 * 28])).unwrap();
    let free = host4(&free);
    let mut runs = vec![];
    for every in [1, 3, 8, 0] {
        let (adv, reads) = reads_during(|| {
            Request::new(&net, &MeanDown(bound), &pgd)
                .run_checking(&x, every)
                .unwrap()
        });
        if every == 0 {
            assert_eq!(reads, 0);
        }
        runs.push(host4(&adv));
    }
    assert!(
        runs.iter().all(|r| *r == runs[0]),
        "the same images for every check interval"
    );
    assert_ne!(runs[0], free, "the stop fired before the last step");
}
