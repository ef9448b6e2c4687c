//! The ranking attacks of Zhou et al. (ECCV'20) with robrank's W = 1 / M = 1 selections: CA+ and
//! CA− perturb a candidate to raise or lower it in the list of a query (drawn at random, or from
//! the candidate's own top 1 %); QA+ and QA− perturb a query to raise or lower a candidate
//! (drawn the same way). Each reports the candidate's percentile rank after the attack, and its
//! ARS term from the rank before it.

use crate::attack::column::Column;
use crate::attack::context::{Context, euclid, from_top, random_other};
use crate::attack::objective::Objective;
use crate::attack::objective::dist_to_all;
use crate::attack::objective::rank::{CandidateAttack, Direction, QueryAttack};
use crate::attack::result::{AttackResult, ars_rank_term};
use crate::attack::tally::Tally;
use crate::attack::unit::{Attack, Plan};
use crate::eval::knn::Embeddings;
use crate::host::read;
use anyhow::Result;
use rand_chacha::ChaCha8Rng;

/// The candidate's percentile rank after CA+, CA−, QA+, QA−.
pub const CA_PLUS: Column = Column::named("CA+");
pub const CA_MINUS: Column = Column::named("CA-");
pub const QA_PLUS: Column = Column::named("QA+");
pub const QA_MINUS: Column = Column::named("QA-");

/// CA± (`candidate`) or QA± (not), raising (+) or lowering (−) the candidate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ranking {
    pub candidate: bool,
    pub raise: bool,
}

impl Ranking {
    fn column(self) -> Column {
        match (self.candidate, self.raise) {
            (true, true) => CA_PLUS,
            (true, false) => CA_MINUS,
            (false, true) => QA_PLUS,
            (false, false) => QA_MINUS,
        }
    }

    fn direction(self) -> Direction {
        if self.raise { Direction::Raise } else { Direction::Lower }
    }

    /// Each item's partner: a random other item for "+", one of its top 1 % for "−". A CA
    /// candidate of a gallery is partnered with a query: a random one, or one of the 1 % of
    /// queries nearest to it.
    pub(crate) fn partners(self, ctx: &Context, items: &[usize], rng: &mut ChaCha8Rng) -> Vec<usize> {
        if self.candidate && ctx.gallery.is_some() {
            let topmost = ((0.01 * ctx.n() as f64) as usize).max(1);
            return items
                .iter()
                .map(|&c| {
                    if self.raise {
                        random_other(rng, ctx.n(), None)
                    } else {
                        from_top(rng, &ctx.queries_near(c, topmost.max(8)), topmost, 0)
                    }
                })
                .collect();
        }
        let (n, topmost) = (ctx.ranked_n(), ctx.topmost());
        items
            .iter()
            .map(|&i| {
                if self.raise {
                    random_other(rng, n, ctx.own(i))
                } else {
                    from_top(rng, &ctx.neighbours(i, topmost.max(8)), topmost, i)
                }
            })
            .collect()
    }
}

impl Attack for Ranking {
    fn spec(&self) -> String {
        self.column().name().into()
    }

    fn moves_ranked(&self) -> bool {
        self.candidate
    }

    fn plan(&self, ctx: &Context, items: &[usize], rng: &mut ChaCha8Rng) -> Result<Box<dyn Plan>> {
        let partners = self.partners(ctx, items, rng);
        Ok(if self.candidate {
            let query = ctx.rows(&partners);
            let dxq = dist_to_all(query.clone(), &ctx.cand, &ctx.cand_sq);
            Box::new(CandidatePlan {
                attack: *self,
                items: items.to_vec(),
                queries: partners,
                objective: CandidateAttack {
                    query,
                    dxq,
                    direction: self.direction(),
                },
            })
        } else {
            Box::new(QueryPlan {
                attack: *self,
                items: items.to_vec(),
                candidates: partners.clone(),
                objective: QueryAttack {
                    candidate: ctx.ranked_rows(&partners),
                    all: ctx.cand.clone(),
                    all_sq: ctx.cand_sq.clone(),
                    direction: self.direction(),
                },
            })
        })
    }

