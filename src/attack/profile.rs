//! Named attack budgets: robrank's two ERS profiles and the positive-perturbation paper's PGD-5.

use super::budget::{Norm, Pgd};
use super::spec::SpecBudget;
use anyhow::{Context as _, Result};

/// How a profile's step follows from its radius.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepRule {
    Fixed(f32),
    /// `2ε / i` for `i` iterations: every point of the ε-ball reachable from any start (seed 000,
    /// §4, after Wong et al.).
    TwiceEpsOverSteps,
}

#[derive(Debug, Clone, Copy)]
pub struct Profile {
    pub name: &'static str,
    pub about: &'static str,
    pub eps: f32,
    pub step: StepRule,
    pub steps: usize,
    pub random_start: bool,
    /// The (ε, step) robrank's code writes for this profile (`cmdline.py`'s spec strings, e.g.
    /// `eps=0.30196:alpha=0.011764`): decimals a little off the fractions, which are what a
    /// robrank-compatible run uses, since 32 sign steps carry the difference to the few queries an
    /// attack turns by a hair (GTM on robrank's own Fashion checkpoint: 2 of 128).
    pub robrank_code: Option<(f32, f32)>,
}

pub const PROFILES: &[Profile] = &[
    Profile {
        name: "rob28",
        about: "robrank's MNIST/Fashion-MNIST budget: L∞ ε 77/255, 32 steps of 3/255",
        eps: 77.0 / 255.0,
        step: StepRule::Fixed(3.0 / 255.0),
        steps: 32,
        random_start: false,
        robrank_code: Some((0.30196, 0.011764)),
    },
    Profile {
        name: "rob224",
        about: "robrank's CUB/CARS/SOP budget: L∞ ε 8/255, 32 steps of 3/255",
        eps: 8.0 / 255.0,
        step: StepRule::Fixed(3.0 / 255.0),
        steps: 32,
        random_start: false,
        robrank_code: Some((0.03137, 0.011764)),
    },
    Profile {
        name: "pp-pgd5",
        about: "the positive-perturbation paper's PGD-5 (seed 000, Tables 1-2): L∞ ε 0.01 (the paper also uses 0.05 and 0.1: ⟨eps⟩), 5 steps of 2ε/5, random start",
        eps: 0.01,
        step: StepRule::TwiceEpsOverSteps,
        steps: 5,
        random_start: true,
        robrank_code: None,
    },
];

pub fn profile(name: &str) -> Result<&'static Profile> {
    PROFILES.iter().find(|p| p.name == name).with_context(|| {
        format!(
            "unknown profile '{name}': expected {}",
            PROFILES.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
        )
    })
}

/// Changes to a profile's budget; `None` keeps the profile's value.
#[derive(Debug, Clone, Copy, Default)]
pub struct Overrides {
    pub eps: Option<f32>,
    pub step: Option<f32>,
    pub steps: Option<usize>,
    pub norm: Option<Norm>,
    /// `true` turns a random start on; profiles that have one keep it.
    pub random_start: bool,
}

/// A robrank spec's budget keys as changes to a profile.
impl From<SpecBudget> for Overrides {
    fn from(s: SpecBudget) -> Self {
        Self {
            eps: s.eps,
            step: s.step,
            steps: s.steps,
            norm: None,
            random_start: false,
        }
    }
}

/// A profile chosen by its name: read by serde (the Python package's `profile=`) and by
/// [`std::str::FromStr`] (`--profile`), so an unknown name is refused where it is read and
/// everything below holds the profile itself.
#[derive(Debug, Clone, Copy)]
pub struct ProfileName(&'static Profile);

impl ProfileName {
    pub fn profile(self) -> &'static Profile {
        self.0
    }
    pub fn name(self) -> &'static str {
        self.0.name
    }
}

impl PartialEq for ProfileName {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl std::str::FromStr for ProfileName {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        profile(s).map(ProfileName)
    }
}

impl std::fmt::Display for ProfileName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name)
    }
}

impl serde::Serialize for ProfileName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.0.name)
    }
}

impl<'de> serde::Deserialize<'de> for ProfileName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(|e| serde::de::Error::custom(format!("{e:#}")))
    }
}

