//! An attack's batches split over ranks ([`crate::ranks`]): what each rank tells the others of
//! its share (its tally's additions, the attacked embeddings an attack keeps, the model's
//! forward passes), joined on every rank in batch order, so every rank scores what one process
//! would have, to the last bit.

use super::tally::{Logged, Tally};
use crate::ranks::Ranks;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// One rank's share of an attack's batches, as it tells it.
#[derive(Serialize, Deserialize)]
struct Share {
    log: Vec<Logged>,
    /// The attacked embeddings' bits (an attack that keeps them: NMI, π_ratio).
    attacked: Vec<u32>,
    model_queries: Option<u64>,
    /// Seconds from the attack's start to the end of this rank's share.
    seconds: f64,
}

/// Every batch's tally, the attacked embeddings in item order and the forward passes: one
/// process's, or every rank's joined.
pub struct Joined {
    pub tally: Tally,
    pub attacked: Vec<f32>,
    pub model_queries: Option<u64>,
    pub t0: Instant,
    /// The slowest rank's seconds (the same on every rank); `None` alone: until the result.
    pub seconds: Option<f64>,
}

impl Joined {
    pub fn alone(tally: Tally, attacked: Vec<f32>, model_queries: Option<u64>, t0: Instant) -> Self {
        Self {
            tally,
            attacked,
            model_queries,
            t0,
            seconds: None,
        }
    }

    /// On ranks that each did the whole work (a fitted method), the slowest rank's seconds, the
    /// same on every rank; alone, unchanged.
    pub fn timed_on(mut self, ranks: &Ranks) -> Result<Self> {
        if ranks.split() {
            let all = ranks.gather(&self.t0.elapsed().as_secs_f64())?;
            self.seconds = Some(all.into_iter().fold(0.0, f64::max));
        }
        Ok(self)
    }
}

/// This rank's share (`tally` logged) told to every rank, and every rank's joined in rank order
/// (the batches' order: the shares are consecutive runs of them).
pub fn joined(
    ranks: &Ranks,
    mut tally: Tally,
    attacked: Vec<f32>,
    model_queries: Option<u64>,
    (t0, per_query): (Instant, bool),
) -> Result<Joined> {
    let share = Share {
        log: tally.take_log(),
        attacked: attacked.iter().map(|v| v.to_bits()).collect(),
        model_queries,
        seconds: t0.elapsed().as_secs_f64(),
    };
    let mut all = Joined {
        tally: if per_query {
            Tally::per_query()
        } else {
            Tally::default()
        },
        attacked: vec![],
        model_queries: None,
        t0,
        seconds: Some(0.0),
    };
    for s in ranks.gather(&share)? {
        all.tally.replay(s.log);
        all.attacked.extend(s.attacked.into_iter().map(f32::from_bits));
        if let Some(m) = s.model_queries {
            *all.model_queries.get_or_insert(0) += m;
        }
        all.seconds = all.seconds.map(|t| t.max(s.seconds));
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use crate::attack::budget::{Norm, Pgd};
    use crate::attack::result::AttackResult;
    use crate::attack::suite::{Setup, run_with};
    use crate::attack::units::pixels::context_on;
    use crate::ranks::{Ranks, tests::on_ranks};

    fn points(n: usize, width: usize) -> Vec<f32> {
        let mut state = 11u32;
        (0..n * width)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 8) as f32 / (1u32 << 24) as f32
            })
            .collect()
    }

    /// `spec` by `method` on 19 items in batches of 4, on `ranks`.
    fn attacked(spec: &str, method: &str, ranks: &Ranks) -> AttackResult {
        let (n, width) = (19, 4);
        let mut labels: Vec<u32> = (0..n as u32).map(|i| i % 3).collect();
        labels[n - 1] = 9;
        let ctx = context_on(&points(n, width), width, &labels, false, ranks);
        let pgd = Pgd {
            eps: 0.1,
            step: 0.02,
            steps: 3,
            norm: Norm::Linf,
            random_start: true,
            start_radius: 1.0,
            project: true,
        };
        let method = crate::attack::registry::method(method).unwrap();
        let attack = crate::attack::registry::attack(spec).unwrap();
        let mut setup = Setup::white_box(&ctx, &pgd, n, 4, 5);
        setup.method = method.as_ref();
        setup.per_query = true;
        run_with(&setup, attack.as_ref()).unwrap()
    }

    /// Every attack family split over two and three ranks scores, on every rank, what one process
    /// scores: each mean and each item's value to the last bit (a universal perturbation, fitted
    /// on every batch, runs whole on each rank).
    #[test]
    fn an_attack_split_over_ranks_scores_what_one_process_scores() {
        let cases = [
            "CA+", "CA-", "QA+", "QA-", "SPQA+", "TMA", "ES", "LTM", "GTM", "GTT", "NN", "MTAX",
        ]
        .iter()
        .map(|s| (*s, "white-box"))
        .chain([("CA+", "nes:pop=4"), ("ES", "universal")]);
        for (spec, method) in cases {
            let one = attacked(spec, method, &Ranks::alone());
            let bits = |r: &AttackResult| -> Vec<(String, u64)> {
                r.scores
                    .iter()
                    .map(|s| (s.name.name().to_string(), s.value.to_bits()))
                    .collect()
            };
            for k in [2, 3] {
                for (r, got) in on_ranks(k, |ranks| attacked(spec, method, &ranks)).iter().enumerate() {
                    assert_eq!(bits(got), bits(&one), "{spec} {method}, rank {r} of {k}");
                    assert_eq!(got.per_query, one.per_query, "{spec} {method}, rank {r} of {k}");
                    assert_eq!(got.queries, one.queries);
                }
            }
        }
    }
}