    fn ers_columns(&self) -> Vec<Column> {
        vec![self.column()]
    }

    /// robrank's `pjswipe.py`: the "+" ranks doubled, the "−" ranks inverted.
    fn ers_term(&self, column: Column, raw: f64) -> Option<f64> {
        (column == self.column()).then_some(if self.raise { 2.0 * raw } else { 100.0 - raw })
    }

    fn ars_term(&self, column: Column, result: &AttackResult) -> Option<f64> {
        (column == self.column()).then(|| result.get(Column::ARS)).flatten()
    }
}

struct CandidatePlan {
    attack: Ranking,
    items: Vec<usize>,
    queries: Vec<usize>,
    objective: CandidateAttack,
}

impl Plan for CandidatePlan {
    fn objective(&self) -> &dyn Objective {
        &self.objective
    }

    fn score(&self, target: &Context, adv: &Embeddings, tally: &mut Tally) -> Result<()> {
        let (n, ranked) = (target.ranked_n(), target.ranked_clean());
        let dxq = read(&dist_to_all(target.rows(&self.queries), &target.cand, &target.cand_sq))?;
        for (r, (&qi, &c)) in self.queries.iter().zip(&self.items).enumerate() {
            // The candidate's percentile rank in the query's list.
            let prank = |e: &[f32]| {
                let dcq: f32 = euclid(target.clean.row(qi), e);
                100.0 * dxq[r * n..(r + 1) * n].iter().filter(|&&d| d < dcq).count() as f64 / n as f64
            };
            let (adv, init) = (prank(adv.row(r)), prank(ranked.row(c)));
            tally.add(self.attack.column(), r, adv);
            tally.add(Column::ARS, r, ars_rank_term(self.attack.raise, init, adv));
        }
        Ok(())
    }
}

struct QueryPlan {
    attack: Ranking,
    items: Vec<usize>,
    candidates: Vec<usize>,
    objective: QueryAttack,
}

impl Plan for QueryPlan {
    fn objective(&self) -> &dyn Objective {
        &self.objective
    }

    fn score(&self, target: &Context, adv: &Embeddings, tally: &mut Tally) -> Result<()> {
        for (r, (&qi, &ci)) in self.items.iter().zip(&self.candidates).enumerate() {
            let d = target.host_dists(adv.row(r));
            let (rank, init) = (
                percentile_rank(&d, ci),
                percentile_rank(&target.host_dists(target.clean.row(qi)), ci),
            );
            tally.add(self.attack.column(), r, rank);
            tally.add(Column::ARS, r, ars_rank_term(self.attack.raise, init, rank));
        }
        Ok(())
    }
}

/// Rank of item `c` among all N distances `d` (the query's own clean copy included), in percent;
/// ties go to the lower index.
pub(crate) fn percentile_rank(d: &[f32], c: usize) -> f64 {
    100.0
        * d.iter()
            .enumerate()
            .filter(|&(j, &v)| v < d[c] || (v == d[c] && j < c))
            .count() as f64
        / d.len() as f64
}

/// `CA+`, `CA-`, or robrank's `CA:pm=±[:W=1]`.
pub fn candidate_from_spec(p: &mut crate::attack::spec::Params) -> Result<Box<dyn Attack>> {
    let raise = p.raise()?;
    p.only_one("W")?;
    Ok(Box::new(Ranking { candidate: true, raise }))
}

/// `QA+`, `QA-`, or robrank's `QA:pm=±[:M=1]`.
pub fn query_from_spec(p: &mut crate::attack::spec::Params) -> Result<Box<dyn Attack>> {
    let raise = p.raise()?;
    p.only_one("M")?;
    Ok(Box::new(Ranking {
        candidate: false,
        raise,
    }))
}
