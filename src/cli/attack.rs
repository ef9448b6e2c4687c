//! `rdml attack` and `rdml robustness`.

use super::budget::{Budget, attack_help, profile_help};
use super::{Outcome, open_device};
use anyhow::Result;
use rdml::scoring::options::RunScoring;
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
    pub profile: rdml::attack::profile::ProfileName,
    #[command(flatten)]
    pub budget: Budget,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also give each attacked item's own values: a line per item after the table, or
    /// `per_query` in each run of the JSON.
    #[arg(long)]
    pub per_query: bool,
    /// Attack and score the model as it infers with this batch-norm set instead of the clean
    /// set 0 (as `eval --bn-set`).
    #[arg(long, default_value_t = 0, value_name = "K")]
    pub bn_set: usize,
}

pub fn attack(args: AttackArgs, flag: Option<&str>, quiet: bool) -> Result<Outcome> {
    let json = args.json;
    let mut options = args.budget.options(args.profile);
    options.per_query = args.per_query;
    let job = rdml::job::AttackJob {
        options,
        run: RunScoring {
            data: args.data,
            surrogate: args.surrogate.clone(),
            repeats: args.repeats,
            bn_set: args.bn_set,
            progress: !quiet && !json,
            ..Default::default()
        },
        model: args.model.clone(),
        attack: args.attack,
        save_examples: args.save_examples.clone(),
    };
    let done = job.run(|| open_device(flag, &[], json || quiet))?;
    if let (Some(n), Some(d), false) = (done.saved, &args.save_examples, quiet) {
        eprintln!("wrote {n} adversarial images to {}", d.display());
    }
    let (runs, pgd, repeats) = (&done.runs, done.pgd, args.repeats);
    if json {
        println!("{}", serde_json::to_string_pretty(&done.json()?)?);
        return Ok(Outcome::Done);
    }
    let r = &runs[0];
    println!(
        "{}{}{} on {} ({} queries, ε {:.4}, step {:.4}, {} steps{}, {:.1} s):",
        r.attack,
        if r.method == "white-box" {
            String::new()
        } else {
            format!(" by {}", r.method)
        },
        args.surrogate
            .as_ref()
            .map(|s| format!(" made on {}", s.display()))
            .unwrap_or_default(),
        args.model.display(),
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
        print!("{}", rdml::tables::spread_table(&rdml::attack::result::spread(runs)));
    } else {
        print!("{}", rdml::tables::attack_table(r));
    }
    if let Some(p) = &r.per_query {
        print!("{}", rdml::tables::per_query_table(p));
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
    pub profile: rdml::attack::profile::ProfileName,
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
    /// Keep each attacked item's own values in the record (`per_query` of each attack's
    /// result in robustness.json, --out and --json).
    #[arg(long)]
    pub per_query: bool,
}

pub fn robustness(args: RobustnessArgs, flag: Option<&str>, quiet: bool) -> Result<Outcome> {
    let args_queries = args.budget.queries;
    let (json, repeats, profile) = (args.json, args.repeats, args.profile);
    let mut options = args.budget.options(args.profile);
    options.per_query = args.per_query;
    let job = rdml::job::RobustnessJob {
        model: args.model.clone(),
        options,
        run: RunScoring {
            data: args.data,
            surrogate: args.surrogate,
            repeats,
            bn_set: 0,
            progress: !quiet && !json,
            ..Default::default()
        },
        out: args.out.clone(),
        overwrite: args.overwrite,
    };
    let done = job.run(|| open_device(flag, &[], quiet || json))?;
    let (pgd, scored) = (done.pgd, &done.scored);
    let (r, spread) = (&scored.runs[0], &scored.spread);
    let queries = scored.record.queries_used.unwrap_or(args_queries);
    if json {
        println!("{}", serde_json::to_string_pretty(&scored.record)?);
    } else if repeats > 1 {
        print!("{}", rdml::tables::robustness_spread_table(spread));
        println!(
            "ERS {:.1} ± {:.1}   ARS {:.1} ± {:.1}   ({repeats} runs, {queries} queries, {profile}: ε {:.4}, step {:.4}, {} steps)",
            spread.ers.mean, spread.ers.std, spread.ars.mean, spread.ars.std, pgd.eps, pgd.step, pgd.steps
        );
    } else {
        print!("{}", rdml::tables::robustness_table(r));
        println!(
            "ERS {:.1}   ARS {:.1}   ({queries} queries, {profile}: ε {:.4}, step {:.4}, {} steps)",
            r.ers, r.ars, pgd.eps, pgd.step, pgd.steps
        );
    }
    if let (Some(p), false) = (&done.report, quiet) {
        eprintln!("report: {}", p.display());
    }
    if args.per_query && !json && !quiet {
        let kept: Vec<String> = std::iter::once(&args.model)
            .filter(|_| done.stored)
            .map(|m| m.join(rdml::attack::record::FILE).display().to_string())
            .chain(args.out.as_ref().map(|o| o.display().to_string()))
            .collect();
        match kept.is_empty() {
            true => eprintln!("each query's values were not kept: no record was written (give --out or --json)"),
            false => eprintln!(
                "each query's values: `per_query` of every attack in {}",
                kept.join(" and ")
            ),
        }
    }
    Ok(Outcome::Done)
}
