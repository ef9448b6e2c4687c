//! The `rdml` command: a thin layer over the library.

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use rdml::attack::suite::{Context, robustness};
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
    /// Where to compute: cpu, cuda (CUDA device 0), cuda:N, vulkan (the most capable Vulkan
    /// adapter), vulkan:N (the N-th of `rdml devices`) or auto (CUDA, else a Vulkan GPU, else
    /// the CPU). Default: `train.device` of the config, else cpu. GPU devices need a build with
    /// `--features cuda` or `--features vulkan`.
    #[arg(long, global = true, value_name = "DEVICE")]
    device: Option<String>,
    /// Print only results and errors: no progress bars, no device line, no per-attack lines.
    #[arg(long, global = true)]
    quiet: bool,
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
        /// Training epochs (default: 4 on the embedded split, 1 of 200 batches on the full set).
        #[arg(long)]
        epochs: Option<usize>,
    },
    /// Train a model from an experiment config (a TOML file or a preset name); writes the run
    /// folder and its report.html.
    Train {
        /// A TOML experiment config, or a preset name (`rdml presets` lists them).
        #[arg(long)]
        config: String,
        /// The run folder (new, empty, or an rdml run to --resume or --overwrite).
        #[arg(long)]
        out: PathBuf,
        /// Read the data set from this folder (the config's `data.root`).
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// Continue the run in --out from its last completed epoch.
        #[arg(long)]
        resume: bool,
        /// Replace the finished or interrupted run in --out (only rdml's files are removed).
        #[arg(long)]
        overwrite: bool,
        /// Train this many epochs (the config's `train.epochs`).
        #[arg(long)]
        epochs: Option<usize>,
        /// Stop each epoch after this many batches (`train.max_batches`; for quick trials).
        #[arg(long)]
        max_batches: Option<usize>,
        /// Override any config key, e.g. --set loss.margin=0.1 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// The defense as an inline TOML table, e.g. '{kind="act",eps=0.302,step=0.0118,steps=32}',
        /// or `none` to train the config without its defense.
        #[arg(long)]
        defense: Option<String>,
    },
    /// Train (or load) each config under --out/<name>, run the robustness suite on each, and write
    /// one table: clean R@1, MAP@R, NMI, ERS, ARS, training time (compare.md, compare.json,
    /// report.html).
    Compare {
        /// Experiment configs (TOML files or preset names).
        #[arg(long, num_args = 1.., required = true)]
        configs: Vec<String>,
        /// The folder of the comparison; each experiment's run goes to a sub-folder named after it.
        #[arg(long)]
        out: PathBuf,
        /// Read every experiment's data set from this folder (their `data.root`).
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// Overrides applied to every config (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Train this many epochs (every config's `train.epochs`).
        #[arg(long)]
        epochs: Option<usize>,
        /// Stop each epoch after this many batches (`train.max_batches`).
        #[arg(long)]
        max_batches: Option<usize>,
        #[arg(long, default_value = "rob28", long_help = profile_help())]
        profile: String,
        #[command(flatten)]
        budget: Budget,
        /// Train every config again, replacing finished runs under --out (by default a finished
        /// run is reused when its config equals the requested one, and refused otherwise).
        #[arg(long)]
        overwrite: bool,
        /// Train each config with N seeds (its `seed`, `seed` + 1, …; runs named NAME-seedS)
        /// and report each column as mean ± sample std over them.
        #[arg(long, default_value_t = 1, value_name = "N")]
        seeds: usize,
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
        /// Replace --out when it exists (never a file of a run folder: model.safetensors,
        /// run.json, config.toml, …).
        #[arg(long)]
        overwrite: bool,
        /// Infer with this batch-norm set instead of the clean set 0 (MDProp's ablation of
        /// inference with an auxiliary set; the model must have been trained with it).
        #[arg(long, default_value_t = 0, value_name = "K")]
        bn_set: usize,
    },
    /// Run one attack on the test split of a trained model and print its score(s).
    Attack {
        /// A run folder written by `rdml train`.
        #[arg(long)]
        model: PathBuf,
        /// The test data, when not where the run's config says (as for `eval`).
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// The attack (--help lists them).
        #[arg(long, long_help = attack_help())]
        attack: String,
        /// A transfer attack: make the adversarial examples on this run's model, score them on
        /// --model's (same test images).
        #[arg(long, value_name = "DIR")]
        surrogate: Option<PathBuf>,
        /// Run the attack N times with seeds --seed, --seed + 1000003, … (selections and random
        /// starts differ) and print each score as mean ± sample std over the runs.
        #[arg(long, default_value_t = 1, value_name = "N")]
        repeats: usize,
        /// Write each adversarial image here as PNG (ATTACK-INDEX.png, INDEX = the item's place
        /// in the test split), with ATTACK-index.json listing index, label, file and L∞ size.
        #[arg(long, value_name = "DIR")]
        save_examples: Option<PathBuf>,
        /// The attack budget: rob28, rob224 or pp-pgd5 (--help says what each is).
        #[arg(long, default_value = "rob28", long_help = profile_help())]
        profile: String,
        #[command(flatten)]
        budget: Budget,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Attack and score the model as it infers with this batch-norm set instead of the clean
        /// set 0 (as `eval --bn-set`).
        #[arg(long, default_value_t = 0, value_name = "K")]
        bn_set: usize,
    },
    /// Run robrank's ERS suite (nine attacks, ten columns), print ERS and ARS, and add them to
    /// the run folder (robustness.json, report.html).
    Robustness {
        /// A run folder written by `rdml train`.
        #[arg(long)]
        model: PathBuf,
        /// The test data, when not where the run's config says (as for `eval`).
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// The attack budget: rob28, rob224 or pp-pgd5 (--help says what each is).
        #[arg(long, default_value = "rob28", long_help = profile_help())]
        profile: String,
        #[command(flatten)]
        budget: Budget,
        /// A transfer attack: make every attack's examples on this run's model, score them on
        /// --model's (same test images).
        #[arg(long, value_name = "DIR")]
        surrogate: Option<PathBuf>,
        /// Run the suite N times with seeds --seed, --seed + 1000003, … and print ERS, ARS and
        /// each raw column as mean ± sample std over the runs.
        #[arg(long, default_value_t = 1, value_name = "N")]
        repeats: usize,
        /// Also write the table as JSON here (it is always written to the run folder's
        /// robustness.json).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Replace --out when it exists (never a file of a run folder: model.safetensors,
        /// run.json, config.toml, …).
        #[arg(long)]
        overwrite: bool,
    },
    /// Write a trained model's embeddings, labels and item ids to a file (safetensors, NumPy
    /// .npz, or .npy), ready for faiss or a vector database.
    Embed {
        /// A run folder written by `rdml train`.
        #[arg(long)]
        model: PathBuf,
        /// The data, when not where the run's config says.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// Which items: train, test (queries, then the gallery where the data set has one) or all.
        #[arg(long, default_value = "test", value_parser = ["train", "test", "all"])]
        split: String,
        /// The output file: NAME.safetensors, NAME.npz, or NAME.npy (then NAME.labels.npy,
        /// NAME.ids.npy and NAME.split.npy beside it).
        #[arg(long)]
        out: PathBuf,
        /// Replace --out when it exists (never a file of a run folder: model.safetensors,
        /// run.json, config.toml, …).
        #[arg(long)]
        overwrite: bool,
        /// Embed the adversarial images of this attack on the first --queries test items instead
        /// of the clean ones (the items an attack leaves unmoved keep their clean image).
        #[arg(long, long_help = attack_help())]
        attack: Option<String>,
        /// The attack's budget (with --attack).
        #[arg(long, default_value = "rob28", long_help = profile_help())]
        profile: String,
        #[command(flatten)]
        budget: Budget,
    },
    /// Write report.html of a run folder or a `compare` folder: one self-contained page with the
    /// training curves, the metrics, the robustness terms and a retrieval grid.
    Report {
        /// A run folder written by `rdml train`, or a folder written by `rdml compare`.
        dir: PathBuf,
        /// The test data, when not where the run's config says (for the retrieval grid).
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// Queries in the retrieval grid (0: none).
        #[arg(long, default_value_t = 4)]
        grid: usize,
    },
    /// List the presets, or print one.
    Presets {
        /// The preset to print (its TOML).
        name: Option<String>,
    },
    /// List the devices this build and this machine offer for --device.
    Devices,
    /// Time training steps of a config (its defense included) on --device: the mean wall time
    /// of --steps steps after one warm-up step, on the config's first batch.
    BenchStep {
        /// A TOML experiment config, or a preset name.
        #[arg(long)]
        config: String,
        /// Override any config key (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// The defense as an inline TOML table, or `none`.
        #[arg(long)]
        defense: Option<String>,
        /// Timed steps (after one warm-up step).
        #[arg(long, default_value_t = 5)]
        steps: usize,
        /// Random images of this shape (C,H,W, e.g. 3,224,224) in the sampler's class layout
        /// instead of the config's data (which then need not be present).
        #[arg(long, value_name = "C,H,W")]
        random_images: Option<String>,
        /// Also write the timing as JSON here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Replace --out when it exists (never a file of a run folder: model.safetensors,
        /// run.json, config.toml, …).
        #[arg(long)]
        overwrite: bool,
    },
}

