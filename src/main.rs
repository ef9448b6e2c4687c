//! The `rdml` command: a thin layer over the library.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use rdml::config::{Experiment, PRESETS};
use rdml::report::{metrics_table, write_json};
use rdml::train::{TrainOptions, load_run, train};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser)]
#[command(
    name = "rdml",
    version,
    about = "Robust deep metric learning: train, evaluate, attack and harden embedding models"
)]
struct Cli {
    /// Where to compute: cpu, vulkan (the most capable Vulkan adapter), vulkan:N (the N-th of
    /// `rdml devices`) or auto (the first Vulkan GPU, else the CPU). Default: `train.device` of
    /// the config, else cpu. GPU devices need a build with `--features vulkan`.
    #[arg(long, global = true, value_name = "DEVICE")]
    device: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Train the small CNN on Fashion-MNIST (shipped inside rdml) and print its retrieval metrics.
    Quickstart {
        /// The run folder (default: runs/quickstart, or the first free runs/quickstart-N when it
        /// holds a run).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Replace the run in --out.
        #[arg(long)]
        overwrite: bool,
        /// Folder with the full Fashion-MNIST IDX files (default: /usr/share/datasets/fashion-mnist
        /// when present, else the embedded test split).
        #[arg(long)]
        data: Option<PathBuf>,
        #[arg(long)]
        epochs: Option<usize>,
    },
    /// Train a model from an experiment config (a TOML file or a preset name).
    Train {
        #[arg(long)]
        config: String,
        #[arg(long)]
        out: PathBuf,
        /// Continue the run in --out from its last completed epoch.
        #[arg(long)]
        resume: bool,
        /// Replace the finished or interrupted run in --out (only rdml's files are removed).
        #[arg(long)]
        overwrite: bool,
        #[arg(long)]
        epochs: Option<usize>,
        #[arg(long)]
        max_batches: Option<usize>,
        /// Override any config key, e.g. --set loss.margin=0.1 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// The defense as an inline TOML table, e.g. '{kind="act",eps=0.302,step=0.0118,steps=32}',
        /// or `none` to train the config without its defense.
        #[arg(long)]
        defense: Option<String>,
        #[arg(long)]
        quiet: bool,
    },
    /// Train (or load) each config under --out/<name>, run the robustness suite on each, and write
    /// one table: clean R@1, MAP@R, NMI, ERS, ARS, training time (compare.md, compare.json).
    Compare {
        /// Experiment configs (TOML files or preset names).
        #[arg(long, num_args = 1.., required = true)]
        configs: Vec<String>,
        #[arg(long)]
        out: PathBuf,
        /// Overrides applied to every config (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        #[arg(long)]
        epochs: Option<usize>,
        #[arg(long)]
        max_batches: Option<usize>,
        #[arg(long, default_value = "rob28")]
        profile: String,
        #[command(flatten)]
        budget: Budget,
        /// Train every config again, replacing finished runs under --out (by default a finished
        /// run is reused when its config equals the requested one, and refused otherwise).
        #[arg(long)]
        overwrite: bool,
        #[arg(long)]
        quiet: bool,
    },
    /// Embed a trained model's test split and print its metrics.
    Eval {
        /// A run folder written by `rdml train`.
        #[arg(long)]
        model: PathBuf,
        /// Use this data folder instead of the one in the run's config.
        #[arg(long)]
        data: Option<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Also write the metrics as JSON to this file.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Run one white-box attack on the test split of a trained model and print its score(s).
    Attack {
        #[arg(long)]
        model: PathBuf,
        /// CA+, CA-, QA+, QA-, TMA, ES, LTM, GTM, GTT, NN (nearest-neighbour, Algorithm 1), NN-CW[:κ]
        /// (the same by Carlini and Wagner's L∞ algorithm on their margin loss, confidence κ,
        /// default 0: --eps is the first τ and the ball, --step Adam's learning rate, --steps the
        /// iterations per (τ, c) round, at most 10 rounds' worth per query), NN-CW-PGD[:κ] (their
        /// margin loss by PGD), STAX, MTAX[:T] or UX[:T] (MDProp's feature-space examples, T
        /// targets, default 5).
        #[arg(long)]
        attack: String,
        #[command(flatten)]
        budget: Budget,
        #[arg(long)]
        json: bool,
    },
    /// Run robrank's ERS suite (nine attacks, ten columns) and print ERS and ARS.
    Robustness {
        #[arg(long)]
        model: PathBuf,
        /// rob28 (MNIST/Fashion: ε 77/255) or rob224 (CUB/CARS/SOP: ε 8/255); step 3/255, 32 steps.
        #[arg(long, default_value = "rob28")]
        profile: String,
        #[command(flatten)]
        budget: Budget,
        /// Write the table as JSON here.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// List the presets, or print one.
    Presets { name: Option<String> },
    /// List the devices this build and this machine offer for --device.
    Devices,
    /// Time training steps of a config (its defense included) on --device: the mean wall time
    /// of --steps steps after one warm-up step, on the config's first batch.
    BenchStep {
        #[arg(long)]
        config: String,
        /// Override any config key (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// The defense as an inline TOML table, or `none`.
        #[arg(long)]
        defense: Option<String>,
        #[arg(long, default_value_t = 5)]
        steps: usize,
        /// Random images of this shape (C,H,W, e.g. 3,224,224) in the sampler's class layout
        /// instead of the config's data (which then need not be present).
        #[arg(long, value_name = "C,H,W")]
        random_images: Option<String>,
        /// Also write the timing as JSON here.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// Attack budget options shared by `attack` and `robustness`.
#[derive(clap::Args)]
struct Budget {
    /// L∞ (or L2) radius in pixel units [0, 1] (default: the profile's, rob28 for `attack`).
    #[arg(long, allow_negative_numbers = true)]
    eps: Option<f32>,
    #[arg(long, allow_negative_numbers = true)]
    step: Option<f32>,
    #[arg(long)]
    steps: Option<usize>,
    #[arg(long, value_parser = ["linf", "l2"])]
    norm: Option<String>,
    #[arg(long)]
    random_start: bool,
    /// Number of test items used as queries (candidates for CA), from the start of the test split.
    #[arg(long, default_value_t = 1024)]
    queries: usize,
    #[arg(long, default_value_t = 128)]
    batch: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Reproduce robrank's GTM target index and LTM self mask (both bugs there).
    #[arg(long)]
    robrank_compat: bool,
}

impl Budget {
    fn pgd(&self, profile: &str) -> Result<rdml::attack::engine::Pgd> {
        use rdml::attack::engine::{Norm, Pgd};
        let eps = match profile {
            "rob28" => 77.0 / 255.0,
            "rob224" => 8.0 / 255.0,
            p => anyhow::bail!("--profile {p}: expected rob28 or rob224"),
        };
        anyhow::ensure!(self.queries >= 1, "--queries must be ≥ 1");
        anyhow::ensure!(self.batch >= 1, "--batch must be ≥ 1");
        let pgd = Pgd {
            eps: self.eps.unwrap_or(eps),
            step: self.step.unwrap_or(3.0 / 255.0),
            steps: self.steps.unwrap_or(32),
            norm: if self.norm.as_deref() == Some("l2") {
                Norm::L2
            } else {
                Norm::Linf
            },
            random_start: self.random_start,
        };
        pgd.validate_as("--")?;
        Ok(pgd)
    }
}

fn main() {
    rdml::tune_allocator();
    // burn materialises loaded optimizer state on `Device::default()`, which a `vulkan` build
    // makes the GPU: keep it on the CPU (it moves to the parameters' device at the next step).
    if std::env::var_os("BURN_DEVICE").is_none() {
        // SAFETY: no other thread exists yet.
        unsafe { std::env::set_var("BURN_DEVICE", "flex") };
    }
    let cli = Cli::parse();
    // A failure on the device (out of memory above all) surfaces as a panic at the next read
    // from it; report it as an error, with advice where there is some.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = panic_message(info.payload());
        if rdml::device::out_of_memory_advice(&msg).is_none() {
            default_hook(info);
        }
    }));
    let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(cli))) {
        Ok(Ok(Outcome::Done)) => 0,
        Ok(Ok(Outcome::Unhealthy)) => UNHEALTHY_EXIT,
        Ok(Err(e)) => {
            let msg = format!("{e:#}");
            eprintln!("error: {msg}");
            if let Some(advice) = rdml::device::out_of_memory_advice(&msg) {
                eprintln!("{advice}");
            }
            1
        }
        Err(payload) => {
            let msg = panic_message(payload.as_ref());
            match rdml::device::out_of_memory_advice(&msg) {
                Some(advice) => {
                    eprintln!("error: {advice}");
                    eprintln!("(from the device: {})", msg.lines().next().unwrap_or(""));
                    1
                }
                None => 101,
            }
        }
    };
    std::process::exit(code);
}

