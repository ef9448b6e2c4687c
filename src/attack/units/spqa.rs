//! Semantics-preserving query attack (SPQA, Zhou et al. ECCV'20 §3.3, robrank's `SPQA`): QA+ or
//! QA− on a query, plus a term that keeps the query's own top items near the top of its ranking,
//! so that the attacked query still shows what it showed: `L_QA(q̃, c) + ξ · L_QA+(q̃, G)` with
//! G = 5 of the query's nearest items (its top 5 for SPQA+; for SPQA−, the 5 nearest of its top
//! 1 % other than the candidate) and ξ = exp(10⁴ · L_QA+(q̃, G)) read at each step without
//! gradient (robrank's "moderate" ξ). The exponent is capped at 50 so that ξ stays finite in
//! f32 (robrank computes it in float64); past that cap the sign step is the SP term's alone
//! anyway. Reported: the candidate's percentile rank (SPQA+/SPQA−) and the mean percentile rank
//! of G after the attack (SP:GT, low = semantics kept).

use super::ranking::percentile_rank;
use crate::attack::column::Column;
use crate::attack::context::{Context, from_top, random_other};
use crate::attack::objective::Objective;
use crate::attack::objective::{dist_rows, dist_to_all};
use crate::attack::result::ars_rank_term;
use crate::attack::spec::Params;
use crate::attack::tally::Tally;
use crate::attack::unit::{Attack, Plan};
use crate::eval::knn::Embeddings;
use anyhow::{Result, ensure};
use burn::tensor::Tensor;
use burn::tensor::activation::relu;
use rand_chacha::ChaCha8Rng;

/// SPQA's candidate rank, and the mean rank of its semantics-preserving items (SP:GT).
pub const SPQA_PLUS: Column = Column::named("SPQA+");
pub const SPQA_MINUS: Column = Column::named("SPQA-");
pub const SEMANTIC_RANK: Column = Column::named("SP:GT");

/// robrank's `M_GT`: the items whose ranks are kept.
pub const KEPT: usize = 5;
const XI_SCALE: f32 = 1e4;
const XI_MAX_EXPONENT: f32 = 50.0;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spqa {
    pub raise: bool,
    /// The semantic term on (SPQA) or off (plain QA, with SP:GT still reported): `sp=0`.
    pub semantic: bool,
}

impl Spqa {
    /// `SPQA+`, `SPQA-`, or robrank's `SPQA:pm=±[:M=1]`; `:sp=0` drops the semantic term.
    pub fn from_spec(p: &mut Params) -> Result<Box<dyn Attack>> {
        let raise = p.raise()?;
        p.only_one("M")?;
        let semantic = match p.take("sp").as_deref() {
            None | Some("1") => true,
            Some("0") => false,
            Some(o) => anyhow::bail!("'{}': sp = {o}: expected 1 (the semantic term, default) or 0", p.spec()),
        };
        Ok(Box::new(Spqa { raise, semantic }))
    }

    fn column(self) -> Column {
        if self.raise { SPQA_PLUS } else { SPQA_MINUS }
    }
}

impl Attack for Spqa {
    fn spec(&self) -> String {
        if self.semantic {
            self.column().name().into()
        } else {
            format!("{}:sp=0", self.column().name())
        }
    }

    fn plan(&self, ctx: &Context, items: &[usize], rng: &mut ChaCha8Rng) -> Result<Box<dyn Plan>> {
        let (n, topmost) = (ctx.ranked_n(), ctx.topmost());
        ensure!(
            n > KEPT + 1,
            "SPQA keeps {KEPT} items' ranks: it needs more than {} images to rank",
            KEPT + 1
        );
        let mut candidates = vec![];
        let mut kept = vec![];
        for &qi in items {
            let nb = ctx.neighbours(qi, topmost.max(KEPT + 1));
            let c = if self.raise {
                random_other(rng, n, ctx.own(qi))
            } else {
                from_top(rng, &nb, topmost, qi)
            };
            candidates.push(c);
            kept.push(
                nb.iter()
                    .map(|x| x.1 as usize)
                    .filter(|&j| j != c)
                    .take(KEPT)
                    .collect::<Vec<_>>(),
            );
        }
        let kept_rows = (0..KEPT)
            .map(|g| ctx.ranked_rows(&kept.iter().map(|k| k[g]).collect::<Vec<_>>()))
            .collect();
        let weight = if self.semantic { 1.0 } else { 0.0 };
        Ok(Box::new(SpqaPlan {
            attack: *self,
            items: items.to_vec(),
            objective: SemanticQuery {
                candidate: ctx.ranked_rows(&candidates),
                kept: kept_rows,
                all: ctx.cand.clone(),
                all_sq: ctx.cand_sq.clone(),
                raise: self.raise,
                weight,
            },
            candidates,
            kept,
        }))
    }
}

