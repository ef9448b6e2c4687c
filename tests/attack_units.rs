//! The attack units behind the registry: robrank's spec strings read as the flags do, and the
//! black-box, transfer, semantics-preserving and universal attacks each do what they claim.

mod common;
use common::small;

use burn::tensor::{Device, Tensor, TensorData};
use rdml::attack::budget::{Norm, Pgd};
use rdml::attack::engine::Request;
use rdml::attack::objective::shift::{EmbeddingShift, Offset};
use rdml::attack::registry::{SpecBudget, attack, attack_with_budget, method};
use rdml::attack::suite::{Context, Setup, run, run_with};

fn pgd(eps: f32, step: f32, steps: usize) -> Pgd {
    Pgd {
        eps,
        step,
        steps,
        norm: Norm::Linf,
        random_start: false,
        start_radius: 1.0,
        project: true,
    }
}

#[test]
fn robrank_spec_strings_read_as_the_flags() {
    let (a, b) = attack_with_budget("CA:pm=+:W=1:eps=0.03137:alpha=0.011764:pgditer=32").unwrap();
    assert_eq!(a.spec(), "CA+");
    assert_eq!(
        b,
        SpecBudget {
            eps: Some(0.03137),
            step: Some(0.011764),
            steps: Some(32)
        }
    );
    assert_eq!(attack("QA:pm=-:M=1").unwrap().spec(), "QA-");
    assert_eq!(attack("qa-").unwrap().spec(), "QA-");
    assert_eq!(attack("MTAX:targets=3").unwrap().spec(), "MTAX:3");
    assert_eq!(attack("NN-CW:kappa=0.5").unwrap().spec(), "NN-CW:0.5");
    // Every canonical spec reads back to itself.
    for s in [
        "CA+",
        "CA-",
        "QA+",
        "QA-",
        "TMA",
        "ES",
        "LTM",
        "GTM",
        "GTT",
        "NN",
        "NN-CW:0.5",
        "NN-CW-PGD",
        "STAX",
        "MTAX:5",
        "UX:3",
    ] {
        assert_eq!(attack(s).unwrap().spec(), s);
    }
    for bad in [
        "CA",            // no sign
        "CA+:pm=-",      // the name's sign and pm disagree
        "CA:pm=+:W=2",   // W > 1 is not implemented
        "QA:pm=+:M=5",   // nor M > 1
        "QA:pm=*",       // not a sign
        "TMA:foo=1",     // unknown key
        "ES:3",          // no value taken
        "CA+:eps=x",     // not a number
        "CA+:pgditer=0", // not ≥ 1
        "CA+:W=1:W=1",   // twice
        "NOPE",          // unknown attack
    ] {
        assert!(attack_with_budget(bad).is_err(), "{bad} was accepted");
    }
    // A budget in the spec is refused where no budget is read.
    assert!(attack("CA:pm=+:eps=0.1").is_err());
    assert!(method("white-box").is_ok() && method("grey-box").is_err());

    // The spec string runs the same attack as the name.
    let (net, set) = small();
    let ctx = Context::new(&net, &set, &Device::default(), false).unwrap();
    let p = pgd(0.1, 0.02, 5);
    let a = run(&ctx, attack("CA:pm=-:W=1").unwrap().as_ref(), &p, 32, 16, 2).unwrap();
    let b = run(&ctx, attack("CA-").unwrap().as_ref(), &p, 32, 16, 2).unwrap();
    assert_eq!(a.score("CA-"), b.score("CA-"));
    assert!(a.score("CA-").is_some());
}

