//! `rdml attack` and `rdml robustness`.

use super::budget::{Budget, attack_help, profile_help};
use super::{Outcome, open_device, refresh_report};
use anyhow::{Context as _, Result};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct AttackArgs {
    /// A run folder written by `rdml train`.
    #[arg(long)]
    pub model: PathBuf,
    /// The test data, when not where the run's config says (as for `eval`).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// The attack (--help lists them).
    #[arg(long, long_help = attack_help())]
    pub attack: String,
    /// A transfer attack: make the adversarial examples on this run's model, score them on
    /// --model's (same test images).
    #[arg(long, value_name = "DIR")]
    pub surrogate: Option<PathBuf>,
    /// Run the attack N times with seeds --seed, --seed + 1000003, … (selections and random
    /// starts differ) and print each score as mean ± sample std over the runs.
    #[arg(long, default_value_t = rdml::scoring::defaults::REPEATS, value_name = "N")]
    pub repeats: usize,
    /// Write each adversarial image here as PNG (ATTACK-INDEX.png, INDEX = the item's place
    /// in the test split), with ATTACK-index.json listing index, label, file and L∞ size.
    #[arg(long, value_name = "DIR")]
    pub save_examples: Option<PathBuf>,
    /// The attack budget: rob28, rob224 or pp-pgd5 (--help says what each is).
    #[arg(long, default_value = rdml::scoring::defaults::PROFILE, long_help = profile_help())]
    pub profile: String,
    #[command(flatten)]
    pub budget: Budget,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Attack and score the model as it infers with this batch-norm set instead of the clean
    /// set 0 (as `eval --bn-set`).
    #[arg(long, default_value_t = 0, value_name = "K")]
    pub bn_set: usize,
}

pub fn attack(args: AttackArgs, flag: Option<&str>, quiet: bool) -> Result<Outcome> {
    let AttackArgs {
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
    } = args;
    anyhow::ensure!(repeats >= 1, "--repeats must be ≥ 1");
    anyhow::ensure!(
        repeats == 1 || save_examples.is_none(),
        "--save-examples writes the images of one run: use it with --repeats 1"
    );
    let (unit, spec_budget) = rdml::attack::registry::attack_with_budget(&attack)?;
    let pgd = budget.pgd(&profile, spec_budget)?;
    rdml::attack::registry::method(&budget.method)?;
    let mut writer = save_examples
        .as_deref()
        .map(|d| rdml::attack::examples::ExampleWriter::new(d, &unit.spec()))
        .transpose()?;
    let device = open_device(flag, &[], json || quiet)?;
    let scoring = budget.scoring(data, &profile, pgd, surrogate.clone(), repeats, bn_set, !quiet && !json);
    let sink = writer
        .as_mut()
        .map(|w| w as &mut dyn rdml::attack::examples::AdversarialSink);
    let runs = rdml::scoring::attack(&model, unit.as_ref(), &scoring, &device, sink)?;
    let r = runs[0].clone();
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
    Ok(Outcome::Done)
}

#[derive(clap::Args)]
pub struct RobustnessArgs {
    /// A run folder written by `rdml train`.
    #[arg(long)]
    pub model: PathBuf,
    /// The test data, when not where the run's config says (as for `eval`).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// The attack budget: rob28, rob224 or pp-pgd5 (--help says what each is).
    #[arg(long, default_value = rdml::scoring::defaults::PROFILE, long_help = profile_help())]
    pub profile: String,
    #[command(flatten)]
    pub budget: Budget,
    /// A transfer attack: make every attack's examples on this run's model, score them on
    /// --model's (same test images).
    #[arg(long, value_name = "DIR")]
    pub surrogate: Option<PathBuf>,
    /// Run the suite N times with seeds --seed, --seed + 1000003, … and print ERS, ARS and
    /// each raw column as mean ± sample std over the runs.
    #[arg(long, default_value_t = rdml::scoring::defaults::REPEATS, value_name = "N")]
    pub repeats: usize,
    /// Also write the table as JSON here (it is always written to the run folder's
    /// robustness.json).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace --out when it exists (never a file of a run folder: model.safetensors,
    /// run.json, config.toml, …).
    #[arg(long)]
    pub overwrite: bool,
    /// Print the record as JSON (what Python's `Run.robustness` returns) instead of the table.
    #[arg(long)]
    pub json: bool,
}

pub fn robustness(args: RobustnessArgs, flag: Option<&str>, quiet: bool) -> Result<Outcome> {
    let RobustnessArgs {
        model,
        data,
        profile,
        budget,
        surrogate,
        repeats,
        out,
        overwrite,
        json,
    } = args;
    anyhow::ensure!(repeats >= 1, "--repeats must be ≥ 1");
    let pgd = budget.pgd(&profile, Default::default())?;
    rdml::attack::registry::method(&budget.method)?;
    if let Some(o) = &out {
        rdml::output::check(o, overwrite).context("--out")?;
    }
    let device = open_device(flag, &[], quiet || json)?;
    let scoring = budget.scoring(data.clone(), &profile, pgd, surrogate, repeats, 0, !quiet && !json);
    let scored = rdml::scoring::robustness(&model, &scoring, &device)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&scored.record)?);
    }
    if !scored.normalized {
        eprintln!(
            "warning: the embeddings are not L2-normalised; ES:D (and so ERS) is only meaningful on the unit sphere"
        );
    }
    let (r, spread) = (&scored.runs[0], &scored.spread);
    if json {
        // Printed above, whole.
    } else if repeats > 1 {
        print!("{}", rdml::report::robustness_spread_table(spread));
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
    if let Some(o) = out {
        rdml::output::write_json(&o, &scored.record, overwrite).context("--out")?;
    }
    if scored.store()? {
        refresh_report(&model, data.as_deref(), &device, quiet);
    }
    Ok(Outcome::Done)
}
