//! The attack budget options shared by `attack`, `robustness`, `compare` and `embed --attack`.

use rdml::attack::budget::Norm;
use rdml::attack::profile::ProfileName;

/// The library's texts with their options as the command line names them.
fn words(text: &str) -> String {
    rdml::field::render(text, rdml::field::Words::CommandLine)
}

pub fn attack_help() -> String {
    format!(
        "The attack: a name, with a value or KEY=VALUE pairs after ':' (robrank's spec strings such as \
         CA:pm=+:W=1:eps=0.03137:alpha=0.011764:pgditer=32 are read, their budget keys included).\n{}",
        words(&rdml::attack::registry::help(rdml::attack::registry::ATTACKS))
    )
}

pub fn profile_help() -> String {
    format!(
        "The attack budget; --eps, --step, --steps, --norm and --random-start change it.\n{}",
        words(&rdml::attack::profile::help())
    )
}

pub fn method_help() -> String {
    format!(
        "How the adversarial images are made.\n{}",
        words(&rdml::attack::registry::help(rdml::attack::registry::METHODS))
    )
}

/// Attack budget options shared by `attack`, `robustness` and `compare`.
#[derive(clap::Args)]
pub struct Budget {
    /// L∞ (or L2) radius in pixel units [0, 1] (default: the profile's).
    #[arg(long, allow_negative_numbers = true)]
    pub eps: Option<f32>,
    /// PGD step (default: the profile's).
    #[arg(long, allow_negative_numbers = true)]
    pub step: Option<f32>,
    /// PGD iterations (default: the profile's).
    #[arg(long)]
    pub steps: Option<usize>,
    /// The norm of the budget: linf or l2 (default: the profile's, linf).
    #[arg(long)]
    pub norm: Option<Norm>,
    /// Start each attack from a uniformly random point of the ball.
    #[arg(long)]
    pub random_start: bool,
    /// How the adversarial images are made: white-box, nes or universal (--help says more).
    #[arg(long, default_value = rdml::scoring::defaults::METHOD, long_help = method_help())]
    pub method: String,
    /// Number of test items used as queries (candidates for CA), from the start of the test split.
    #[arg(long, default_value_t = rdml::scoring::defaults::QUERIES)]
    pub queries: usize,
    /// Items attacked at once (and embedded at once for the clean ranking: lower it when the
    /// device runs out of memory).
    #[arg(long, default_value_t = rdml::scoring::defaults::BATCH)]
    pub batch: usize,
    /// Seed of the attacks' selections and random starts.
    #[arg(long, default_value_t = rdml::scoring::defaults::SEED)]
    pub seed: u64,
    /// Follow robrank's code where it differs from its definitions: the profiles' budgets as its
    /// code writes them (rob28: ε 0.30196, step 0.011764), GTM's target index (a position in the
    /// other-class subset, the query's slot kept), LTM's self mask, ES's first step (one constant
    /// offset of every coordinate) and ES:D measured before the last step (README "rdml attack").
    #[arg(long)]
    pub robrank_compat: bool,
}

impl Budget {
    /// The library's scoring options, as these flags and `profile` fill them.
    pub fn options(&self, profile: ProfileName) -> rdml::scoring::options::ScoringOptions {
        rdml::scoring::options::ScoringOptions {
            profile,
            eps: self.eps,
            step: self.step,
            steps: self.steps,
            norm: self.norm,
            random_start: self.random_start,
            method: self.method.clone(),
            queries: self.queries,
            batch: self.batch,
            seed: self.seed,
            robrank_compat: self.robrank_compat,
            // `attack` and `robustness` set it from their own flag.
            per_query: false,
        }
    }
}