#[test]
fn transfer_from_a_model_to_itself_is_the_white_box_attack() {
    let (net, set) = small();
    let dev = Device::default();
    let target = Context::new(&net, &set, &dev, false).unwrap();
    // A second, separately loaded copy of the same model as the surrogate.
    let surrogate = Context::new(&net.clone(), &set, &dev, false).unwrap();
    let p = pgd(0.1, 0.02, 5);
    for name in ["QA+", "ES", "NN"] {
        let a = attack(name).unwrap();
        let white = run(&target, a.as_ref(), &p, 32, 16, 4).unwrap();
        let setup = Setup {
            attacker: &surrogate,
            ..Setup::white_box(&target, &p, 32, 16, 4)
        };
        let transfer = run_with(&setup, a.as_ref()).unwrap();
        assert_eq!(white.scores.len(), transfer.scores.len());
        for (w, t) in white.scores.iter().zip(&transfer.scores) {
            assert_eq!((w.name, w.value), (t.name, t.value), "{name}");
        }
    }
    // A surrogate on another test set is refused.
    let other = Context::new(&net, &set.subset("fewer", &(0..200).collect::<Vec<_>>()), &dev, false).unwrap();
    let setup = Setup {
        attacker: &other,
        ..Setup::white_box(&target, &p, 32, 16, 4)
    };
    assert!(run_with(&setup, attack("ES").unwrap().as_ref()).is_err());
}

#[test]
fn nes_estimates_the_gradient_and_moves_the_objective_like_pgd() {
    use burn::tensor::Tensor;
    use rand::SeedableRng;
    use rdml::attack::method::nes::estimate_gradient;
    let (net, set) = small();
    let dev = Device::default();
    let ctx = Context::new(&net, &set, &dev, false).unwrap();
    let items: Vec<usize> = (0..4).collect();
    let qa = attack("QA+").unwrap();
    let plan = qa
        .plan(&ctx, &items, &mut rand_chacha::ChaCha8Rng::seed_from_u64(3))
        .unwrap();
    let x = rdml::eval::batch_tensor(&rdml::data::loader::load_batch(&set, &items, None).unwrap(), &dev);
    // The true gradient of the objective, by autodiff.
    let truth = ctx
        .model
        .gradient(x.clone(), &|emb| plan.objective().loss(emb, 0))
        .unwrap()
        .input
        .unwrap();
    let nes = estimate_gradient(ctx.model.as_ref(), &x, plan.objective(), 400, 0.01, 7).unwrap();
    let rows = |t: Tensor<4>| -> Vec<Vec<f32>> {
        let v = t.into_data().try_to_vec::<f32>().unwrap();
        v.chunks(28 * 28).map(|c| c.to_vec()).collect()
    };
    for (t, e) in rows(truth).iter().zip(rows(nes)) {
        let dot: f32 = t.iter().zip(&e).map(|(a, b)| a * b).sum();
        let cos = dot / (t.iter().map(|a| a * a).sum::<f32>().sqrt() * e.iter().map(|a| a * a).sum::<f32>().sqrt());
        assert!(cos > 0.2, "cosine of NES's estimate with the true gradient: {cos}");
    }
    // As an attack: QA+ raises the candidate by NES as by white-box PGD, and counts its queries.
    let zero = run(&ctx, qa.as_ref(), &pgd(0.0, 0.0, 1), 16, 16, 1).unwrap();
    let p = pgd(0.2, 0.02, 10);
    let white = run(&ctx, qa.as_ref(), &p, 16, 16, 1).unwrap();
    let m = method("nes:pop=50:sigma=0.01").unwrap();
    let setup = Setup {
        method: m.as_ref(),
        ..Setup::white_box(&ctx, &p, 16, 16, 1)
    };
    let black = run_with(&setup, qa.as_ref()).unwrap();
    let (r0, rw, rb) = (
        zero.score("QA+").unwrap(),
        white.score("QA+").unwrap(),
        black.score("QA+").unwrap(),
    );
    assert!(
        rb < r0 * 0.8 && rw < r0 * 0.8,
        "QA+ rank: clean {r0}, white-box {rw}, NES {rb}"
    );
    assert_eq!(black.score("model_queries"), Some(10.0 * 50.0));
    assert_eq!(black.method, "nes:pop=50:sigma=0.01");
    // C&W's optimiser has no NES form; an odd population is refused.
    let cw = attack("NN-CW").unwrap();
    assert!(run_with(&setup, cw.as_ref()).is_err());
    assert!(method("nes:pop=5").is_err() && method("nes:sigma=-1").is_err());
}

