//! The command line: the clap types, one file per family of commands (each parses its
//! arguments and calls the library), and the policies they share (the device line, the health
//! verdict, the report refresh).

mod attack;
mod budget;
mod certify;
mod compare;
mod embed;
mod eval;
#[cfg(test)]
mod example;
mod import;
mod misc;
mod train;

use anyhow::Result;
use clap::{Parser, Subcommand};
use rdml::config::Experiment;

/// The command line as `main` parses it: [`Cli`] with every option's value allowed to be a
/// negative number, so that `--sigma -0.25` is sigma's value (refused by sigma's own check,
/// naming it) and never read as a flag.
pub fn parse() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let matches = numbers_as_values(Cli::command()).get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn numbers_as_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        let takes = a.get_action().takes_values();
        if takes { a.allow_negative_numbers(true) } else { a }
    })
    .mut_subcommands(numbers_as_values)
}

#[derive(Parser)]
#[command(
    name = "rdml",
    version,
    about = "Robust deep metric learning: train, evaluate, attack and harden embedding models"
)]
pub struct Cli {
    /// Where to compute: cpu, cuda (CUDA device 0), cuda:N, vulkan (the most capable Vulkan
    /// adapter), vulkan:N (the N-th of `rdml devices`) or auto (CUDA, else a Vulkan GPU, else
    /// the CPU). Default: `train.device` of the config, else cpu. GPU devices need a build with
    /// `--features cuda` or `--features vulkan`.
    #[arg(long, global = true, value_name = "DEVICE")]
    pub device: Option<String>,
    /// Print only results and errors: no progress bars, no device line, no per-attack lines.
    #[arg(long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// Declares the commands, one line each (its help, its variant and arguments, and the function
/// that runs it with the global `--device` and `--quiet`): `Cmd` for clap and the dispatch, so
/// that a command is its file plus one line here (`#[cfg(test)]` before it: a command only tests
/// see).
macro_rules! commands {
    ($( $(#[doc = $doc:literal])* $(#[cfg($cfg:meta)])? $Variant:ident($Args:ty) => $run:path, )+) => {
        #[derive(Subcommand)]
        pub enum Cmd {
            $( $(#[doc = $doc])* $(#[cfg($cfg)])? $Variant($Args), )+
        }

        fn dispatch(cmd: Cmd, flag: Option<&str>, quiet: bool) -> Result<Outcome> {
            match cmd {
                $( $(#[cfg($cfg)])? Cmd::$Variant(a) => $run(a, flag, quiet), )+
            }
        }
    };
}

commands! {
    /// Train the small CNN on Fashion-MNIST (shipped inside rdml) and print its retrieval metrics.
    Quickstart(train::QuickstartArgs) => train::quickstart,
    /// Train a model from an experiment config (a TOML file or a preset name); writes the run
    /// folder and its report.html.
    Train(train::TrainArgs) => train::train,
    /// Train (or load) each config under --out/<name>, run the robustness suite on each, and write
    /// one table: clean R@1, MAP@R, NMI, ERS, ARS, training time (compare.md, compare.json,
    /// report.html).
    Compare(compare::CompareArgs) => compare::compare,
    /// Embed a trained model's test split and print its metrics.
    Eval(eval::EvalArgs) => eval::eval,
    /// Run one attack on the test split of a trained model and print its score(s).
    Attack(attack::AttackArgs) => attack::attack,
    /// Run robrank's ERS suite (nine attacks, ten columns), print ERS and ARS, and add them to
    /// the run folder (robustness.json, report.html).
    Robustness(attack::RobustnessArgs) => attack::robustness,
    /// Certified Recall@1 by randomized smoothing: the share of queries whose top-1 label no ℓ2
    /// perturbation within each radius can change (certify.json in the run folder).
    Certify(certify::CertifyArgs) => certify::certify,
    /// Write a trained model's embeddings, labels and item ids to a file (safetensors, NumPy
    /// .npz, or .npy), ready for faiss or a vector database.
    Embed(embed::EmbedArgs) => embed::embed,
    /// Make a run folder from a model trained in PyTorch (robrank, pytorch-metric-learning,
    /// torchvision or timm ResNets, a plain state_dict), for every command that reads a run.
    Import(import::ImportArgs) => import::import,
    /// Write report.html of a run folder or a `compare` folder: one self-contained page with the
    /// training curves, the metrics, the robustness terms and a retrieval grid.
    Report(misc::ReportArgs) => misc::report,
    /// List the presets, or print one.
    Presets(misc::PresetsArgs) => misc::presets,
    /// List the devices this build and this machine offer for --device.
    Devices(misc::DevicesArgs) => misc::devices,
    /// Time training steps of a config (its defense included) on --device: the mean wall time
    /// of --steps steps after one warm-up step, on the config's first batch.
    BenchStep(misc::BenchStepArgs) => misc::bench_step,
    /// The worked example of a command (a test-only one): count a data set's items and classes.
    #[cfg(test)]
    ExampleCount(example::CountArgs) => example::count,
}

/// How a command ended when it did not fail.
pub enum Outcome {
    Done,
    /// A model that collapsed or ranks at chance: its numbers were printed, with the verdict.
    Unhealthy,
}

/// The exit status of a command whose model is not usable (README "Exit status").
pub const UNHEALTHY_EXIT: i32 = 3;

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

/// Opens the device ([`rdml::device::open`]'s policy) and says which it took.
fn open_device(flag: Option<&str>, configs: &[&Experiment], quiet: bool) -> Result<burn::tensor::Device> {
    let named: Vec<_> = configs.iter().map(|e| e.train.device).collect();
    let s = rdml::device::open(flag, &named)?;
    if !quiet {
        eprintln!(
            "device: {}",
            rdml::field::render(&s.description, rdml::field::Words::CommandLine)
        );
    }
    Ok(s.device)
}

fn overrides(epochs: Option<usize>, max_batches: Option<usize>, set: &[String]) -> Vec<String> {
    rdml::config::command_overrides(set, epochs, max_batches)
}

/// Writes `dir`'s report.html after a command that changed what it shows. A failure is a
/// warning: the command's own results are already written.
fn refresh_report(dir: &std::path::Path, data: Option<&std::path::Path>, device: &burn::tensor::Device, quiet: bool) {
    let opts = rdml::html::ReportOptions {
        data: data.map(|d| d.to_path_buf()),
        ..Default::default()
    };
    match rdml::html::refresh(dir, &opts, device) {
        Ok(p) if !quiet => eprintln!("report: {}", p.display()),
        Ok(_) => {}
        Err(e) => eprintln!(
            "warning: {}/report.html not written: {}",
            dir.display(),
            rdml::field::render(&format!("{e:#}"), rdml::field::Words::CommandLine)
        ),
    }
}

/// Runs the command `cli` names.
pub fn run(cli: Cli) -> Result<Outcome> {
    dispatch(cli.cmd, cli.device.as_deref(), cli.quiet)
}

/// A build of the command with a cargo feature, as its user types it (`⟨+cuda⟩` in library text).
pub fn build_words(feature: &str) -> String {
    format!("`cargo build --release --features {feature}`")
}

/// The refusal of `--device` by a command that computes nothing.
fn no_device(flag: Option<&str>, command: &str) -> Result<()> {
    anyhow::ensure!(
        flag.is_none(),
        "--device applies to the commands that compute, not to `{command}`"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Cli, numbers_as_values};
    use clap::CommandFactory;

    /// Library text in the command line's words: options as flags, a build as cargo's.
    #[test]
    fn library_text_in_the_command_lines_words() {
        use rdml::field::{Words, render};
        rdml::field::set_build_words(super::build_words);
        assert_eq!(
            render(
                "pass ⟨resume!⟩ to continue it (with more ⟨epochs⟩), or choose another ⟨out⟩; ⟨embedding_dim⟩ 64",
                Words::CommandLine
            ),
            "pass --resume to continue it (with more --epochs), or choose another --out; --embedding-dim 64"
        );
        assert_eq!(
            render("no CUDA: build it with ⟨+cuda⟩", Words::CommandLine),
            "no CUDA: build it with `cargo build --release --features cuda`"
        );
        assert_eq!(
            render("out⟨old.json exists; pass ⟨overwrite!⟩", Words::CommandLine),
            "out⟨old.json exists; pass --overwrite"
        );
    }

    /// A negative number after an option is its value, for every command (it was read as a flag:
    /// "unexpected argument '-0.25'"); the option's own check then refuses it, naming it.
    #[test]
    fn a_negative_number_is_an_options_value() {
        use clap::FromArgMatches;
        for args in [
            &["rdml", "certify", "--model", "m", "--sigma", "-0.25"][..],
            &["rdml", "certify", "--model", "m", "--alpha", "-0.5"],
            &["rdml", "attack", "--model", "m", "--attack", "ES", "--eps", "-0.1"],
            &["rdml", "robustness", "--model", "m", "--step", "-0.001"],
        ] {
            let m = numbers_as_values(Cli::command()).try_get_matches_from(args);
            let m = m.unwrap_or_else(|e| panic!("{args:?}: {e}"));
            assert!(Cli::from_arg_matches(&m).is_ok(), "{args:?}");
        }
    }

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