/// The attacking context of a transfer attack: `dir`'s model on the attacked run's test images.
fn surrogate_context(
    dir: Option<&std::path::Path>,
    set: &rdml::data::ImageSet,
    device: &burn::tensor::Device,
    robrank_compat: bool,
) -> Result<Option<Context>> {
    let Some(dir) = dir else { return Ok(None) };
    let (_, net) = rdml::train::load_model(dir, set.item_shape(), device).context("--surrogate")?;
    Ok(Some(Context::new(&net, set, device, robrank_compat)?))
}

fn attack_help() -> String {
    format!(
        "The attack: a name, with a value or KEY=VALUE pairs after ':' (robrank's spec strings such as \
         CA:pm=+:W=1:eps=0.03137:alpha=0.011764:pgditer=32 are read, their budget keys included).\n{}",
        rdml::attack::registry::help(rdml::attack::registry::ATTACKS)
    )
}

fn profile_help() -> String {
    format!(
        "The attack budget; --eps, --step, --steps, --norm and --random-start change it.\n{}",
        rdml::attack::profile::help()
    )
}

fn method_help() -> String {
    format!(
        "How the adversarial images are made.\n{}",
        rdml::attack::registry::help(rdml::attack::registry::METHODS)
    )
}

/// Attack budget options shared by `attack`, `robustness` and `compare`.
#[derive(clap::Args)]
struct Budget {
    /// L∞ (or L2) radius in pixel units [0, 1] (default: the profile's).
    #[arg(long, allow_negative_numbers = true)]
    eps: Option<f32>,
    /// PGD step (default: the profile's).
    #[arg(long, allow_negative_numbers = true)]
    step: Option<f32>,
    /// PGD iterations (default: the profile's).
    #[arg(long)]
    steps: Option<usize>,
    /// The norm of the budget (default linf).
    #[arg(long, value_parser = ["linf", "l2"])]
    norm: Option<String>,
    /// Start each attack from a uniformly random point of the ball.
    #[arg(long)]
    random_start: bool,
    /// How the adversarial images are made: white-box, nes or universal (--help says more).
    #[arg(long, default_value = "white-box", long_help = method_help())]
    method: String,
    /// Number of test items used as queries (candidates for CA), from the start of the test split.
    #[arg(long, default_value_t = 1024)]
    queries: usize,
    /// Items attacked at once.
    #[arg(long, default_value_t = 128)]
    batch: usize,
    /// Seed of the attacks' selections and random starts.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Reproduce robrank's GTM target index and LTM self mask (both bugs there).
    #[arg(long)]
    robrank_compat: bool,
}