/// SPQA's objective over the perturbed queries' embeddings.
pub struct SemanticQuery {
    pub candidate: Tensor<2>,
    /// `KEPT` tensors `[b, d]`: the g-th kept item of every query.
    pub kept: Vec<Tensor<2>>,
    pub all: Tensor<2>,
    pub all_sq: Tensor<2>,
    pub raise: bool,
    /// 1 for SPQA, 0 for plain QA.
    pub weight: f32,
}

impl SemanticQuery {
    /// Per row: the QA term and the SP term (QA+ averaged over the kept items), `[b, 1]` each.
    fn terms(&self, emb: Tensor<2>) -> (Tensor<2>, Tensor<2>) {
        let dqx = dist_to_all(emb.clone(), &self.all, &self.all_sq);
        let dqc = dist_rows(emb.clone(), self.candidate.clone());
        let qa = if self.raise {
            relu(dqc - dqx.clone())
        } else {
            relu(dqx.clone() - dqc)
        }
        .mean_dim(1);
        let mut sp: Option<Tensor<2>> = None;
        for g in &self.kept {
            let t = relu(dist_rows(emb.clone(), g.clone()) - dqx.clone()).mean_dim(1);
            sp = Some(match sp {
                Some(s) => s + t,
                None => t,
            });
        }
        let sp = sp.map_or_else(|| qa.zeros_like(), |s| s.div_scalar(self.kept.len() as f32));
        (qa, sp)
    }
}

fn xi(sp: Tensor<2>) -> Tensor<2> {
    sp.detach().mul_scalar(XI_SCALE).clamp_max(XI_MAX_EXPONENT).exp()
}

impl Objective for SemanticQuery {
    fn loss(&self, emb: Tensor<2>, _step: usize) -> Tensor<1> {
        let (qa, sp) = self.terms(emb);
        let sp_mean = sp.mean();
        let xi = sp_mean
            .clone()
            .detach()
            .mul_scalar(XI_SCALE)
            .clamp_max(XI_MAX_EXPONENT)
            .exp();
        qa.mean() + xi.mul_scalar(self.weight) * sp_mean
    }

    /// With each row's own ξ (robrank's ξ is the batch's).
    fn row_losses(&self, emb: Tensor<2>) -> Option<Tensor<1>> {
        let [b, _] = emb.dims();
        let (qa, sp) = self.terms(emb);
        Some((qa + xi(sp.clone()).mul_scalar(self.weight) * sp).reshape([b]))
    }
}

struct SpqaPlan {
    attack: Spqa,
    items: Vec<usize>,
    candidates: Vec<usize>,
    kept: Vec<Vec<usize>>,
    objective: SemanticQuery,
}

impl Plan for SpqaPlan {
    fn objective(&self) -> &dyn Objective {
        &self.objective
    }

    fn score(&self, target: &Context, adv: &Embeddings, tally: &mut Tally) -> Result<()> {
        for (r, &qi) in self.items.iter().enumerate() {
            let d = target.host_dists(adv.row(r));
            let (ci, kept) = (self.candidates[r], &self.kept[r]);
            let rank = percentile_rank(&d, ci);
            let init = percentile_rank(&target.host_dists(target.clean.row(qi)), ci);
            tally.add(self.attack.column(), r, rank);
            tally.add(Column::ARS, r, ars_rank_term(self.attack.raise, init, rank));
            let kept_rank = kept.iter().map(|&g| percentile_rank(&d, g)).sum::<f64>() / kept.len().max(1) as f64;
            tally.add(SEMANTIC_RANK, r, kept_rank);
        }
        Ok(())
    }
}
