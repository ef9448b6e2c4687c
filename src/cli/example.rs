//! The worked example of a command (issue 39): this file and one line of `commands!` in
//! `cli/mod.rs` (under `#[cfg(test)]`) make `rdml example-count --config NAME`, with its help,
//! the global `--device` and `--quiet`, and its errors worded for the command line. It fills the
//! library's request (a config and its overrides) and prints what the library says.

use super::Outcome;
use anyhow::Result;
use rdml::config::Experiment;

#[derive(clap::Args)]
pub struct CountArgs {
    /// A TOML experiment config, or a preset name.
    #[arg(long)]
    pub config: String,
    /// Override any config key (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

/// Items of the training and test splits, and classes of the training split.
pub fn counts(args: &CountArgs) -> Result<(usize, usize, usize)> {
    let exp = Experiment::load(&args.config, &args.set)?;
    let s = exp.data.load(exp.seed)?;
    let mut classes = s.train.labels.clone();
    classes.sort_unstable();
    classes.dedup();
    Ok((s.train.len(), s.test.query.len(), classes.len()))
}

pub fn count(args: CountArgs, flag: Option<&str>, _quiet: bool) -> Result<Outcome> {
    super::no_device(flag, "example-count")?;
    let (train, test, classes) = counts(&args)?;
    println!(
        "{}: train {train} items of {classes} classes, test {test} items",
        args.config
    );
    Ok(Outcome::Done)
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Cmd, Outcome, run};
    use clap::{CommandFactory, Parser};

    #[test]
    fn a_command_is_its_file_and_one_line() {
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("example-count"), "{help}");
        let cli = Cli::try_parse_from(["rdml", "example-count", "--config", "quickstart"]).unwrap();
        let Cmd::ExampleCount(args) = &cli.cmd else {
            panic!("parsed as another command")
        };
        // The embedded Fashion-MNIST subset of the quickstart.
        assert_eq!(super::counts(args).unwrap(), (8000, 2000, 10));
        assert!(matches!(run(cli), Ok(Outcome::Done)));
        let cli = Cli::try_parse_from(["rdml", "--device", "cpu", "example-count", "--config", "quickstart"]).unwrap();
        let e = run(cli).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("not to `example-count`"), "{e}");
        let cli = Cli::try_parse_from([
            "rdml",
            "example-count",
            "--config",
            "quickstart",
            "--set",
            "data.resize=x",
        ])
        .unwrap();
        assert!(run(cli).is_err());
    }
}
