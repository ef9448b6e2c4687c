//! Attacks and methods by name: one line per unit. A spec is `NAME[:VALUE][:KEY=VALUE]…`, as
//! rdml has always spelled its attacks (`NN-CW:0.05`, `MTAX:5`) and as robrank spells them
//! (`CA:pm=+:W=1:eps=0.03137:alpha=0.011764:pgditer=32`, `QA:pm=-:M=1`), so a robrank command
//! line can be pasted; robrank's budget keys set the PGD budget ([`SpecBudget`]).

use super::method::{Method, WhiteBox};
pub use super::spec::{Params, SpecBudget};
use super::unit::Attack;
use super::units::{es, feature, label, nn, ranking, spqa, tma};
use anyhow::{Context as _, Result, ensure};

/// An attack's names (the first is its canonical one), what it does, and how its spec is read.
pub struct Entry<T: ?Sized> {
    pub names: &'static [&'static str],
    pub about: &'static str,
    pub make: fn(&mut Params) -> Result<Box<T>>,
}

/// Every attack rdml runs, one line each.
#[rustfmt::skip]
pub const ATTACKS: &[Entry<dyn Attack>] = &[
    Entry { names: &["CA+", "CA-", "CA"], about: "candidate attack: raise (+) or lower (−) a candidate in a query's ranking (robrank's pm=±, W=1)", make: ranking::candidate_from_spec },
    Entry { names: &["QA+", "QA-", "QA"], about: "query attack: perturb a query to raise (+) or lower (−) a candidate (robrank's pm=±, M=1)", make: ranking::query_from_spec },
    Entry { names: &["SPQA+", "SPQA-", "SPQA"], about: "semantics-preserving QA±: QA plus a term keeping the query's 5 nearest items near its top (robrank's SPQA:pm=±:M=1; :sp=0 drops the term); SP:GT their mean rank after it", make: spqa::Spqa::from_spec },
    Entry { names: &["TMA"], about: "targeted mismatch: move a query toward a random item (cosine reached)", make: |_| Ok(Box::new(tma::Tma)) },
    Entry { names: &["ES"], about: "embedding shift: move a query away from itself (ES:D distance, ES:R Recall@1)", make: |_| Ok(Box::new(es::Es)) },
    Entry { names: &["LTM"], about: "label-targeted mismatch: other classes ahead of the query's own (Recall@1)", make: |_| Ok(Box::new(label::Label::Ltm)) },
    Entry { names: &["GTM"], about: "toward the nearest item of a class other than the query's top-1's (Recall@1)", make: |_| Ok(Box::new(label::Label::Gtm)) },
    Entry { names: &["GTT"], about: "push the query's top-1 out of its top 4 (rate it stays)", make: |_| Ok(Box::new(label::Label::Gtt)) },
    Entry { names: &["NN"], about: "nearest-neighbour attack (positive-perturbation paper, Algorithm 1)", make: |_| Ok(Box::new(nn::Nn::Plain)) },
    Entry { names: &["NN-CW"], about: "NN by Carlini and Wagner's L∞ algorithm on their margin loss, NN-CW[:κ] (⟨eps⟩ the first τ, ⟨step⟩ Adam's rate, ⟨steps⟩ per round, 10 rounds)", make: nn::cw_from_spec },
    Entry { names: &["NN-CW-PGD"], about: "C&W's margin loss by PGD, NN-CW-PGD[:κ]", make: nn::cw_from_spec },
    Entry { names: &["STAX", "MTAX", "UX"], about: "MDProp's feature-space examples: STAX, MTAX[:T], UX[:T] (T targets, default 5)", make: feature::from_spec },
    #[cfg(test)]
    Entry { names: &["EX-RAISE"], about: "the worked example of an attack with its own column (units/example.rs)", make: |_| Ok(Box::new(super::units::example::Raise)) },
];

/// How the images are moved, one line each.
#[rustfmt::skip]
pub const METHODS: &[Entry<dyn Method>] = &[
    Entry { names: &["white-box"], about: "the attacked model's gradients, with the attack's own optimiser (default)", make: |_| Ok(Box::new(WhiteBox)) },
    Entry { names: &["nes"], about: "black-box: PGD on gradients estimated by NES from the model's embeddings alone, nes[:pop=P][:sigma=σ] (robrank's NES defaults: P 100, σ ε/0.5); reports model_queries", make: super::method::nes::Nes::from_spec },
    Entry { names: &["universal"], about: "one perturbation for all attacked items, fitted by PGD on the attack's loss over all of them, then added to each", make: super::method::universal::Universal::from_spec },
];

fn find<'a, T: ?Sized>(table: &'a [Entry<T>], name: &str) -> Option<&'a Entry<T>> {
    table
        .iter()
        .find(|e| e.names.iter().any(|n| n.eq_ignore_ascii_case(name)))
}

/// The attack a spec names, and the budget its robrank keys set.
pub fn attack_with_budget(spec: &str) -> Result<(Box<dyn Attack>, SpecBudget)> {
    let mut p = Params::parse(spec)?;
    let entry = find(ATTACKS, p.name()).with_context(|| {
        format!(
            "unknown attack '{spec}': expected one of {}",
            ATTACKS
                .iter()
                .flat_map(|e| e.names.iter().copied())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let budget = SpecBudget {
        eps: p.key_number("eps", "a number ≥ 0", |e: &f32| e.is_finite() && *e >= 0.0)?,
        step: p.key_number("alpha", "a number ≥ 0", |e: &f32| e.is_finite() && *e >= 0.0)?,
        steps: p.key_number("pgditer", "an integer ≥ 1", |s: &usize| *s >= 1)?,
    };
    let attack = (entry.make)(&mut p)?;
    p.finish(" (robrank's eps, alpha and pgditer are read for every attack)")?;
    Ok((attack, budget))
}

/// The attack a spec names; a spec with robrank budget keys is refused here (they would be lost).
pub fn attack(spec: &str) -> Result<Box<dyn Attack>> {
    let (a, budget) = attack_with_budget(spec)?;
    ensure!(
        budget == SpecBudget::default(),
        "'{spec}': eps, alpha and pgditer are read where an attack is run with its budget (⟨attack⟩)"
    );
    Ok(a)
}

/// The method a spec names.
pub fn method(spec: &str) -> Result<Box<dyn Method>> {
    let mut p = Params::parse(spec)?;
    let entry = find(METHODS, p.name()).with_context(|| {
        format!(
            "unknown method '{spec}': expected one of {}",
            METHODS.iter().map(|e| e.names[0]).collect::<Vec<_>>().join(", ")
        )
    })?;
    let m = (entry.make)(&mut p)?;
    p.finish("")?;
    Ok(m)
}

/// One line per entry, for `--help`.
pub fn help<T: ?Sized>(table: &[Entry<T>]) -> String {
    table
        .iter()
        .map(|e| format!("{}: {}", e.names.join(" | "), e.about))
        .collect::<Vec<_>>()
        .join("\n")
}
