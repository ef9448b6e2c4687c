//! A model as an oracle: an rdml network asked through the host-array route a binding uses (a
//! [`HostModel`] with its own graph, pulled back by a vector–Jacobian product) gives the fused
//! graph's gradients and the same attacks; a wrong model is an error naming it; a scored
//! model's `out` folder replaces only what rdml wrote there.

mod common;
use common::host_net::host_net;
use common::small;

use burn::tensor::{Device, Tensor};
use rdml::attack::budget::{Norm, Pgd};
use rdml::attack::oracle::{Net, Oracle};
use rdml::attack::registry::attack;
use rdml::attack::suite::{Context, run};
use std::sync::Arc;

fn images(set: &rdml::data::ImageSet, n: usize) -> Tensor<4> {
    let items: Vec<usize> = (0..n).collect();
    rdml::eval::batch_tensor(
        &rdml::data::loader::load_batch(set, &items, None).unwrap(),
        &Device::default(),
    )
}

#[test]
fn the_host_route_gives_the_fused_graphs_gradient_and_attacks() {
    let (net, set) = small();
    let ctx = Context::new(&net, &set, &Device::default(), false).unwrap();
    let qa = attack("QA+").unwrap();
    let items: Vec<usize> = (0..6).collect();
    let plan = qa
        .plan(
            &ctx,
            &items,
            &mut <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(1),
        )
        .unwrap();
    let x = images(&set, 6);
    let loss = |emb: Tensor<2>| plan.objective().loss(emb, 0);
    let fused = Net::new(&net, 0).gradient(x.clone(), &loss).unwrap();
    let host = host_net(&net, 0).gradient(x, &loss).unwrap();
    let (a, b) = (fused.input.unwrap(), host.input.unwrap());
    let diff: f32 = (a.clone() - b).abs().max().into_scalar();
    let scale: f32 = a.abs().max().into_scalar();
    assert!(
        scale > 0.0 && diff <= 1e-5 * scale,
        "gradients differ by {diff} (scale {scale})"
    );
    assert_eq!(fused.loss.into_scalar::<f32>(), host.loss.into_scalar::<f32>());

    // A whole attack through each route: the same ranks.
    let pgd = Pgd {
        eps: 0.1,
        step: 0.01,
        steps: 4,
        norm: Norm::Linf,
        random_start: false,
        start_radius: 1.0,
        project: true,
    };
    let outside = Context::of(Arc::new(host_net(&net, 0)), &set, 64, &Device::default(), false).unwrap();
    assert_eq!(outside.clean.data, ctx.clean.data);
    for spec in ["CA+", "QA-", "ES"] {
        let a = run(&ctx, attack(spec).unwrap().as_ref(), &pgd, 16, 8, 3).unwrap();
        let b = run(&outside, attack(spec).unwrap().as_ref(), &pgd, 16, 8, 3).unwrap();
        for (sa, sb) in a.scores.iter().zip(&b.scores) {
            assert!(
                (sa.value - sb.value).abs() <= 100.0 / 16.0,
                "{spec} {}: {} vs {}",
                sa.name,
                sa.value,
                sb.value
            );
        }
    }
}

#[test]
fn a_wrong_answer_is_an_error_naming_the_model() {
    let (net, set) = small();
    let x = images(&set, 4);
    let loss = |emb: Tensor<2>| emb.sum();
    let message = |fault: usize| {
        let e = host_net(&net, fault)
            .gradient(x.clone(), &loss)
            .err()
            .expect("an error");
        assert!(
            e.chain().any(|c| c.is::<rdml::InputError>()),
            "not an input error: {e:#}"
        );
        format!("{e:#}")
    };
    assert!(message(1).starts_with("model: returned a non-finite embedding value (NaN) for image 1"));
    assert!(
        message(2).starts_with("model: returned a tensor of shape [4, "),
        "{}",
        message(2)
    );
    assert!(message(3).contains("the gradient with respect to the images has"));
    // A declared size at the overflow edge is an error, not a wrapped product or a panic.
    assert!(
        message(4).starts_with("model: returned 0 values for the shape [4, 9223372036854775808]"),
        "{}",
        message(4)
    );
}