impl Budget {
    /// The profile's budget changed by the options, and by a robrank spec's keys (which must
    /// agree with the options where both are given).
    fn pgd(&self, profile: &str, spec: rdml::attack::registry::SpecBudget) -> Result<rdml::attack::engine::Pgd> {
        use rdml::attack::engine::Norm;
        fn both<T: PartialEq + std::fmt::Display + Copy>(
            flag: Option<T>,
            key: Option<T>,
            what: &str,
        ) -> Result<Option<T>> {
            match (flag, key) {
                (Some(f), Some(k)) if f != k => {
                    anyhow::bail!("--{what} {f} and the attack spec's value {k} disagree: give one")
                }
                (f, k) => Ok(f.or(k)),
            }
        }
        anyhow::ensure!(self.queries >= 1, "--queries must be ≥ 1");
        anyhow::ensure!(self.batch >= 1, "--batch must be ≥ 1");
        let o = rdml::attack::profile::Overrides {
            eps: both(self.eps, spec.eps, "eps")?,
            step: both(self.step, spec.step, "step")?,
            steps: both(self.steps, spec.steps, "steps")?,
            norm: self
                .norm
                .as_deref()
                .map(|n| if n == "l2" { Norm::L2 } else { Norm::Linf }),
            random_start: self.random_start,
        };
        let pgd = rdml::attack::profile::profile(profile).context("--profile")?.pgd(&o);
        pgd.validate_as("--")?;
        Ok(pgd)
    }

