//! Running an attack over the test set: the batch loop (select and build the objective, move the
//! images, score the moved embeddings), robrank's ERS suite of nine attacks, and the aggregation.

pub use super::adversarial::AdversarialSink;
use super::budget::Pgd;
use super::column::Score;
use super::computable;
use super::context::embed_tensor;
use super::method::{Batch, Method, WhiteBox};
use super::result::repeat_seed;
use super::tally::Tally;
use super::unit::Attack;
use crate::data::{ImageSet, loader};
use crate::eval::batch_tensor;
use crate::eval::knn::Embeddings;
use anyhow::{Result, ensure};
use burn::tensor::Tensor;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

pub use super::column::Column;
pub use super::context::Context;
pub use super::result::{AttackResult, ars_rank_term};
pub use super::robustness::{ERS_SUITE, Robustness, Row, aggregate, ers, ers_suite};

/// Who attacks whom, how, and on how many items.
#[derive(Clone, Copy)]
pub struct Setup<'a> {
    /// The attacked model and test set: where the results are scored.
    pub target: &'a Context,
    /// The model the examples are made on: the target itself (white-box, black-box), or a
    /// surrogate (a transfer attack) on the same test set.
    pub attacker: &'a Context,
    pub method: &'a dyn Method,
    pub pgd: Pgd,
    /// The first `queries` items are attacked (queries; candidates for CA, of the gallery when
    /// there is one).
    pub queries: usize,
    pub batch: usize,
    pub seed: u64,
    /// Keep each attacked item's own values ([`AttackResult::per_query`]).
    pub per_query: bool,
    /// Draw a progress bar per attack (and, in the suite, a line per finished attack).
    pub progress: bool,
}

impl<'a> Setup<'a> {
    /// A white-box attack on `ctx`'s model.
    pub fn white_box(ctx: &'a Context, pgd: &Pgd, queries: usize, batch: usize, seed: u64) -> Self {
        Self {
            target: ctx,
            attacker: ctx,
            method: &WhiteBox,
            pgd: *pgd,
            queries,
            batch,
            seed,
            per_query: false,
            progress: false,
        }
    }
}

/// Runs one white-box attack on the first `queries` test items, `batch` at a time.
pub fn run(
    ctx: &Context,
    attack: &dyn Attack,
    pgd: &Pgd,
    queries: usize,
    batch: usize,
    seed: u64,
) -> Result<AttackResult> {
    run_with(&Setup::white_box(ctx, pgd, queries, batch, seed), attack)
}

/// Runs one attack as `setup` says. Scores are averaged over the items attacked.
pub fn run_with(setup: &Setup, attack: &dyn Attack) -> Result<AttackResult> {
    run_saving(setup, attack, None)
}

