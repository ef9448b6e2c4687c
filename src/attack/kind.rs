//! The attacks rdml runs, by the names the papers and robrank use.

use anyhow::{Context as _, Result, bail};
use serde::{Deserialize, Serialize};

/// The attacks rdml runs by name.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum AttackKind {
    #[serde(rename = "CA+")]
    CaPlus,
    #[serde(rename = "CA-")]
    CaMinus,
    #[serde(rename = "QA+")]
    QaPlus,
    #[serde(rename = "QA-")]
    QaMinus,
    #[serde(rename = "TMA")]
    Tma,
    #[serde(rename = "ES")]
    Es,
    #[serde(rename = "LTM")]
    Ltm,
    #[serde(rename = "GTM")]
    Gtm,
    #[serde(rename = "GTT")]
    Gtt,
    /// Nearest-neighbour attack (positive-perturbation paper, Algorithm 1).
    #[serde(rename = "NN")]
    Nn,
    /// The same attack by Carlini and Wagner's L∞ algorithm ([`super::cw`]) on their margin loss
    /// (confidence κ), as the positive-perturbation paper's Tables 4 and 7.
    #[serde(rename = "NN-CW")]
    NnCw { kappa: f32 },
    /// Carlini–Wagner's margin loss (confidence κ) minimised by the PGD engine ("CW∞" of Madry et al.).
    #[serde(rename = "NN-CW-PGD")]
    NnCwPgd { kappa: f32 },
    /// MDProp's single-targeted feature-space AX (one random target of another class).
    #[serde(rename = "STAX")]
    Stax,
    /// MDProp's multi-targeted feature-space AX (`targets` random targets of other classes).
    #[serde(rename = "MTAX")]
    Mtax { targets: usize },
    /// MDProp's unadversarial example (targets of the item's own class).
    #[serde(rename = "UX")]
    Ux { targets: usize },
}

impl AttackKind {
    pub const ERS_SUITE: [AttackKind; 9] = [
        AttackKind::CaPlus,
        AttackKind::CaMinus,
        AttackKind::QaPlus,
        AttackKind::QaMinus,
        AttackKind::Tma,
        AttackKind::Es,
        AttackKind::Ltm,
        AttackKind::Gtm,
        AttackKind::Gtt,
    ];
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "CA+" => Self::CaPlus,
            "CA-" => Self::CaMinus,
            "QA+" => Self::QaPlus,
            "QA-" => Self::QaMinus,
            "TMA" => Self::Tma,
            "ES" => Self::Es,
            "LTM" => Self::Ltm,
            "GTM" => Self::Gtm,
            "GTT" => Self::Gtt,
            "NN" => Self::Nn,
            o if o.starts_with("NN-CW") => {
                let (head, kappa) = match o.split_once(':') {
                    Some((h, k)) => (h, Some(k)),
                    None => (o, None),
                };
                let kappa = match kappa {
                    Some(k) => k
                        .parse::<f32>()
                        .ok()
                        .filter(|k| k.is_finite() && *k >= 0.0)
                        .with_context(|| format!("attack '{o}': κ after ':' must be a number ≥ 0"))?,
                    None => 0.0,
                };
                match head {
                    "NN-CW" => Self::NnCw { kappa },
                    "NN-CW-PGD" => Self::NnCwPgd { kappa },
                    _ => bail!("unknown attack '{o}': expected NN-CW[:κ] or NN-CW-PGD[:κ]"),
                }
            }
            "STAX" => Self::Stax,
            o if o.starts_with("MTAX") || o.starts_with("UX") => {
                let (head, t) = o.split_once(':').unwrap_or((o, "5"));
                let targets: usize = t
                    .parse()
                    .ok()
                    .filter(|&t| t >= 1)
                    .with_context(|| format!("attack '{o}': the number of targets after ':' must be ≥ 1"))?;
                if head == "MTAX" {
                    Self::Mtax { targets }
                } else {
                    Self::Ux { targets }
                }
            }
            o => bail!(
                "unknown attack '{o}': expected CA+, CA-, QA+, QA-, TMA, ES, LTM, GTM, GTT, NN, NN-CW[:κ], NN-CW-PGD[:κ], STAX, MTAX[:T] or UX[:T]"
            ),
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::CaPlus => "CA+",
            Self::CaMinus => "CA-",
            Self::QaPlus => "QA+",
            Self::QaMinus => "QA-",
            Self::Tma => "TMA",
            Self::Es => "ES",
            Self::Ltm => "LTM",
            Self::Gtm => "GTM",
            Self::Gtt => "GTT",
            Self::Nn => "NN",
            Self::NnCw { .. } => "NN-CW",
            Self::NnCwPgd { .. } => "NN-CW-PGD",
            Self::Stax => "STAX",
            Self::Mtax { .. } => "MTAX",
            Self::Ux { .. } => "UX",
        }
    }
}
