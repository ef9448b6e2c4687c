//! `rdml certify`.

use super::{Outcome, open_device};
use anyhow::Result;
use rdml::certify::options::{CertifyOptions, MethodName, defaults};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct CertifyArgs {
    /// A run folder written by `rdml train` or `rdml import`.
    #[arg(long)]
    pub model: PathBuf,
    /// The test data, when not where the run's config says (as for `eval`).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// The smoothed retrieval certified: cohen (the noisy query's top-1 label; Cohen, Rosenfeld
    /// and Kolter 2019) or center (the nearest item to the query's centre-smoothed embedding;
    /// Kumar and Goldstein 2021).
    #[arg(long, default_value = defaults::METHOD)]
    pub method: MethodName,
    /// σ of the Gaussian noise added to each query, in pixels of [0, 1] images (the literature
    /// uses 0.12, 0.25 and 0.5).
    #[arg(long, default_value_t = defaults::SIGMA)]
    pub sigma: f32,
    /// The ℓ2 radii (pixels of [0, 1] images) at which certified Recall@1 is reported.
    #[arg(long, value_delimiter = ',', default_values_t = defaults::RADII)]
    pub radii: Vec<f64>,
    /// Noisy copies per query that bound the probability of its label (Cohen's n).
    #[arg(long, default_value_t = defaults::SAMPLES)]
    pub samples: usize,
    /// Noisy copies per query that pick its label, separate from --samples (Cohen's n₀; default
    /// 100); for center, that pick its centre, and as many again that check it (default 10,000).
    #[arg(long)]
    pub select: Option<usize>,
    /// Centre smoothing's Δ: the centre's ball must hold at least 1/2 − Δ of the copies
    /// (default 0.05; --method center only).
    #[arg(long)]
    pub delta: Option<f64>,
    /// The chance that a query's certificate is wrong, at most.
    #[arg(long, default_value_t = defaults::ALPHA)]
    pub alpha: f64,
    /// Number of test items certified, from the start of the test split.
    #[arg(long, default_value_t = defaults::QUERIES)]
    pub queries: usize,
    /// Noisy copies embedded at once.
    #[arg(long, default_value_t = defaults::BATCH)]
    pub batch: usize,
    /// Seed of the noise.
    #[arg(long, default_value_t = defaults::SEED)]
    pub seed: u64,
    /// Keep each query's certificate (label, selected label, count, bound, radius) in the record.
    #[arg(long)]
    pub per_query: bool,
    /// Also write the record as JSON here (it is always written to the run folder's
    /// certify.json).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace --out when it exists (never a file of a run folder).
    #[arg(long)]
    pub overwrite: bool,
    /// Print the record as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

pub fn certify(args: CertifyArgs, flag: Option<&str>, quiet: bool) -> Result<Outcome> {
    let json = args.json;
    let job = rdml::job::CertifyJob {
        model: args.model,
        data: args.data,
        options: CertifyOptions {
            method: args.method,
            sigma: args.sigma,
            select: args.select,
            delta: args.delta,
            samples: args.samples,
            alpha: args.alpha,
            radii: args.radii,
            queries: args.queries,
            batch: args.batch,
            seed: args.seed,
            per_query: args.per_query,
        },
        out: args.out,
        overwrite: args.overwrite,
        progress: !quiet && !json,
        ranks: Default::default(),
    };
    let done = job.run(|| open_device(flag, &[], quiet || json))?;
    let r = &done.record;
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
        return Ok(Outcome::Done);
    }
    println!(
        "certified Recall@1 of {} by {} smoothing ({} queries, {} lone left out; σ {}, {} {}, n {}, α {}; {:.1} s):",
        job.model.display(),
        if r.method == "center" { "centre" } else { "Cohen's" },
        r.queries_used - r.lone,
        r.lone,
        r.sigma,
        if r.method == "center" {
            "copies to pick and to check the centre"
        } else {
            "n₀"
        },
        r.select,
        r.samples,
        r.alpha,
        r.seconds
    );
    println!("  {:<14} {:>8}", "radius (ℓ2)", "R@1 %");
    for (radius, v) in &r.certified {
        println!("  {radius:<14} {:>8.1}", v.as_f64().unwrap_or(f64::NAN));
    }
    println!("  smoothed R@1 {:.1} %, abstained {:.1} %", r.clean, r.abstained);
    if !done.stored && !quiet {
        eprintln!("the record was not kept in the run folder (see the warning above)");
    }
    Ok(Outcome::Done)
}
