//! `rdml import`.

use super::Outcome;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ImportArgs {
    /// The PyTorch checkpoint: a `state_dict` saved by `torch.save` (.pth, .pt), a Lightning
    /// .ckpt (robrank's), or .safetensors; for pytorch-metric-learning, its trunk (with
    /// --embedder) or one file holding `trunk` and `embedder`. No pickle code is run.
    #[arg(long = "from", value_name = "FILE")]
    pub from: PathBuf,
    /// pytorch-metric-learning's embedder file (its `MLP`), when --from is the trunk.
    #[arg(long, value_name = "FILE")]
    pub embedder: Option<PathBuf>,
    /// The architecture the checkpoint holds.
    #[arg(long, value_parser = ["c2f2", "resnet18", "resnet50"])]
    pub arch: String,
    /// The embedding width; checked against the checkpoint's embedding layer (read from it when
    /// not given).
    #[arg(long, value_name = "D")]
    pub embedding_dim: Option<usize>,
    /// Rename a key prefix before the layout is recognised: OLD=NEW (NEW may be empty to strip
    /// OLD); repeatable, the first matching rule applies. E.g. --key-map encoder.= --key-map head.=fc.
    #[arg(long = "key-map", value_name = "OLD=NEW")]
    pub key_map: Vec<String>,
    /// Leave out tensors of the file that fill no parameter (listed in import.json) instead of
    /// failing.
    #[arg(long)]
    pub allow_unused: bool,
    /// Keep rdml's seeded random initialisation for parameters the file lacks (listed in
    /// import.json) instead of failing.
    #[arg(long)]
    pub allow_missing: bool,
    /// L2-normalise the embedding (the unit sphere of robrank's N and C losses and of cosine
    /// setups); false for a model used with raw Euclidean distances (robrank's E losses).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub l2_normalize: bool,
    /// The input normalisation the model was trained with, applied inside the model to images in
    /// [0, 1]: imagenet, none, or MEAN/STD per channel (e.g. 0.5,0.5,0.5/0.5,0.5,0.5). Default:
    /// imagenet for ResNets (torchvision, timm, robrank), none for C2F2 (robrank).
    #[arg(long, value_name = "SPEC")]
    pub input_norm: Option<String>,
    /// The experiment config (TOML file or preset) whose data, loss and evaluation settings the
    /// run takes; its [model] table is replaced. Default: quickstart for c2f2,
    /// cub-resnet18-triplet for ResNets.
    #[arg(long)]
    pub config: Option<String>,
    /// Override a config key, e.g. --set data.root="/data/cub" (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// The run folder to write (new or empty; an rdml run with --overwrite).
    #[arg(long)]
    pub out: PathBuf,
    /// Replace the rdml run in --out.
    #[arg(long)]
    pub overwrite: bool,
}

pub fn import(args: ImportArgs, flag: Option<&str>, quiet: bool) -> Result<Outcome> {
    anyhow::ensure!(
        flag.is_none(),
        "--device: `import` computes nothing on a device (it reads and writes weights)"
    );
    let req = rdml::import::ImportRequest {
        from: args.from,
        embedder: args.embedder,
        arch: args.arch.parse()?,
        embedding_dim: args.embedding_dim,
        key_map: rdml::import::KeyMap::Texts(args.key_map),
        allow: rdml::model::import::Allow {
            unused: args.allow_unused,
            missing: args.allow_missing,
        },
        l2_normalize: Some(args.l2_normalize),
        input_norm: args.input_norm,
        config: args.config,
        set: rdml::config::SetKeys::Texts(args.set),
        out: args.out.clone(),
        overwrite: args.overwrite,
    };
    let r = rdml::import::import(&req)?;
    if !quiet {
        eprintln!(
            "read {} ({}, layout {}{}): {} tensors filled the model's parameters{}",
            r.files.join(" + "),
            r.format,
            r.layout,
            if r.root.is_empty() {
                String::new()
            } else {
                format!(", weights under '{}'", r.root)
            },
            r.filled.len(),
            if r.outside > 0 {
                format!(
                    " ({} tensors outside the weights, e.g. optimiser state, not read)",
                    r.outside
                )
            } else {
                String::new()
            }
        );
        for (what, keys) in [("unused", &r.unused), ("missing (random init)", &r.missing)] {
            if !keys.is_empty() {
                eprintln!("{what}: {}", keys.join(", "));
            }
        }
    }
    println!("{}", args.out.display());
    Ok(Outcome::Done)
}
