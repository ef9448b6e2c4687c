//! `rdml embed`.

use super::budget::{Budget, attack_help, profile_help};
use super::{Outcome, open_device};
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct EmbedArgs {
    /// A run folder written by `rdml train`.
    #[arg(long)]
    pub model: PathBuf,
    /// The data, when not where the run's config says.
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Which items: train, test (queries, then the gallery where the data set has one) or all.
    #[arg(long, default_value = "test", value_parser = ["train", "test", "all"])]
    pub split: String,
    /// The output file: NAME.safetensors, NAME.npz, or NAME.npy (then NAME.labels.npy,
    /// NAME.ids.npy and NAME.split.npy beside it).
    #[arg(long)]
    pub out: PathBuf,
    /// Replace --out when it exists (never a file of a run folder: model.safetensors,
    /// run.json, config.toml, …).
    #[arg(long)]
    pub overwrite: bool,
    /// Embed the adversarial images of this attack on the first --queries test items instead
    /// of the clean ones (the items an attack leaves unmoved keep their clean image).
    #[arg(long, long_help = attack_help())]
    pub attack: Option<String>,
    /// The attack's budget (with --attack).
    #[arg(long, default_value = rdml::scoring::defaults::PROFILE, long_help = profile_help())]
    pub profile: String,
    #[command(flatten)]
    pub budget: Budget,
}

pub fn embed(args: EmbedArgs, flag: Option<&str>, quiet: bool) -> Result<Outcome> {
    let EmbedArgs {
        model,
        data,
        split,
        out,
        overwrite,
        attack,
        profile,
        budget,
    } = args;
    let split: rdml::embed::Split = split.parse()?;
    anyhow::ensure!(
        attack.is_none() || split == rdml::embed::Split::Test,
        "--attack attacks test items: use it with --split test"
    );
    rdml::embed::check_out(&out, overwrite)?;
    let device = open_device(flag, &[], quiet)?;
    let target = rdml::target::Target::open(&model, data.as_deref(), 0, &device)?;
    let run_ = &target.run;
    let (exported, what) = match &attack {
        Some(spec) => {
            let (unit, spec_budget) = rdml::attack::registry::attack_with_budget(spec)?;
            let pgd = budget.pgd(&profile, spec_budget)?;
            let method = rdml::attack::registry::method(&budget.method)?;
            let ctx = target.context(&device, budget.robrank_compat, budget.batch)?;
            let setup = rdml::attack::suite::Setup {
                target: &ctx,
                attacker: &ctx,
                method: method.as_ref(),
                pgd,
                queries: budget.queries,
                batch: budget.batch,
                seed: budget.seed,
                progress: !quiet,
            };
            let mut sink = rdml::embed::AttackedEmbeddings::new(ctx.model.as_ref());
            let r = rdml::attack::suite::run_saving(&setup, unit.as_ref(), Some(&mut sink))?;
            (sink.out, format!("{} test items attacked by {}", r.queries, r.attack))
        }
        None => rdml::embed::embed_split(run_, split, &device)?,
    };
    let meta = [
        ("model", model.display().to_string()),
        ("model_digest", target.digest.clone()),
        ("split", what.clone()),
        ("rdml", env!("CARGO_PKG_VERSION").to_string()),
    ];
    rdml::embed::check_out(&out, overwrite)?;
    rdml::embed::write(&out, &exported, &meta)?;
    println!(
        "Wrote {} embeddings of dimension {} ({what}) to {}.",
        exported.len(),
        exported.dim,
        out.display()
    );
    Ok(Outcome::Done)
}
