//! What a user takes away: `report.html` of a run (curves, metrics, robustness, retrieval grid,
//! health banners), the embeddings `rdml embed` writes, and the flat metric names in JSON.

use rdml::attack::budget::{Norm, Pgd};
use rdml::config::Experiment;
use rdml::html::{ReportOptions, refresh, write};
use rdml::train::{TrainOptions, load_run, train};
use std::path::{Path, PathBuf};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rdml-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn small_run(dir: &Path) {
    let exp = Experiment::load(
        "quickstart",
        &[
            "train.epochs=2".into(),
            "train.max_batches=6".into(),
            "train.sampler.pairs=32".into(),
            "eval.nmi=false".into(),
            "model.embedding_dim=32".into(),
        ],
    )
    .unwrap();
    let opts = TrainOptions {
        out: dir.to_path_buf(),
        ..Default::default()
    };
    train(&exp, &opts, &rdml::default_device()).unwrap();
}

fn opts(grid: usize) -> ReportOptions {
    ReportOptions {
        grid_queries: grid,
        pgd: Pgd {
            eps: 0.1,
            step: 0.05,
            steps: 3,
            norm: Norm::Linf,
            random_start: false,
            start_radius: 1.0,
            project: true,
        },
        ..Default::default()
    }
}

fn edit_run_json(dir: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let p = dir.join("run.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn report_embed_and_flat_metrics_of_a_small_run() {
    let dev = rdml::default_device();
    let root = tmp("outputs");
    let dir = root.join("run");
    small_run(&dir);

    // The metrics in run.json are flat and named.
    let run: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
    let m = &run["final_metrics"];
    assert!(
        m["recall@1"].is_f64() && m["map@r"].is_f64() && m.get("recall").is_none(),
        "{m}"
    );

    // The report: curves, metrics, the grid (2 queries: query, 8 before, adversarial, δ, 8 after).
    let p = refresh(&dir, &opts(2), &dev).unwrap();
    let html = std::fs::read_to_string(&p).unwrap();
    // The grid is the folder's record: the page is drawn again from it alone, image for image.
    let grid = rdml::grid::read(&dir).expect("grid.json of the current model");
    assert_eq!((grid.rows.len(), grid.queries), (2, 2));
    assert_eq!(std::fs::read_to_string(write(&dir).unwrap()).unwrap(), html);
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("Healthy"));
    assert_eq!(
        html.matches("<svg").count(),
        4,
        "loss, R@1/MAP@R, diagnostics, Recall@k"
    );
    assert_eq!(html.matches("<img").count(), 2 * (1 + 8 + 2 + 8));
    assert!(html.contains("No robustness.json"));
    // Self-contained: nothing fetched (the SVG namespace is a name, not a fetch), no script.
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http") && !html.contains("<script"));

    // With the suite's table, its terms as bars.
    let loaded = load_run(&dir, None, &dev).unwrap();
    let ctx = rdml::attack::context::Context::new(&loaded.net, &loaded.test.query, &dev, false).unwrap();
    let setup = rdml::attack::suite::Setup::white_box(&ctx, &opts(0).pgd, 16, 16, 0);
    let r = rdml::attack::suite::robustness(&setup).unwrap();
    rdml::atomic::write_json(&dir.join("robustness.json"), &serde_json::json!({"table": r})).unwrap();
    let html = std::fs::read_to_string(refresh(&dir, &opts(0), &dev).unwrap()).unwrap();
    assert_eq!(html.matches("<svg").count(), 5);
    assert!(html.contains(&format!("ERS {:.1}", r.ers)) && html.contains("<td>GTT</td>"));

    // Embeddings: what eval scores, written and read back.
    let (e, what) = rdml::embed::embed_split(&loaded, rdml::embed::Split::Test, &dev).unwrap();
    let clean = rdml::eval::embed(&loaded.net, &loaded.test.query, 128, &dev).unwrap();
    assert_eq!(e.embeddings, clean.data);
    assert_eq!(e.labels, loaded.test.query.labels);
    assert!(what.contains("test"));
    let st = root.join("e.safetensors");
    rdml::embed::write(&st, &e, &[("model", "x".into())]).unwrap();
    let bytes = std::fs::read(&st).unwrap();
    let t = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let emb = t.tensor("embeddings").unwrap();
    assert_eq!(emb.shape(), &[e.len(), e.dim]);
    let back: Vec<f32> = emb
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(back, e.embeddings);
    let labels: Vec<i64> = t
        .tensor("labels")
        .unwrap()
        .data()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(labels, e.labels.iter().map(|&l| l as i64).collect::<Vec<_>>());
    // The metrics recomputed from the export are eval's.
    let emb = rdml::eval::knn::Embeddings::new(e.embeddings.clone(), e.len(), e.dim).unwrap();
    let again = rdml::eval::score(&emb, &e.labels, None, &loaded.exp.eval, loaded.exp.seed, &dev).unwrap();
    let final_m: rdml::eval::Metrics = serde_json::from_value(m.clone()).unwrap();
    assert_eq!(again.retrieval, final_m.retrieval);
    assert!(
        rdml::embed::write(&root.join("e.csv"), &e, &[])
            .unwrap_err()
            .to_string()
            .contains(".npz")
    );

    // A diverged run (JSON null losses) and a collapsed one say so at the top.
    edit_run_json(&dir, |v| v["epochs"][1]["mean_loss"] = serde_json::Value::Null);
    let html = std::fs::read_to_string(write(&dir).unwrap()).unwrap();
    assert!(html.contains("DIVERGED") && html.contains("from epoch 2"), "{html}");
    edit_run_json(&dir, |v| v["final_metrics"]["health"]["verdict"] = "collapsed".into());
    let html = std::fs::read_to_string(write(&dir).unwrap()).unwrap();
    assert!(html.find("COLLAPSED").unwrap() < html.find("<h2>").unwrap());

    // Not a finished run: an error naming what is missing.
    let e = write(&root).unwrap_err().to_string();
    assert!(e.contains("no run.json"), "{e}");
    edit_run_json(&dir, |v| v["completed"] = false.into());
    let e = write(&dir).unwrap_err().to_string();
    assert!(e.contains("not finished"), "{e}");
    std::fs::remove_dir_all(&root).ok();
}