    fn setup<'a>(
        &self,
        target: &'a Context,
        attacker: &'a Context,
        method: &'a dyn rdml::attack::method::Method,
        pgd: rdml::attack::engine::Pgd,
    ) -> rdml::attack::suite::Setup<'a> {
        rdml::attack::suite::Setup {
            target,
            attacker,
            method,
            pgd,
            queries: self.queries,
            batch: self.batch,
            seed: self.seed,
            progress: false,
        }
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

/// Opens the device ([`rdml::device::open`]'s policy) and says which it took.
fn open_device(flag: Option<&str>, configs: &[&Experiment], quiet: bool) -> Result<burn::tensor::Device> {
    let named: Vec<_> = configs.iter().map(|e| e.train.device).collect();
    let s = rdml::device::open(flag, &named)?;
    if !quiet {
        eprintln!("device: {}", s.description);
    }
    Ok(s.device)
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

/// Writes `dir`'s report.html after a command that changed what it shows. A failure is a
/// warning: the command's own results are already written.
fn refresh_report(dir: &std::path::Path, data: Option<&std::path::Path>, device: &burn::tensor::Device, quiet: bool) {
    let opts = rdml::html::ReportOptions {
        data: data.map(|d| d.to_path_buf()),
        ..Default::default()
    };
    match rdml::html::write(dir, &opts, device) {
        Ok(p) if !quiet => eprintln!("report: {}", p.display()),
        Ok(_) => {}
        Err(e) => eprintln!("warning: {}/report.html not written: {e:#}", dir.display()),
    }
}

fn run(cli: Cli) -> Result<Outcome> {
    let flag = cli.device.as_deref();
    let quiet = cli.quiet;
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
            let t0 = Instant::now();
            let qs = rdml::quickstart::Quickstart::new(out, overwrite, data, epochs)?;
            let device = open_device(flag, &[&qs.exp], quiet)?;
            if !quiet {
                eprintln!("{}", qs.describe());
            }
            let (rep, m) = qs.train(&device, !quiet)?;
            println!(
                "\nTest metrics after {} epochs ({:.0} s of training):",
                qs.exp.train.epochs, rep.train_seconds
            );
            print!("{}", metrics_table(&m));
            if !report_health(&m) {
                return Ok(Outcome::Unhealthy);
            }
            // How fragile is it?
            let nn = qs.attack(&rep, &m, &device, t0)?;
            let pgd = rdml::quickstart::Quickstart::pgd()?;
            println!(
                "\nNearest-neighbour PGD attack (ε = 77/255, {} steps of 3/255) on {} test queries:\n  Recall@1 clean {:.1} % → attacked {:.1} % ({:.0} s)",
                pgd.steps,
                nn.queries,
                nn.score("recall@1:clean").unwrap_or(0.0),
                nn.score("recall@1").unwrap_or(0.0),
                nn.seconds
            );
            refresh_report(&qs.out, None, &device, true);
            println!(
                "\nWrote {} and report.html (model, run.json, log.jsonl in the same folder).",
                qs.report_path().display()
            );
        }
        Cmd::Train {
            config,
            out,
            resume,
            overwrite,
            data,
            epochs,
            max_batches,
            set,
            defense,
        } => {
            let o = overrides(epochs, max_batches, &set);
            let mut exp = Experiment::load_with_defense(&config, &o, defense.as_deref())?;
            if let Some(d) = &data {
                exp.data.use_folder(d);
            }
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
            refresh_report(&out, None, &device, true);
            println!(
                "Wrote {}/model.safetensors, run.json and report.html ({:.0} s of training).",
                out.display(),
                rep.train_seconds
            );
            return Ok(outcome(healthy));
        }
        Cmd::Eval {
            model,
            data,
            json,
            out,
            overwrite,
            bn_set,
        } => {
            if let Some(o) = &out {
                rdml::output::check(o, overwrite).context("--out")?;
            }
            let device = open_device(flag, &[], json || quiet)?;
            let mut run = load_run(&model, data.as_deref(), &device)?;
            if bn_set != 0 {
                run.net = run.net.with_inference_bn_set(bn_set).context("--bn-set")?;
            }
            let m = rdml::eval::evaluate(&run.net, &run.test, &run.exp.eval, run.exp.seed, &device)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&m)?);
            } else {
                let set = if bn_set != 0 {
                    format!(" (batch-norm set {bn_set})")
                } else {
                    String::new()
                };
                println!("{}{set} on {}:", model.display(), run.test.query.name);
                print!("{}", metrics_table(&m));
            }
            if let Some(o) = out {
                rdml::output::write_json(&o, &m, overwrite).context("--out")?;
            }
            return Ok(outcome(report_health(&m)));
        }
        Cmd::Attack {
            model,
            data,
            attack,
            surrogate,
            repeats,
            save_examples,
            profile,
            budget,
            json,
            bn_set,
        } => {
            anyhow::ensure!(repeats >= 1, "--repeats must be ≥ 1");
            anyhow::ensure!(
                repeats == 1 || save_examples.is_none(),
                "--save-examples writes the images of one run: use it with --repeats 1"
            );
            let (unit, spec_budget) = rdml::attack::registry::attack_with_budget(&attack)?;
            let pgd = budget.pgd(&profile, spec_budget)?;
            let method = rdml::attack::registry::method(&budget.method)?;
            let mut writer = save_examples
                .as_deref()
                .map(|d| rdml::attack::examples::ExampleWriter::new(d, &unit.spec()))
                .transpose()?;
            let device = open_device(flag, &[], json || quiet)?;
            let mut run_ = load_run(&model, data.as_deref(), &device)?;
            if bn_set != 0 {
                run_.net = run_.net.with_inference_bn_set(bn_set).context("--bn-set")?;
            }
            let ctx = Context::new(&run_.net, &run_.test.query, &device, budget.robrank_compat)?
                .with_distance(run_.exp.loss.distance());
            let sur = surrogate_context(surrogate.as_deref(), &run_.test.query, &device, budget.robrank_compat)?;
            let setup = rdml::attack::suite::Setup {
                progress: !quiet && !json,
                ..budget.setup(&ctx, sur.as_ref().unwrap_or(&ctx), method.as_ref(), pgd)
            };
            let r = rdml::attack::suite::run_saving(
                &setup,
                unit.as_ref(),
                writer
                    .as_mut()
                    .map(|w| w as &mut dyn rdml::attack::examples::AdversarialSink),
            )?;
            let mut runs = vec![r.clone()];
            for k in 1..repeats {
                let s = rdml::attack::suite::Setup {
                    seed: rdml::attack::score::repeat_seed(budget.seed, k),
                    ..setup
                };
                runs.push(rdml::attack::suite::run_with(&s, unit.as_ref())?);
            }
            if let (Some(w), Some(d)) = (writer, &save_examples) {
                let n = w.finish()?;
                if !quiet {
                    eprintln!("wrote {n} adversarial images to {}", d.display());
                }
            }
            let spread = rdml::attack::score::spread(&runs);
            if json && repeats > 1 {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({"runs": runs, "mean_std": spread}))?
                );
            } else if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "{}{}{} on {} ({} queries, ε {:.4}, step {:.4}, {} steps{}, {:.1} s):",
                    r.attack,
                    if r.method == "white-box" {
                        String::new()
                    } else {
                        format!(" by {}", r.method)
                    },
                    surrogate
                        .as_ref()
                        .map(|s| format!(" made on {}", s.display()))
                        .unwrap_or_default(),
                    model.display(),
                    r.queries,
                    pgd.eps,
                    pgd.step,
                    pgd.steps,
                    if repeats > 1 {
                        format!(", {repeats} runs")
                    } else {
                        String::new()
                    },
                    runs.iter().map(|r| r.seconds).sum::<f64>()
                );
                if repeats > 1 {
                    print!("{}", rdml::report::spread_table(&spread));
                } else {
                    print!("{}", rdml::report::attack_table(&r));
                }
            }
        }
        Cmd::Robustness {
            model,
            data,
            profile,
            budget,
            surrogate,
            repeats,
            out,
            overwrite,
        } => {
            anyhow::ensure!(repeats >= 1, "--repeats must be ≥ 1");
            let pgd = budget.pgd(&profile, Default::default())?;
            let method = rdml::attack::registry::method(&budget.method)?;
            if let Some(o) = &out {
                rdml::output::check(o, overwrite).context("--out")?;
            }
            let device = open_device(flag, &[], quiet)?;
            let digest = rdml::run_dir::model_digest(&model)?;
            let run_ = load_run(&model, data.as_deref(), &device)?;
            let ctx = Context::new(&run_.net, &run_.test.query, &device, budget.robrank_compat)?
                .with_distance(run_.exp.loss.distance());
            if !ctx.clean.is_normalized() {
                eprintln!(
                    "warning: the embeddings are not L2-normalised; ES:D (and so ERS) is only meaningful on the unit sphere"
                );
            }
            let sur = surrogate_context(surrogate.as_deref(), &run_.test.query, &device, budget.robrank_compat)?;
            let setup = rdml::attack::suite::Setup {
                progress: !quiet,
                ..budget.setup(&ctx, sur.as_ref().unwrap_or(&ctx), method.as_ref(), pgd)
            };
            let mut runs = vec![];
            for k in 0..repeats {
                if repeats > 1 && !quiet {
                    eprintln!("run {} of {repeats}", k + 1);
                }
                let s = rdml::attack::suite::Setup {
                    seed: rdml::attack::score::repeat_seed(budget.seed, k),
                    ..setup
                };
                runs.push(robustness(&s)?);
            }
            let r = &runs[0];
            let spread = rdml::attack::score::robustness_spread(&runs);
            if repeats > 1 {
                print!("{}", rdml::report::robustness_spread_table(&spread));
                println!(
                    "ERS {:.1} ± {:.1}   ARS {:.1} ± {:.1}   ({repeats} runs, {} queries, {profile}: ε {:.4}, step {:.4}, {} steps)",
                    spread.ers.mean,
                    spread.ers.std,
                    spread.ars.mean,
                    spread.ars.std,
                    budget.queries,
                    pgd.eps,
                    pgd.step,
                    pgd.steps
                );
            } else {
                print!("{}", rdml::report::robustness_table(r));
                println!(
                    "ERS {:.1}   ARS {:.1}   ({} queries, {profile}: ε {:.4}, step {:.4}, {} steps)",
                    r.ers, r.ars, budget.queries, pgd.eps, pgd.step, pgd.steps
                );
            }
            let mut j = serde_json::json!({"model": model, "model_digest": digest, "profile": profile, "method": budget.method, "surrogate": surrogate, "pgd": pgd, "queries": budget.queries, "seed": budget.seed, "robrank_compat": budget.robrank_compat, "table": r});
            if repeats > 1 {
                j["repeats"] = serde_json::json!({"runs": runs, "mean_std": spread});
            }
            if let Some(o) = out {
                rdml::output::write_json(&o, &j, overwrite).context("--out")?;
            }
            rdml::run_dir::check_unchanged(&model, &digest, rdml::html::ROBUSTNESS_FILE)?;
            match write_json(&model.join(rdml::html::ROBUSTNESS_FILE), &j) {
                Ok(()) => refresh_report(&model, data.as_deref(), &device, quiet),
                Err(e) => eprintln!("warning: the run folder's robustness.json not written: {e:#}"),
            }
        }
        Cmd::Compare {
            configs,
            out,
            data,
            set,
            epochs,
            max_batches,
            profile,
            budget,
            overwrite,
            seeds,
        } => {
            anyhow::ensure!(seeds >= 1, "--seeds must be ≥ 1");
            let o = overrides(epochs, max_batches, &set);
            let mut exps = configs
                .iter()
                .map(|c| Experiment::load(c, &o))
                .collect::<Result<Vec<_>>>()?;
            if let Some(d) = &data {
                exps.iter_mut().for_each(|e| e.data.use_folder(d));
            }
            let device = open_device(flag, &exps.iter().collect::<Vec<_>>(), quiet)?;
            let opts = rdml::compare::CompareOptions {
                out: out.clone(),
                pgd: budget.pgd(&profile, Default::default())?,
                method: budget.method.clone(),
                queries: budget.queries,
                batch: budget.batch,
                seed: budget.seed,
                progress: !quiet,
                overwrite,
                seeds,
            };
            let rows = rdml::compare::compare(&exps, &opts, &device)?;
            for r in &rows {
                refresh_report(&r.run, None, &device, true);
            }
            refresh_report(&out, None, &device, true);
            print!("{}", rdml::compare::tables(&rows, &exps, seeds));
            println!("Wrote {}/compare.md, compare.json and report.html.", out.display());
            let sick = rdml::compare::unhealthy(&rows);
            if !sick.is_empty() {
                eprintln!("warning: collapsed or at chance: {}", sick.join(", "));
                return Ok(Outcome::Unhealthy);
            }
        }
        Cmd::Embed {
            model,
            data,
            split,
            out,
            overwrite,
            attack,
            profile,
            budget,
        } => {
            let split: rdml::embed::Split = split.parse()?;
            anyhow::ensure!(
                attack.is_none() || split == rdml::embed::Split::Test,
                "--attack attacks test items: use it with --split test"
            );
            rdml::output::check_files(&rdml::embed::output_files(&out)?, overwrite).context("--out")?;
            let device = open_device(flag, &[], quiet)?;
            let digest = rdml::run_dir::model_digest(&model)?;
            let run_ = load_run(&model, data.as_deref(), &device)?;
            let (exported, what) = match &attack {
                Some(spec) => {
                    let (unit, spec_budget) = rdml::attack::registry::attack_with_budget(spec)?;
                    let pgd = budget.pgd(&profile, spec_budget)?;
                    let method = rdml::attack::registry::method(&budget.method)?;
                    let ctx = Context::new(&run_.net, &run_.test.query, &device, budget.robrank_compat)?
                        .with_distance(run_.exp.loss.distance());
                    let setup = rdml::attack::suite::Setup {
                        progress: !quiet,
                        ..budget.setup(&ctx, &ctx, method.as_ref(), pgd)
                    };
                    let mut sink = rdml::embed::AttackedEmbeddings::new(&ctx.model);
                    let r = rdml::attack::suite::run_saving(&setup, unit.as_ref(), Some(&mut sink))?;
                    (sink.out, format!("{} test items attacked by {}", r.queries, r.attack))
                }
                None => rdml::embed::embed_split(&run_, split, &device)?,
            };
            let meta = [
                ("model", model.display().to_string()),
                ("model_digest", digest),
                ("split", what.clone()),
                ("rdml", env!("CARGO_PKG_VERSION").to_string()),
            ];
            rdml::output::check_files(&rdml::embed::output_files(&out)?, overwrite).context("--out")?;
            rdml::embed::write(&out, &exported, &meta)?;
            println!(
                "Wrote {} embeddings of dimension {} ({what}) to {}.",
                exported.len(),
                exported.dim,
                out.display()
            );
        }
        Cmd::Report { dir, data, grid } => {
            let device = open_device(flag, &[], quiet)?;
            let opts = rdml::html::ReportOptions {
                data,
                grid_queries: grid,
                ..Default::default()
            };
            let p = rdml::html::write(&dir, &opts, &device)?;
            println!("Wrote {}.", p.display());
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
            overwrite,
        } => {
            let exp = Experiment::load_with_defense(&config, &set, defense.as_deref())?;
            if let Some(o) = &out {
                rdml::output::check(o, overwrite).context("--out")?;
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
            let device = open_device(flag, &[&exp], quiet)?;
            let t = rdml::train::time_steps(&exp, steps, shape, &device)?;
            println!(
                "{}: {:.4} s per training step (mean of {}, batch {} of {:?})",
                exp.name, t.seconds_per_step, t.steps, t.batch, t.item_shape
            );
            if let Some(o) = out {
                rdml::output::write_json(&o, &t, overwrite).context("--out")?;
            }
        }
        Cmd::Devices => {
            println!(
                "cpu (Flex, {} threads; rdml's own kernels)",
                rayon::current_num_threads()
            );
            match rdml::device::cuda_devices() {
                Ok(list) => list.iter().for_each(|g| println!("{g}")),
                Err(e) => println!("no CUDA device: {e:#}"),
            }
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

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// `--help` says what every option of every command does.
    #[test]
    fn every_option_has_help() {
        let root = Cli::command();
        let mut missing = vec![];
        for cmd in std::iter::once(&root).chain(root.get_subcommands()) {
            for a in cmd.get_arguments() {
                if a.get_help().is_none()
                    && a.get_long_help().is_none()
                    && a.get_id() != "help"
                    && a.get_id() != "version"
                {
                    missing.push(format!("{} --{}", cmd.get_name(), a.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "options without help: {missing:?}");
        Cli::command().debug_assert();
    }
}
