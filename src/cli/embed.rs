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
    pub profile: rdml::attack::profile::ProfileName,
    #[command(flatten)]
    pub budget: Budget,
}

pub fn embed(args: EmbedArgs, flag: Option<&str>, quiet: bool) -> Result<Outcome> {
    let out = args.out.clone();
    let job = rdml::job::EmbedJob {
        model: args.model,
        data: args.data,
        split: args.split.parse()?,
        attack: args.attack,
        options: args.budget.options(args.profile),
        out: Some(args.out),
        overwrite: args.overwrite,
        progress: !quiet,
    };
    let done = job.run(|| open_device(flag, &[], quiet))?;
    println!(
        "Wrote {} embeddings of dimension {} ({}) to {}.",
        done.exported.len(),
        done.exported.dim,
        done.what,
        out.display()
    );
    Ok(Outcome::Done)
}