/// The budget of a command: `profile` changed by the user's `flags` and by an attack spec's own
/// budget keys (`spec`, robrank's `eps=…:alpha=…:pgditer=…`), which must agree with the flags
/// where both are given; validated with the keys named as options (`⟨eps⟩`, …: each front end
/// says them in its own words, [`crate::field`]). With `robrank_compat`, the profile's ε and
/// step are the decimals robrank's code writes ([`Profile::robrank_code`]).
pub fn resolve(profile: ProfileName, flags: &Overrides, spec: &Overrides, robrank_compat: bool) -> Result<Pgd> {
    fn both<T: PartialEq + std::fmt::Display + Copy>(flag: Option<T>, key: Option<T>, what: &str) -> Result<Option<T>> {
        match (flag, key) {
            (Some(f), Some(k)) if f != k => {
                anyhow::bail!("⟨{what}⟩ {f} and the attack spec's value {k} disagree: give one")
            }
            (f, k) => Ok(f.or(k)),
        }
    }
    let o = Overrides {
        eps: both(flags.eps, spec.eps, "eps")?,
        step: both(flags.step, spec.step, "step")?,
        steps: both(flags.steps, spec.steps, "steps")?,
        norm: flags.norm.or(spec.norm),
        random_start: flags.random_start || spec.random_start,
    };
    let p = profile.profile();
    let pgd = match (robrank_compat, p.robrank_code) {
        (true, Some(code)) => p.as_robrank_writes(code).pgd(&o),
        _ => p.pgd(&o),
    };
    pgd.validate_as("⟨")?;
    Ok(pgd)
}

impl Profile {
    /// This profile with robrank's decimals `(ε, step)` for its fractions.
    fn as_robrank_writes(&self, (eps, step): (f32, f32)) -> Profile {
        Profile {
            eps,
            step: StepRule::Fixed(step),
            ..*self
        }
    }

    /// The profile's PGD budget with `o` applied; a step rule follows the final ε and steps.
    pub fn pgd(&self, o: &Overrides) -> Pgd {
        let eps = o.eps.unwrap_or(self.eps);
        let steps = o.steps.unwrap_or(self.steps);
        let rule = match self.step {
            StepRule::Fixed(s) => s,
            StepRule::TwiceEpsOverSteps => 2.0 * eps / steps.max(1) as f32,
        };
        Pgd {
            eps,
            step: o.step.unwrap_or(rule),
            steps,
            norm: o.norm.unwrap_or(Norm::Linf),
            random_start: self.random_start || o.random_start,
            start_radius: 1.0,
            project: true,
        }
    }
}

/// One line per profile, for `--help`.
pub fn help() -> String {
    PROFILES
        .iter()
        .map(|p| format!("{}: {}", p.name, p.about))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod resolve_tests {
    use super::*;

    fn n(name: &str) -> ProfileName {
        name.parse().unwrap()
    }

    fn o(eps: Option<f32>, steps: Option<usize>) -> Overrides {
        Overrides {
            eps,
            step: None,
            steps,
            norm: None,
            random_start: false,
        }
    }

    /// A spec's budget fills what the flags leave out, and a disagreement names the flag.
    #[test]
    fn flags_and_a_specs_budget_merge_or_disagree() {
        let p = resolve(n("rob28"), &o(None, None), &o(Some(0.1), Some(4)), false).unwrap();
        assert_eq!((p.eps, p.steps), (0.1, 4));
        let p = resolve(n("rob28"), &o(Some(0.1), None), &o(Some(0.1), Some(4)), false).unwrap();
        assert_eq!((p.eps, p.steps), (0.1, 4));
        let e = resolve(n("rob28"), &o(Some(0.2), None), &o(Some(0.1), None), false)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "⟨eps⟩ 0.2 and the attack spec's value 0.1 disagree: give one");
        let e = format!("{:#}", "rob99".parse::<ProfileName>().unwrap_err());
        assert!(e.starts_with("unknown profile 'rob99'"), "{e}");
        let e = serde_json::from_str::<ProfileName>("\"rob99\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("unknown profile 'rob99': expected rob28, rob224, pp-pgd5"),
            "{e}"
        );
        let e = resolve(n("rob28"), &o(Some(f32::INFINITY), None), &o(None, None), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("⟨eps⟩ must be a finite number"), "{e}");
    }

    /// robrank-compatible runs take robrank's decimals for the fractions; what a user gives
    /// still wins, and a profile robrank has not has none.
    #[test]
    fn robrank_compat_takes_the_decimals_robranks_code_writes() {
        let exact = resolve(n("rob28"), &o(None, None), &o(None, None), false).unwrap();
        assert_eq!((exact.eps, exact.step), (77.0 / 255.0, 3.0 / 255.0));
        let code = resolve(n("rob28"), &o(None, None), &o(None, None), true).unwrap();
        assert_eq!((code.eps, code.step, code.steps), (0.30196, 0.011764, 32));
        let code = resolve(n("rob224"), &o(None, None), &o(None, None), true).unwrap();
        assert_eq!((code.eps, code.step), (0.03137, 0.011764));
        let given = resolve(n("rob28"), &o(Some(0.1), None), &o(None, None), true).unwrap();
        assert_eq!((given.eps, given.step), (0.1, 0.011764));
        let pp = resolve(n("pp-pgd5"), &o(None, None), &o(None, None), true).unwrap();
        assert_eq!(pp.eps, 0.01);
    }
}
