//! Which scores a run can compute. A Recall@k or MAP@R (and the attacks' columns that are a
//! Recall@1 after the attack: ES:R, LTM, GTM) counts only a query with another item of its class
//! among the ranked images, as `eval` does; a run where no attacked query has one cannot compute
//! them, and says so rather than leaving them out of a table (and out of ERS's mean) that would
//! look complete.

use super::column::Column;
use super::context::Context;
use std::collections::HashMap;

/// How many of the first `q` items have no other item of their class among the ranked images
/// (their own copy left out).
pub fn lone_queries(target: &Context, q: usize) -> usize {
    let mut count: HashMap<u32, usize> = HashMap::new();
    for &l in target.ranked_labels() {
        *count.entry(l).or_default() += 1;
    }
    let labels = &target.set.labels;
    (0..q.min(labels.len()))
        .filter(|&i| {
            let own = target
                .own(i)
                .filter(|&j| target.ranked_labels().get(j) == Some(&labels[i]));
            count.get(&labels[i]).copied().unwrap_or(0) <= usize::from(own.is_some())
        })
        .count()
}

/// The error of a run whose `columns` covered none of its `q` items.
pub fn uncomputable(what: &str, columns: &[Column], q: usize, ranked: usize) -> anyhow::Error {
    let names: Vec<&str> = columns.iter().map(|c| c.name()).collect();
    uncomputable_named(what, &names, q, ranked)
}

fn uncomputable_named(what: &str, names: &[&str], q: usize, ranked: usize) -> anyhow::Error {
    crate::input_error(format!(
        "{what}: {} cannot be computed: none of the {q} attacked queries has another item of its class among \
         the {ranked} ranked images, and a Recall@k or MAP@R counts only such queries; attack queries of classes \
         that have two items or more there (more queries, or a gallery that holds their classes)",
        names.join(", ")
    ))
}

/// Refuses `what` before any attack when every one of its first `q` queries is lone: the suite's
/// Recall columns (ES:R, LTM, GTM) and so its ERS cannot be computed.
pub fn check_suite(target: &Context, q: usize, what: &str) -> anyhow::Result<()> {
    let q = q.min(target.n());
    if q > 0 && lone_queries(target, q) == q {
        let recall = [Column::RECALL_CLEAN.name(), "ES:R", "LTM", "GTM", "and so ERS"];
        return Err(uncomputable_named(what, &recall, q, target.ranked_n()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attack::budget::{Norm, Pgd};
    use crate::attack::suite::{Setup, robustness, run_with};

    fn points(n: usize, width: usize) -> Vec<f32> {
        (0..n * width).map(|i| ((i * 37) % 101) as f32 / 101.0).collect()
    }

    const PGD: Pgd = Pgd {
        eps: 0.1,
        step: 0.02,
        steps: 2,
        norm: Norm::Linf,
        random_start: false,
        start_radius: 1.0,
        project: true,
    };

    /// Every query lone: the suite refuses before attacking (it left ES:R, LTM and GTM out of
    /// its table and ERS's mean, silently, before), each Recall attack names its columns, and an
    /// attack with no Recall column still scores.
    #[test]
    fn a_run_that_cannot_compute_a_column_says_so() {
        let (n, width) = (12, 4);
        let labels: Vec<u32> = (0..n as u32).collect();
        let ctx = crate::attack::units::pixels::context_of(&points(n, width), width, &labels, false);
        assert_eq!(lone_queries(&ctx, n), n);
        let setup = Setup::white_box(&ctx, &PGD, n, 5, 3);
        let Err(e) = robustness(&setup) else { panic!("refused") };
        let e = format!("{e:#}");
        assert!(e.contains("ES:R, LTM, GTM, and so ERS cannot be computed"), "{e}");
        assert!(e.contains("none of the 12 attacked queries"), "{e}");
        for (spec, cols) in [("LTM", "LTM"), ("ES", "ES:R"), ("NN", "recall@1")] {
            let a = crate::attack::registry::attack(spec).unwrap();
            let Err(e) = run_with(&setup, a.as_ref()) else {
                panic!("{spec}")
            };
            let e = format!("{e:#}");
            assert!(
                e.starts_with(&format!("attack {spec}: ")) && e.contains(cols),
                "{spec}: {e}"
            );
        }
        let ca = crate::attack::registry::attack("CA+").unwrap();
        let r = run_with(&setup, ca.as_ref()).unwrap();
        assert!(r.get(crate::attack::units::ranking::CA_PLUS).is_some());
    }

    /// One query with a partner among lone ones: every column computed, Recall over it alone.
    #[test]
    fn one_query_with_a_partner_is_enough() {
        let (n, width) = (12, 4);
        let mut labels: Vec<u32> = (0..n as u32).collect();
        labels[7] = 0;
        let ctx = crate::attack::units::pixels::context_of(&points(n, width), width, &labels, false);
        assert_eq!(lone_queries(&ctx, n), n - 2);
        assert_eq!(lone_queries(&ctx, 1), 0);
        let r = robustness(&Setup::white_box(&ctx, &PGD, n, 5, 3)).unwrap();
        assert_eq!(r.rows.len(), 10, "every ERS column");
    }
}
