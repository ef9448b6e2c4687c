//! MDProp's feature-space examples (seed 004): a query moved toward the embeddings of `targets`
//! random test items of other classes (single-targeted STAX, multi-targeted MTAX), or of its own
//! class (the unadversarial example UX). Reported as Recall@1/2/4/8 after the move, and NMI and
//! π_ratio of all moved embeddings.

use crate::attack::column::{Column, Score};
use crate::attack::context::Context;
use crate::attack::objective::Objective;
use crate::attack::objective::targets::TowardTargets;
use crate::attack::tally::Tally;
use crate::attack::unit::{Attack, Plan};
use crate::eval::cluster;
use crate::eval::knn::Embeddings;
use anyhow::Result;
use burn::tensor::{Tensor, TensorData};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureSpace {
    pub targets: usize,
    /// Targets of the item's own class (UX) rather than of other classes (STAX, MTAX).
    pub own_class: bool,
    /// Spelled STAX (one target of another class).
    pub single: bool,
}

impl Attack for FeatureSpace {
    fn spec(&self) -> String {
        match (self.own_class, self.single) {
            (false, true) => "STAX".into(),
            (false, false) => format!("MTAX:{}", self.targets),
            (true, _) => format!("UX:{}", self.targets),
        }
    }

    fn plan(&self, ctx: &Context, items: &[usize], rng: &mut ChaCha8Rng) -> Result<Box<dyn Plan>> {
        let (n, ranked, labels) = (ctx.ranked_n(), ctx.ranked_labels(), &ctx.set.labels);
        let mut targets = vec![];
        for _ in 0..self.targets {
            // A ranked image of the wanted class, or (none found) the item's own clean embedding.
            let rows: Vec<f32> = items
                .iter()
                .flat_map(|&qi| {
                    let found = (0..1000)
                        .map(|_| rng.random_range(0..n))
                        .find(|&j| Some(j) != ctx.own(qi) && (ranked[j] == labels[qi]) == self.own_class);
                    match found {
                        Some(j) => ctx.ranked_clean().row(j).to_vec(),
                        None => ctx.clean.row(qi).to_vec(),
                    }
                })
                .collect();
            targets.push(Tensor::<2>::from_data(
                TensorData::new(rows, [items.len(), ctx.clean.dim]),
                &ctx.device,
            ));
        }
        Ok(Box::new(FeaturePlan {
            items: items.to_vec(),
            objective: TowardTargets { targets },
        }))
    }

    fn keeps_attacked(&self) -> bool {
        true
    }

    /// NMI of k-means over the moved embeddings (k = the classes among the queries) and
    /// π_ratio, which needs two classes, one with two items, among the queries.
    fn finish(&self, target: &Context, items: &[usize], attacked: &Embeddings, seed: u64) -> Result<Vec<Score>> {
        let ql: Vec<u32> = items.iter().map(|&i| target.set.labels[i]).collect();
        let k = {
            let mut l = ql.clone();
            l.sort_unstable();
            l.dedup();
            l.len()
        };
        let a = cluster::kmeans(attacked, k, cluster::FAISS_NITER, seed, &target.device)?;
        let mut scores = vec![Score {
            name: Column::NMI,
            value: cluster::nmi(&a, &ql),
        }];
        if let Ok(p) = cluster::pi_ratio(attacked, &ql, &target.device) {
            scores.push(Score {
                name: Column::PI_RATIO,
                value: p,
            });
        }
        Ok(scores)
    }
}

struct FeaturePlan {
    items: Vec<usize>,
    objective: TowardTargets,
}

impl Plan for FeaturePlan {
    fn objective(&self) -> &dyn Objective {
        &self.objective
    }

    fn score(&self, target: &Context, adv: &Embeddings, tally: &mut Tally) -> Result<()> {
        let (m, rows) = target.retrieval(&self.items, adv, &[1, 2, 4, 8])?;
        for (t, &(k, _)) in m.recall.iter().enumerate() {
            super::add_recall(tally, Column::recall(k), &m, &rows, t);
        }
        super::clean_recall(target, &self.items, tally)?;
        Ok(())
    }
}

/// `STAX`, `MTAX[:T]` or `UX[:T]` (also `targets=T`), T ≥ 1, default 5.
pub fn from_spec(p: &mut crate::attack::spec::Params) -> Result<Box<dyn Attack>> {
    let single = p.name() == "STAX";
    let targets = if single {
        1
    } else {
        p.number("targets", "the number of targets, an integer ≥ 1", |t: &usize| {
            *t >= 1
        })?
        .unwrap_or(5)
    };
    Ok(Box::new(FeatureSpace {
        targets,
        own_class: p.name() == "UX",
        single,
    }))
}