#[test]
fn spqa_keeps_its_semantic_term() {
    let (net, set) = small();
    let ctx = Context::new(&net, &set, &Device::default(), false).unwrap();
    let p = pgd(0.2, 0.02, 10);
    let zero = pgd(0.0, 0.0, 1);
    assert_eq!(attack("SPQA:pm=+:M=1").unwrap().spec(), "SPQA+");
    assert_eq!(attack("spqa-:sp=0").unwrap().spec(), "SPQA-:sp=0");
    assert!(attack("SPQA+:sp=2").is_err() && attack("SPQA:pm=+:M=3").is_err());
    for sign in ["+", "-"] {
        let sp = |spec: &str, p: &Pgd| run(&ctx, attack(spec).unwrap().as_ref(), p, 32, 16, 9).unwrap();
        let clean = sp(&format!("SPQA{sign}"), &zero);
        let kept = sp(&format!("SPQA{sign}"), &p);
        let plain = sp(&format!("SPQA{sign}:sp=0"), &p);
        let col = format!("SPQA{sign}");
        let (c0, c1, c2) = (
            clean.score(&col).unwrap(),
            kept.score(&col).unwrap(),
            plain.score(&col).unwrap(),
        );
        let (g0, g1, g2) = (
            clean.score("SP:GT").unwrap(),
            kept.score("SP:GT").unwrap(),
            plain.score("SP:GT").unwrap(),
        );
        // Both move the candidate the attack's way; with the semantic term the kept items stay
        // nearer the top than without it.
        if sign == "+" {
            assert!(c1 < c0 && c2 < c0, "SPQA+ rank {c0} → {c1} (plain QA+ {c2})");
        } else {
            assert!(c1 > c0 && c2 > c0, "SPQA- rank {c0} → {c1} (plain QA- {c2})");
        }
        assert!(g0 < 3.0, "the kept items start at the top: {g0}");
        assert!(g1 < g2, "SPQA{sign}: kept items' rank {g1} with the term, {g2} without");
    }
}

#[test]
fn a_universal_perturbation_is_one_pattern_for_all_items() {
    use rand::SeedableRng;
    use rdml::attack::method::Batch;
    let (net, set) = small();
    let dev = Device::default();
    let ctx = Context::new(&net, &set, &dev, false).unwrap();
    let p = pgd(0.15, 0.02, 8);
    let uni = method("universal").unwrap();
    let es = attack("ES").unwrap();
    // Two batches, one δ: each image moves by the same pattern wherever it stays inside [0, 1].
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let batches: Vec<(Vec<usize>, Batch)> = [(0..8).collect::<Vec<_>>(), (8..16).collect()]
        .into_iter()
        .map(|items| {
            let images = rdml::eval::batch_tensor(&rdml::data::loader::load_batch(&set, &items, None).unwrap(), &dev);
            let plan = es.plan(&ctx, &items, &mut rng).unwrap();
            (items, Batch { images, plan })
        })
        .collect();
    let only: Vec<Batch> = batches.into_iter().map(|(_, b)| b).collect();
    let delta = uni.fit(&ctx, &only, &p, 0).unwrap().unwrap();
    let d = delta.clone().into_data().try_to_vec::<f32>().unwrap();
    assert!(d.iter().all(|v| v.abs() <= 0.15 + 1e-6) && d.iter().any(|v| v.abs() > 0.01));
    for b in &only {
        let moved = uni
            .perturb(&ctx, &b.images, b.plan.as_ref(), es.optimiser(), &p, 0, Some(&delta))
            .unwrap()
            .images;
        let x = b.images.clone().into_data().try_to_vec::<f32>().unwrap();
        let m = moved.into_data().try_to_vec::<f32>().unwrap();
        for (i, (xv, mv)) in x.iter().zip(&m).enumerate() {
            let dv = d[i % (28 * 28)];
            if (0.0..=1.0).contains(&(xv + dv)) {
                assert!((mv - xv - dv).abs() < 1e-5, "pixel {i}: {xv} → {mv}, δ {dv}");
            }
        }
    }
    // As an attack: it moves every query, less than a perturbation per query does.
    let setup = Setup {
        method: uni.as_ref(),
        ..Setup::white_box(&ctx, &p, 32, 16, 0)
    };
    let u = run_with(&setup, es.as_ref()).unwrap();
    let w = run(&ctx, es.as_ref(), &p, 32, 16, 0).unwrap();
    let (du, dw) = (u.score("ES:D").unwrap(), w.score("ES:D").unwrap());
    assert!(du > 0.05 && du < dw, "ES:D universal {du}, per query {dw}");
    assert_eq!(u.method, "universal");
}