/// How a command ended when it did not fail.
enum Outcome {
    Done,
    /// A model that collapsed or ranks at chance: its numbers were printed, with the verdict.
    Unhealthy,
}

/// The exit status of a command whose model is not usable (README "Exit status").
const UNHEALTHY_EXIT: i32 = 3;

fn outcome(healthy: bool) -> Outcome {
    if healthy { Outcome::Done } else { Outcome::Unhealthy }
}

/// Prints the verdict of an evaluation when it is not healthy; returns whether it is.
fn report_health(m: &rdml::eval::Metrics) -> bool {
    match m.health {
        Some(h) if !h.verdict.is_healthy() => {
            eprintln!("warning: the model is {}", h.verdict.describe(&h));
            false
        }
        _ => true,
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Opens `--device`, else the configs' `train.device`, else the CPU, and says which it took.
fn open_device(flag: Option<&str>, configs: &[&Experiment], quiet: bool) -> Result<burn::tensor::Device> {
    use rdml::device::DeviceChoice;
    let choice: DeviceChoice = match flag {
        Some(f) => f.parse().context("--device")?,
        None => {
            let mut named = configs.iter().filter_map(|e| e.train.device);
            let first = named.next();
            if let Some(other) = named.find(|d| Some(*d) != first) {
                anyhow::bail!(
                    "the configs name different devices ({} and {other}): choose one with --device",
                    first.unwrap_or_default()
                );
            }
            first.unwrap_or_default()
        }
    };
    let s = rdml::device::select(choice)?;
    if !quiet {
        eprintln!("device: {}", s.description);
    }
    Ok(s.device)
}

/// `base` if it holds no run, else the first `base-N` that holds none.
fn free_run_folder(base: &str) -> Result<PathBuf> {
    use rdml::run_dir::{Found, inspect};
    for n in 1..1000 {
        let p = if n == 1 {
            PathBuf::from(base)
        } else {
            PathBuf::from(format!("{base}-{n}"))
        };
        if inspect(&p)? == Found::Nothing {
            if n > 1 {
                eprintln!("{base} holds a run (kept): writing to {}", p.display());
            }
            return Ok(p);
        }
    }
    anyhow::bail!("{base}-2 … {base}-999 all hold runs: pass --out, or --overwrite to replace {base}")
}

fn overrides(epochs: Option<usize>, max_batches: Option<usize>, set: &[String]) -> Vec<String> {
    let mut v = set.to_vec();
    if let Some(e) = epochs {
        v.push(format!("train.epochs={e}"));
    }
    if let Some(m) = max_batches {
        v.push(format!("train.max_batches={m}"));
    }
    v
}

fn run(cli: Cli) -> Result<Outcome> {
    let flag = cli.device.as_deref();
    if flag.is_some() && matches!(cli.cmd, Cmd::Presets { .. } | Cmd::Devices) {
        anyhow::bail!("--device applies to the commands that compute, not to `presets` or `devices`");
    }
    match cli.cmd {
        Cmd::Quickstart {
            out,
            overwrite,
            data,
            epochs,
        } => {
            let out = match out {
                Some(o) => o,
                None if overwrite => PathBuf::from("runs/quickstart"),
                None => free_run_folder("runs/quickstart")?,
            };
            let full = data.clone().or_else(|| {
                let d = PathBuf::from("/usr/share/datasets/fashion-mnist");
                rdml::data::mnist::full_set_present(&d).then_some(d)
            });
            let mut set = overrides(epochs, None, &[]);
            let source = match &full {
                Some(d) => {
                    set.push("data.dataset=\"fashion-mnist\"".into());
                    set.push(format!("data.root={:?}", d.display().to_string()));
                    // 469 batches per epoch: one epoch of 200 batches stays within a few minutes on
                    // two CPU cores (see README).
                    if epochs.is_none() {
                        set.push("train.epochs=1".into());
                        set.push("train.max_batches=200".into());
                    }
                    format!("Fashion-MNIST from {} (60,000 train / 10,000 test)", d.display())
                }
                None => "the Fashion-MNIST test split shipped in rdml (8,000 train / 2,000 test)".into(),
            };
            let exp = Experiment::load("quickstart", &set)?;
            let device = open_device(flag, &[&exp], false)?;
            eprintln!(
                "rdml quickstart: C2F2 + triplet loss on {source}, {} epoch(s){}",
                exp.train.epochs,
                exp.train
                    .max_batches
                    .map(|m| format!(" of {m} batches"))
                    .unwrap_or_default()
            );
            let t0 = Instant::now();
            let rep = train(
                &exp,
                &TrainOptions {
                    out: out.clone(),
                    resume: false,
                    overwrite,
                    progress: true,
                },
                &device,
            )?;
            let m = rep.final_metrics.context("no final evaluation")?;
            println!(
                "\nTest metrics after {} epochs ({:.0} s of training):",
                exp.train.epochs, rep.train_seconds
            );
            print!("{}", metrics_table(&m));
            if !report_health(&m) {
                return Ok(Outcome::Unhealthy);
            }
            let report = serde_json::json!({
                "data": source,
                "config": exp,
                "metrics": m,
                "train_seconds": rep.train_seconds,
                "total_seconds": t0.elapsed().as_secs_f64(),
                "run_dir": out,
            });
            // How fragile is it? The nearest-neighbour attack (Algorithm 1 of the positive-
            // perturbation paper) with robrank's rob28 budget on the first 512 test images.
            let run = load_run(&out, None, &device)?;
            let ctx = rdml::attack::suite::Context::new(&run.net, &run.test.query, &device, false)?;
            let pgd = rdml::attack::engine::Pgd {
                eps: 77.0 / 255.0,
                step: 3.0 / 255.0,
                steps: 32,
                norm: rdml::attack::engine::Norm::Linf,
                random_start: false,
            };
            let nn = rdml::attack::suite::run(&ctx, rdml::attack::suite::AttackKind::Nn, &pgd, 512, 128, exp.seed)?;
            let clean_r1 = nn.score("R@1:clean").unwrap_or(0.0);
            let adv_r1 = nn.score("R@1").unwrap_or(0.0);
            println!(
                "\nNearest-neighbour PGD attack (ε = 77/255, 32 steps of 3/255) on 512 test queries:\n  Recall@1 clean {clean_r1:.1} % → attacked {adv_r1:.1} % ({:.0} s)",
                nn.seconds
            );
            let mut report = report;
            report["attack"] = serde_json::json!({"attack": "NN (Algorithm 1)", "pgd": pgd, "queries": nn.queries, "recall_at_1_clean": clean_r1, "recall_at_1_attacked": adv_r1, "seconds": nn.seconds});
            report["total_seconds"] = serde_json::json!(t0.elapsed().as_secs_f64());
            write_json(&out.join("report.json"), &report)?;
            println!(
                "\nWrote {} (model, run.json, log.jsonl in the same folder).",
                out.join("report.json").display()
            );
        }
        Cmd::Train {
            config,
            out,
            resume,
            overwrite,
            epochs,
            max_batches,
            set,
            defense,
            quiet,
        } => {
            let o = overrides(epochs, max_batches, &set);
            let exp = Experiment::load_with_defense(&config, &o, defense.as_deref())?;
            let device = open_device(flag, &[&exp], quiet)?;
            let rep = train(
                &exp,
                &TrainOptions {
                    out: out.clone(),
                    resume,
                    overwrite,
                    progress: !quiet,
                },
                &device,
            )?;
            let mut healthy = true;
            if let Some(m) = &rep.final_metrics {
                println!("Test metrics ({}):", exp.name);
                print!("{}", metrics_table(m));
                healthy = report_health(m);
            }
            println!(
                "Wrote {}/model.safetensors and run.json ({:.0} s of training).",
                out.display(),
                rep.train_seconds
            );
            return Ok(outcome(healthy));
        }
        Cmd::Eval { model, data, json, out } => {
            if let Some(o) = &out {
                rdml::report::check_writable(o).context("--out")?;
            }
            let device = open_device(flag, &[], json)?;
            let run = load_run(&model, data.as_deref(), &device)?;
            let m = rdml::eval::evaluate(&run.net, &run.test, &run.exp.eval, run.exp.seed, &device)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&m)?);
            } else {
                println!("{} on {}:", model.display(), run.test.query.name);
                print!("{}", metrics_table(&m));
            }
            if let Some(o) = out {
                write_json(&o, &m)?;
            }
            return Ok(outcome(report_health(&m)));
        }
        Cmd::Attack {
            model,
            attack,
            budget,
            json,
        } => {
            use rdml::attack::suite::{AttackKind, Context, run};
            let kind = AttackKind::parse(&attack)?;
            let pgd = budget.pgd("rob28")?;
            let device = open_device(flag, &[], json)?;
            let run_ = load_run(&model, None, &device)?;
            let ctx = Context::new(&run_.net, &run_.test.query, &device, budget.robrank_compat)?;
            let r = run(&ctx, kind, &pgd, budget.queries, budget.batch, budget.seed)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "{} on {} ({} queries, ε {:.4}, step {:.4}, {} steps, {:.1} s):",
                    kind.name(),
                    model.display(),
                    r.queries,
                    pgd.eps,
                    pgd.step,
                    pgd.steps,
                    r.seconds
                );
                for s in &r.scores {
                    println!("  {:<10} {:>8.3}", s.name, s.value);
                }
            }
        }
        Cmd::Robustness {
            model,
            profile,
            budget,
            out,
        } => {
            use rdml::attack::suite::{Context, robustness};
            let pgd = budget.pgd(&profile)?;
            if let Some(o) = &out {
                rdml::report::check_writable(o).context("--out")?;
            }
            let device = open_device(flag, &[], false)?;
            let run_ = load_run(&model, None, &device)?;
            let ctx = Context::new(&run_.net, &run_.test.query, &device, budget.robrank_compat)?;
            if !ctx.clean.is_normalized() {
                eprintln!(
                    "warning: the embeddings are not L2-normalised; ES:D (and so ERS) is only meaningful on the unit sphere"
                );
            }
            let r = robustness(&ctx, &pgd, budget.queries, budget.batch, budget.seed, true)?;
            println!("{:<6} {:>9} {:>9} {:>9}", "column", "raw", "ERS term", "ARS term");
            for row in &r.rows {
                println!(
                    "{:<6} {:>9.3} {:>9.1} {:>9}",
                    row.column,
                    row.raw,
                    row.ers_term,
                    row.ars_term.map(|v| format!("{v:.1}")).unwrap_or("-".into())
                );
            }
            println!(
                "ERS {:.1}   ARS {:.1}   ({} queries, {profile}: ε {:.4}, step {:.4}, {} steps)",
                r.ers, r.ars, budget.queries, pgd.eps, pgd.step, pgd.steps
            );
            if let Some(o) = out {
                write_json(
                    &o,
                    &serde_json::json!({"model": model, "profile": profile, "pgd": pgd, "queries": budget.queries, "seed": budget.seed, "robrank_compat": budget.robrank_compat, "table": r}),
                )?;
            }
        }
        Cmd::Compare {
            configs,
            out,
            set,
            epochs,
            max_batches,
            profile,
            budget,
            overwrite,
            quiet,
        } => {
            let o = overrides(epochs, max_batches, &set);
            let exps = configs
                .iter()
                .map(|c| Experiment::load(c, &o))
                .collect::<Result<Vec<_>>>()?;
            let device = open_device(flag, &exps.iter().collect::<Vec<_>>(), quiet)?;
            let opts = rdml::compare::CompareOptions {
                out: out.clone(),
                pgd: budget.pgd(&profile)?,
                queries: budget.queries,
                batch: budget.batch,
                seed: budget.seed,
                progress: !quiet,
                overwrite,
            };
            let rows = rdml::compare::compare(&exps, &opts, &device)?;
            print!("{}", rdml::compare::markdown(&rows));
            println!("Wrote {}/compare.md and compare.json.", out.display());
            let sick: Vec<&str> = rows
                .iter()
                .filter(|r| r.verdict.is_some_and(|v| !v.is_healthy()))
                .map(|r| r.name.as_str())
                .collect();
            if !sick.is_empty() {
                eprintln!("warning: collapsed or at chance: {}", sick.join(", "));
                return Ok(Outcome::Unhealthy);
            }
        }
        Cmd::Presets { name } => match name {
            None => {
                for (n, text) in PRESETS {
                    let first = text.lines().next().unwrap_or("").trim_start_matches("# ");
                    println!("{n:<42} {first}");
                }
            }
            Some(n) => {
                let (_, text) = PRESETS
                    .iter()
                    .find(|p| p.0 == n)
                    .with_context(|| format!("no preset '{n}'"))?;
                print!("{text}");
            }
        },
        Cmd::BenchStep {
            config,
            set,
            defense,
            steps,
            random_images,
            out,
        } => {
            let exp = Experiment::load_with_defense(&config, &set, defense.as_deref())?;
            if let Some(o) = &out {
                rdml::report::check_writable(o).context("--out")?;
            }
            let shape = match random_images.as_deref() {
                None => None,
                Some(s) => {
                    let v: Vec<usize> = s
                        .split(',')
                        .map(|d| d.trim().parse::<usize>().ok().filter(|&d| d > 0))
                        .collect::<Option<_>>()
                        .with_context(|| format!("--random-images {s}: expected C,H,W, three positive integers"))?;
                    let [c, h, w] = v[..] else {
                        anyhow::bail!("--random-images {s}: expected C,H,W, three positive integers");
                    };
                    Some([c, h, w])
                }
            };
            let device = open_device(flag, &[&exp], false)?;
            let t = rdml::train::time_steps(&exp, steps, shape, &device)?;
            println!(
                "{}: {:.4} s per training step (mean of {}, batch {} of {:?})",
                exp.name, t.seconds_per_step, t.steps, t.batch, t.item_shape
            );
            if let Some(o) = out {
                write_json(&o, &t)?;
            }
        }
        Cmd::Devices => {
            println!(
                "cpu (Flex, {} threads; rdml's own kernels)",
                rayon::current_num_threads()
            );
            match rdml::device::adapters() {
                Ok(list) if list.is_empty() => println!("no Vulkan device (the loader found no driver)"),
                Ok(list) => list.iter().for_each(|a| println!("{a}")),
                Err(e) => println!("no Vulkan device: {e:#}"),
            }
            let auto = rdml::device::select(rdml::device::DeviceChoice::Auto)?;
            println!("auto → {}", auto.description);
        }
    }
    Ok(Outcome::Done)
}