#[test]
fn the_out_folder_takes_only_what_rdml_wrote() {
    use rdml::out_folder::{MARKER, check, write};
    let root = std::env::temp_dir().join(format!("rdml-scored-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let out = root.join("out");
    // Checked, nothing created; written; rewritten.
    check(&out, &["a.json"]).unwrap();
    assert!(!out.exists());
    write(&out, &[("a.json", b"one".to_vec())]).unwrap();
    write(&out, &[("a.json", b"two".to_vec())]).unwrap();
    assert_eq!(std::fs::read(out.join("a.json")).unwrap(), b"two");
    // Edited since: never replaced, at the check or at the write.
    std::fs::write(out.join("a.json"), b"edited by hand").unwrap();
    assert!(format!("{:#}", check(&out, &["a.json"]).unwrap_err()).contains("rdml did not write it"));
    assert!(write(&out, &[("a.json", b"three".to_vec())]).is_err());
    assert_eq!(std::fs::read(out.join("a.json")).unwrap(), b"edited by hand");
    // A user's file rdml never wrote, in a folder of its own.
    let mine = root.join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("a.json"), b"mine").unwrap();
    assert!(write(&mine, &[("a.json", b"x".to_vec())]).is_err());
    assert_eq!(std::fs::read(mine.join("a.json")).unwrap(), b"mine");
    assert!(!mine.join(MARKER).exists());
    // A ledger of the earlier format (each name's admissible digests, old and new) is read.
    let journal = root.join("journal");
    std::fs::create_dir_all(&journal).unwrap();
    std::fs::write(journal.join("a.json"), b"old").unwrap();
    let both = serde_json::json!({"a.json": [rdml::owned::digest(b"old"), "crc32:00000000:3"]});
    std::fs::write(journal.join(MARKER), both.to_string()).unwrap();
    write(&journal, &[("a.json", b"new".to_vec())]).unwrap();
    assert_eq!(std::fs::read(journal.join("a.json")).unwrap(), b"new");
    // A run folder is no output.
    let run = root.join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join(rdml::run_dir::MARKER), b"").unwrap();
    assert!(rdml::run_dir::is_run_folder(&run));
    assert!(format!("{:#}", check(&run, &["robustness.json"]).unwrap_err()).contains("is an rdml run folder"));
    let _ = std::fs::remove_dir_all(&root);
}

/// A model that answers differently to the same images (dropout or noise left on) is named in a
/// warning before any score; a deterministic one is not.
#[test]
fn a_model_that_answers_differently_is_named() {
    let differently = || {
        said()
            .iter()
            .filter(|t| t.contains("answers differently to the same images"))
            .cloned()
            .collect::<Vec<_>>()
    };
    said();
    let (net, set) = small();
    Context::of(Arc::new(host_net(&net, 0)), &set, 64, &Device::default(), false).unwrap();
    assert!(differently().is_empty(), "{:?}", differently());
    Context::of(Arc::new(host_net(&net, 5)), &set, 64, &Device::default(), false).unwrap();
    let said = differently();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].starts_with("model: answers differently"), "{}", said[0]);
}

/// What the library has said so far (its warnings and notes), from a sink installed once for the
/// whole test binary.
fn said() -> Vec<String> {
    use std::sync::{Mutex, Once};
    static SAID: Mutex<Vec<String>> = Mutex::new(vec![]);
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| rdml::notes::set_sink(Some(Box::new(|_, text| SAID.lock().unwrap().push(text.to_string())))));
    SAID.lock().unwrap().clone()
}

/// A data set's gallery that holds the queries' own images (the same images, in any order or a
/// subset, as an InShop-style list may name them) is read by content: the gallery that is the
/// queries reversed scores as leave-one-out, a partial one leaves each query's own image out of
/// its own list, each with a warning; never a Recall@1 of 1 by construction. A test split where
/// no query has another item of its class is an error naming it, never zeros.
#[test]
fn a_gallery_holding_the_queries_images_is_read_by_content() {
    use rdml::data::EvalSet;
    let (net, set) = small();
    let queries = set.subset("q", &(0..60).collect::<Vec<_>>());
    let (cfg, dev) = (rdml::eval::EvalConfig::default(), Device::default());
    let eval = |gallery: Option<rdml::data::ImageSet>| {
        let test = EvalSet {
            query: queries.clone(),
            gallery,
        };
        rdml::eval::evaluate(&net, &test, &cfg, 0, &dev)
    };
    let alone = eval(None).unwrap();
    said();
    let reversed = eval(Some(set.subset("g", &(0..60).rev().collect::<Vec<_>>()))).unwrap();
    assert_eq!(reversed.retrieval.recall, alone.retrieval.recall);
    // Each query's image twice: the second copy is left out too (it ranked first before).
    let twice: Vec<usize> = (0..60).chain((0..60).rev()).collect();
    let doubled = eval(Some(set.subset("g", &twice))).unwrap();
    assert_eq!(doubled.retrieval.recall, alone.retrieval.recall);
    assert!(alone.retrieval.recall_at(1).unwrap() < 0.95);
    // Half the queries' images among 100 others: each left out of its own list only.
    let half: Vec<usize> = (30..60).chain(100..200).collect();
    let partial = eval(Some(set.subset("g", &half))).unwrap();
    assert!(partial.retrieval.recall_at(1).unwrap() < 0.95);
    let said = said();
    assert!(
        said.iter().any(|t| t.contains("the gallery is the queries themselves")),
        "{said:?}"
    );
    assert!(
        said.iter().any(|t| t.contains("holds 30 of the 60 queries' own items")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|t| t.contains("60 further copies of queries' own items")),
        "{said:?}"
    );
    // Every query alone in its class: an error naming the split.
    let lone: Vec<usize> = (0..set.len())
        .filter(|&i| set.labels[..i].iter().all(|&l| l != set.labels[i]))
        .collect();
    let test = EvalSet {
        query: set.subset("lone/test", &lone),
        gallery: None,
    };
    let e = format!("{:#}", rdml::eval::evaluate(&net, &test, &cfg, 0, &dev).unwrap_err());
    assert!(
        e.starts_with("lone/test: no query has another item of its class"),
        "{e}"
    );
}