#[test]
fn save_examples_writes_each_adversarial_image_as_png() {
    use rdml::attack::adversarial::ExampleWriter;
    let (net, set) = small();
    let ctx = Context::new(&net, &set, &Device::default(), false).unwrap();
    let dir = std::env::temp_dir().join(format!("rdml-examples-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut w = ExampleWriter::new(&dir, "NN-CW-PGD:0.5").unwrap();
    let p = pgd(0.1, 0.02, 4);
    let setup = Setup::white_box(&ctx, &p, 10, 4, 0);
    rdml::attack::suite::run_saving(&setup, attack("ES").unwrap().as_ref(), Some(&mut w)).unwrap();
    assert_eq!(w.finish().unwrap(), 10);
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("NN-CW-PGD_0.5-index.json")).unwrap()).unwrap();
    let list = index.as_array().unwrap();
    assert_eq!(list.len(), 10);
    for (i, e) in list.iter().enumerate() {
        assert_eq!(e["index"].as_u64(), Some(i as u64));
        assert_eq!(e["label"].as_u64(), Some(u64::from(set.labels[i])));
        let linf = e["linf"].as_f64().unwrap();
        assert!(linf > 0.0 && linf <= 0.1 + 1e-6, "{linf}");
        let img = image::open(dir.join(e["file"].as_str().unwrap())).unwrap();
        assert_eq!((img.width(), img.height()), (28, 28));
    }
    // Again with fewer queries: the folder holds exactly the new set (issue 28, family 7); while
    // it is being written, the earlier set stands whole with its index (issue 38).
    std::fs::write(dir.join("mine.png"), b"a user's file").unwrap();
    let before = std::fs::read(dir.join("NN-CW-PGD_0.5-index.json")).unwrap();
    let mut w = ExampleWriter::new(&dir, "NN-CW-PGD:0.5").unwrap();
    assert_eq!(std::fs::read(dir.join("NN-CW-PGD_0.5-index.json")).unwrap(), before);
    let setup = Setup::white_box(&ctx, &p, 4, 4, 0);
    rdml::attack::suite::run_saving(&setup, attack("ES").unwrap().as_ref(), Some(&mut w)).unwrap();
    assert_eq!(w.finish().unwrap(), 4);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = (0..4).map(|i| format!("NN-CW-PGD_0.5-{i:06}.png")).collect();
    want.extend(["NN-CW-PGD_0.5-index.json", "mine.png", ".rdml-examples.json"].map(String::from));
    want.sort();
    assert_eq!(names, want);
    // A file of this attack's names that rdml did not write (a user's PNG no index listed) is
    // refused before any work, and stays; so is one rdml wrote and the user changed.
    std::fs::write(dir.join("NN-CW-PGD_0.5-000123.png"), b"a user's image").unwrap();
    let e = ExampleWriter::new(&dir, "NN-CW-PGD:0.5").err().unwrap().to_string();
    assert!(
        e.contains("NN-CW-PGD_0.5-000123.png exists and rdml did not write it"),
        "{e}"
    );
    std::fs::remove_file(dir.join("NN-CW-PGD_0.5-000123.png")).unwrap();
    std::fs::write(dir.join("NN-CW-PGD_0.5-000001.png"), b"edited").unwrap();
    assert!(ExampleWriter::new(&dir, "NN-CW-PGD:0.5").is_err());
    // A run that fails (the writer dropped unfinished) leaves the folder as it was.
    std::fs::remove_file(dir.join("NN-CW-PGD_0.5-000001.png")).unwrap();
    let w = ExampleWriter::new(&dir, "NN-CW-PGD:0.5").unwrap();
    drop(w);
    let mut after: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    after.sort();
    want.retain(|n| n != "NN-CW-PGD_0.5-000001.png");
    assert_eq!(after, want);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn attack_scores_leave_lone_queries_out_as_eval_does() {
    let (net, mut set) = small();
    // Items 0 and 1 get classes of their own: as queries they have nothing to retrieve.
    set.labels[0] = 1000;
    set.labels[1] = 1001;
    let dev = Device::default();
    let ctx = Context::new(&net, &set, &dev, false).unwrap();
    let items: Vec<usize> = (0..32).collect();
    let rows: Vec<f32> = items.iter().flat_map(|&i| ctx.clean.row(i).to_vec()).collect();
    let q = rdml::eval::knn::Embeddings::new(rows, 32, ctx.clean.dim).unwrap();
    let ql: Vec<u32> = items.iter().map(|&i| set.labels[i]).collect();
    let m = rdml::eval::metrics::retrieval_skipping(
        &q,
        &ql,
        &ctx.clean,
        &set.labels,
        Some(&items.iter().copied().map(Some).collect::<Vec<_>>()),
        &[1],
        &dev,
    )
    .unwrap();
    assert_eq!(m.lone_queries, 2);
    let eval_r1 = 100.0 * m.recall_at(1).unwrap();
    for name in ["NN", "ES", "LTM"] {
        let r = run(&ctx, attack(name).unwrap().as_ref(), &pgd(0.0, 0.0, 1), 32, 16, 0).unwrap();
        let clean = r.score("R@1:clean").unwrap();
        assert!(
            (clean - eval_r1).abs() < 1e-9,
            "{name}: R@1:clean {clean}, eval {eval_r1}"
        );
        let attacked = r.score(if name == "NN" {
            "R@1"
        } else if name == "ES" {
            "ES:R"
        } else {
            "LTM"
        });
        assert!(
            (attacked.unwrap() - eval_r1).abs() < 1e-9,
            "{name} at ε = 0: {attacked:?}"
        );
    }
}

#[test]
fn es_d_is_reported_in_the_models_distance() {
    use rdml::loss::distance::Distance;
    let (net, set) = small();
    let dev = Device::default();
    let p = pgd(0.1, 0.02, 5);
    let es = attack("ES").unwrap();
    // One query: on unit vectors 1 − cos = ‖a − b‖² / 2.
    let euclid = Context::new(&net, &set, &dev, false).unwrap();
    assert!(euclid.clean.is_normalized());
    let d = run(&euclid, es.as_ref(), &p, 1, 1, 0).unwrap().score("ES:D").unwrap();
    let cosine = Context::new(&net, &set, &dev, false)
        .unwrap()
        .with_distance(Distance::Cosine);
    let c = run(&cosine, es.as_ref(), &p, 1, 1, 0).unwrap().score("ES:D").unwrap();
    assert!(d > 0.05, "ES:D {d}");
    assert!(
        (c - d * d / 2.0).abs() < 1e-4,
        "1 − cos {c} against ‖Δ‖²/2 {}",
        d * d / 2.0
    );
}

#[test]
fn repeats_give_mean_and_sample_std_over_attack_seeds() {
    use rdml::attack::result::{MeanStd, repeat_seed, spread};
    let m = MeanStd::of(&[1.0, 2.0, 4.0]);
    assert!((m.mean - 7.0 / 3.0).abs() < 1e-12);
    // Sample variance: ((4/3)² + (1/3)² + (5/3)²) / 2 = 7/3.
    assert!((m.std - (7.0f64 / 3.0).sqrt()).abs() < 1e-12 && m.runs == 3);
    assert_eq!(MeanStd::of(&[5.0]).std, 0.0);
    // NN with a random start (the positive-perturbation paper's protocol): runs differ, and the
    // spread is the mean and std of their scores.
    let (net, set) = small();
    let ctx = Context::new(&net, &set, &Device::default(), false).unwrap();
    let p = Pgd {
        random_start: true,
        ..pgd(0.05, 0.02, 5)
    };
    let nn = attack("NN").unwrap();
    let runs: Vec<_> = (0..3)
        .map(|k| run(&ctx, nn.as_ref(), &p, 32, 16, repeat_seed(0, k)).unwrap())
        .collect();
    let r1: Vec<f64> = runs.iter().map(|r| r.score("R@1").unwrap()).collect();
    assert!(r1[0] != r1[1] || r1[1] != r1[2], "three random starts gave {r1:?}");
    let s = spread(&runs);
    let (_, got) = s.iter().find(|(c, _)| c.name() == "recall@1").unwrap();
    assert_eq!(*got, MeanStd::of(&r1));
}

#[test]
fn robrank_compat_measures_es_d_before_the_last_step() {
    let (net, set) = small();
    let dev = Device::default();
    let es = attack("ES").unwrap();
    let score = |compat: bool, steps: usize| {
        let ctx = Context::new(&net, &set, &dev, compat).unwrap();
        run(&ctx, es.as_ref(), &pgd(0.1, 0.05, steps), 8, 8, 0).unwrap()
    };
    // One step: robrank measures the forward pass before it, on the clean images.
    let (ours, robrank) = (score(false, 1), score(true, 1));
    assert!(ours.score("ES:D").unwrap() > 1e-3, "{ours:?}");
    assert!(robrank.score("ES:D").unwrap() < 1e-5, "{robrank:?}");
    // Three steps: robrank's shift is the one after two steps from its own first step (one
    // constant offset of every coordinate, and its eps at every step), the shift of the first 8
    // images by hand.
    let ctx = Context::new(&net, &set, &dev, true).unwrap();
    let mut pixels = vec![0.0f32; 8 * 28 * 28];
    for (i, row) in pixels.chunks_mut(28 * 28).enumerate() {
        set.load_into(i, None, row).unwrap();
    }
    let x = Tensor::<4>::from_data(TensorData::new(pixels, [8, 1, 28, 28]), &dev);
    let clean = net.forward(x.clone());
    let shift = EmbeddingShift {
        clean: clean.clone(),
        offset: Offset::robrank(ctx.distance),
    };
    let two_steps = Request::new(&net, &shift, &pgd(0.1, 0.05, 2)).run(&x).unwrap();
    let moved = (net.forward(two_steps) - clean).powi_scalar(2).sum_dim(1).sqrt();
    let by_hand = moved.mean().into_scalar::<f32>() as f64;
    let three = score(true, 3).score("ES:D").unwrap();
    assert!((three - by_hand).abs() < 1e-5, "{three} vs {by_hand}");
    // rdml's own first step (a jitter) goes elsewhere.
    let jitter = Request::new(&net, &EmbeddingShift::new(net.forward(x.clone())), &pgd(0.1, 0.05, 2))
        .run(&x)
        .unwrap();
    let robrank_two = Request::new(&net, &shift, &pgd(0.1, 0.05, 2)).run(&x).unwrap();
    let apart = (jitter - robrank_two).abs().max().into_scalar::<f32>();
    assert!(apart > 1e-3, "the two first steps moved the images alike ({apart})");
}