/// [`run_with`], also handing every batch's clean and adversarial images to `examples` when
/// given (an [`super::adversarial::ExampleWriter`] writes them as PNG). On ranks (the target's
/// [`crate::ranks::Ranks`]), each rank attacks its share of the batches and every rank scores
/// them all ([`super::share`]).
pub fn run_saving(
    setup: &Setup,
    attack: &dyn Attack,
    mut examples: Option<&mut dyn AdversarialSink>,
) -> Result<AttackResult> {
    let t0 = Instant::now();
    let (target, attacker, method, pgd) = (setup.target, setup.attacker, setup.method, &setup.pgd);
    pgd.validate()?;
    let moved = moved_items(target, attacker, attack)?;
    let q = setup.queries.min(moved.len());
    let items: Vec<usize> = (0..q).collect();
    let chunks: Vec<&[usize]> = items.chunks(setup.batch.max(1)).collect();
    // A method fitted on every batch at once (a universal perturbation) runs whole on each rank.
    let ranks = Some(&target.ranks).filter(|r| r.split() && !method.fits_all_batches());
    let own = ranks.map_or(0..chunks.len(), |r| r.share(chunks.len()));
    ensure!(
        ranks.is_none() || examples.is_none(),
        "an attack's adversarial images are made on one process, not split over ranks"
    );
    let mut rng = ChaCha8Rng::seed_from_u64(setup.seed ^ 0xA77AC);
    let load = |chunk: &[usize]| -> Result<Tensor<4>> {
        Ok(batch_tensor(&loader::load_batch(moved, chunk, None)?, &target.device))
    };
    let mut bar = crate::progress::Progress::new(format!("{:<6}", attack.spec()), own.len(), setup.progress);
    let mut tally = match (ranks, setup.per_query) {
        (Some(_), _) => Tally::logged(),
        (None, true) => Tally::per_query(),
        (None, false) => Tally::default(),
    };
    let mut attacked: Vec<f32> = vec![];
    let mut model_queries: Option<u64> = None;
    let mut finish_batch = |bi: usize, chunk: &[usize], batch: &Batch, fitted: Option<&Tensor<4>>| -> Result<()> {
        let p = method.perturb(
            attacker,
            &batch.images,
            batch.plan.as_ref(),
            attack.optimiser(),
            pgd,
            setup.seed.wrapping_add(bi as u64),
            fitted,
        )?;
        if let Some(m) = p.model_queries {
            *model_queries.get_or_insert(0) += m;
        }
        if let Some(w) = examples.as_deref_mut() {
            w.add(chunk, &moved.labels, &batch.images, &p.images)?;
        }
        bar.set(bi + 1 - own.start, "batches");
        crate::progress::between_batches()?;
        let adv = embed_attacked(target, p.images, chunk.len())?;
        tally.batch(chunk);
        batch.plan.score(target, &adv, &mut tally)?;
        if attack.keeps_attacked() {
            attacked.extend(adv.data);
        }
        Ok(())
    };
    if method.fits_all_batches() {
        let batches = chunks
            .iter()
            .map(|c| {
                Ok(Batch {
                    images: load(c)?,
                    plan: attack.plan(attacker, c, &mut rng)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let fitted = method.fit(attacker, &batches, pgd, setup.seed)?;
        for (bi, (chunk, batch)) in chunks.iter().zip(&batches).enumerate() {
            finish_batch(bi, chunk, batch, fitted.as_ref())?;
        }
    } else {
        for (bi, chunk) in chunks.iter().enumerate() {
            // Every batch's plan, this rank's or not: the selections draw from one stream.
            let plan = attack.plan(attacker, chunk, &mut rng)?;
            if own.contains(&bi) {
                let images = load(chunk)?;
                finish_batch(bi, chunk, &Batch { images, plan }, None)?;
            }
        }
    }
    bar.finish();
    let shared = match ranks {
        Some(r) => super::share::joined(r, tally, attacked, model_queries, (t0, setup.per_query))?,
        // Alone, or fitted whole on each rank: the same work, the slowest rank's time.
        None => super::share::Joined::alone(tally, attacked, model_queries, t0).timed_on(&target.ranks)?,
    };
    scored(setup, attack, &items, shared)
}

/// The result of `attack` on `items` from the tally of every batch, the attacked embeddings an
/// attack keeps, and the model's forward passes.
fn scored(setup: &Setup, attack: &dyn Attack, items: &[usize], joined: super::share::Joined) -> Result<AttackResult> {
    let (target, q) = (setup.target, items.len());
    let done = joined.tally.finish();
    if !done.uncovered.is_empty() {
        let what = format!("attack {}", attack.spec());
        return Err(computable::uncomputable(&what, &done.uncovered, q, target.ranked_n()));
    }
    let (mut scores, per_query) = (done.means, done.per_query);
    if attack.keeps_attacked() {
        let adv = Embeddings::new(joined.attacked, q, target.clean.dim)?;
        scores.extend(attack.finish(target, items, &adv, setup.seed)?);
    }
    if let Some(m) = joined.model_queries {
        scores.push(Score {
            name: Column::MODEL_QUERIES,
            value: m as f64 / q.max(1) as f64,
        });
    }
    Ok(AttackResult {
        attack: attack.spec(),
        method: setup.method.spec(),
        scores,
        queries: q,
        seconds: joined.seconds.unwrap_or_else(|| joined.t0.elapsed().as_secs_f64()),
        per_query,
        route: None,
    })
}

/// The images `attack` moves (checked: enough of them, and the same for attacker and target).
fn moved_items<'c>(target: &'c Context, attacker: &Context, attack: &dyn Attack) -> Result<&'c ImageSet> {
    let n = target.n();
    ensure!(
        n >= 2 || target.gallery.is_some(),
        "an attack needs at least two test items; the test split holds {n}"
    );
    ensure!(
        target.ranked_n() >= 2,
        "an attack needs at least two images to rank; the gallery holds {}",
        target.ranked_n()
    );
    ensure!(
        attacker.n() == n
            && attacker.set.labels == target.set.labels
            && attacker.ranked_labels() == target.ranked_labels(),
        "the attacking model was given other images ({} items, {} ranked) than the attacked one ({n}, {})",
        attacker.n(),
        attacker.ranked_n(),
        target.ranked_n()
    );
    // CA± moves candidates: a gallery's images when there is one.
    Ok(if attack.moves_ranked() {
        target.ranked_set()
    } else {
        &target.set
    })
}

/// The embeddings of `n` attacked images by the attacked model.
fn embed_attacked(target: &Context, images: Tensor<4>, n: usize) -> Result<Embeddings> {
    Embeddings::new(embed_tensor(target.model.as_ref(), images)?, n, target.clean.dim)
}

/// Runs the nine attacks of robrank's ERS suite as `setup` says, each with its own seed.
pub fn robustness(setup: &Setup) -> Result<Robustness> {
    computable::check_suite(setup.target, setup.queries, "the ERS suite")?;
    let mut results = vec![];
    for (i, attack) in ers_suite()?.iter().enumerate() {
        let s = Setup {
            seed: setup.seed.wrapping_add(i as u64 * 1000),
            ..*setup
        };
        let r = run_with(&s, attack.as_ref())?;
        if setup.progress {
            crate::progress::line(&format!(
                "{:<4} {}  ({:.1} s)",
                r.attack,
                r.scores
                    .iter()
                    .filter(|s| s.name != Column::ARS && s.name != Column::RECALL_CLEAN)
                    .map(|s| format!("{} {:.3}", s.name, s.value))
                    .collect::<Vec<_>>()
                    .join("  "),
                r.seconds
            ));
        }
        results.push(r);
    }
    aggregate(results)
}

/// `attack` run `repeats` times (at least once) with seeds [`repeat_seed`]`(setup.seed, k)` (selections and
/// random starts differ), the first run's images given to `sink`.
pub fn run_repeated(
    setup: &Setup,
    attack: &dyn Attack,
    repeats: usize,
    sink: Option<&mut dyn AdversarialSink>,
) -> Result<Vec<AttackResult>> {
    let mut runs = vec![run_saving(setup, attack, sink)?];
    for k in 1..repeats {
        let s = Setup {
            seed: repeat_seed(setup.seed, k),
            ..*setup
        };
        runs.push(run_with(&s, attack)?);
    }
    Ok(runs)
}

/// The ERS suite run `repeats` times (at least once) with seeds [`repeat_seed`]`(setup.seed, k)`.
pub fn robustness_repeated(setup: &Setup, repeats: usize) -> Result<Vec<Robustness>> {
    let repeats = repeats.max(1);
    (0..repeats)
        .map(|k| {
            if repeats > 1 && setup.progress {
                crate::progress::line(&format!("run {} of {repeats}", k + 1));
            }
            robustness(&Setup {
                seed: repeat_seed(setup.seed, k),
                ..*setup
            })
        })
        .collect()
}
