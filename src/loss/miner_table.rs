//! The `[loss.miner]` table of the tuple losses, a miner as its own object (as
//! pytorch-metric-learning's miners are): which miner, which batch items anchor, and the
//! distance-weighted miner's cutoffs. `miner = "semihard"` is the table with only its `kind`. A
//! key left out takes the loss's default: robrank's miner for the triplet and contrastive losses
//! ([`MinerTable::ROBRANK`]), Wu et al.'s distance-weighted sampling for the margin loss
//! ([`MinerTable::WU`]). Configs written before the table kept these keys in `[loss]`
//! ([`super::legacy`] still reads them).

use super::miner::{Anchors, Miner, Mining};
use anyhow::{Result, ensure};
use serde::de::value::MapAccessDeserializer;
use serde::de::{IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

/// A tuple loss's miner.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MinerTable {
    pub kind: Miner,
    pub anchors: Anchors,
    /// Distances below this are raised to it before distance weighting.
    pub cutoff: f32,
    /// Negatives at or beyond this distance get no weight (distance weighting).
    pub nonzero_loss_cutoff: Option<f32>,
}

impl MinerTable {
    /// robrank's: random negatives on SPC-2 pairs, distance weighting with no cutoffs.
    pub const ROBRANK: Self = Self {
        kind: Miner::Random,
        anchors: Anchors::Pairs,
        cutoff: 0.0,
        nonzero_loss_cutoff: None,
    };

    /// Wu et al.'s ("Sampling matters"): distance-weighted negatives, cutoffs 0.5 and 1.4.
    pub const WU: Self = Self {
        kind: Miner::Distance,
        anchors: Anchors::Pairs,
        cutoff: 0.5,
        nonzero_loss_cutoff: Some(1.4),
    };

    /// The settings [`crate::loss::mine`] reads, with the loss's semihard window `margin`.
    pub fn mining(&self, margin: f32) -> Mining {
        Mining {
            miner: self.kind,
            anchors: self.anchors,
            margin,
            cutoff: self.cutoff,
            nonzero_loss_cutoff: self.nonzero_loss_cutoff,
        }
    }

    /// Checks the cutoffs; an error names the key.
    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.cutoff.is_finite() && self.cutoff >= 0.0,
            "loss.miner.cutoff must be a finite number ≥ 0, got {}",
            self.cutoff
        );
        if let Some(c) = self.nonzero_loss_cutoff {
            ensure!(
                c.is_finite(),
                "loss.miner.nonzero_loss_cutoff must be a finite number, got {c}"
            );
        }
        Ok(())
    }

    /// `written` over these defaults.
    fn over(self, written: Written) -> Self {
        match written {
            Written::Kind(kind) => Self { kind, ..self },
            Written::Table(t) => Self {
                kind: t.kind.unwrap_or(self.kind),
                anchors: t.anchors.unwrap_or(self.anchors),
                cutoff: t.cutoff.unwrap_or(self.cutoff),
                nonzero_loss_cutoff: t.nonzero_loss_cutoff.or(self.nonzero_loss_cutoff),
            },
        }
    }
}

/// `[loss.miner]` as written: a miner's name, or a table of the keys given.
enum Written {
    Kind(Miner),
    Table(Table),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    #[serde(default)]
    kind: Option<Miner>,
    #[serde(default)]
    anchors: Option<Anchors>,
    #[serde(default)]
    cutoff: Option<f32>,
    #[serde(default)]
    nonzero_loss_cutoff: Option<f32>,
}

impl<'de> Deserialize<'de> for Written {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = Written;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a miner's name or a table of kind, anchors, cutoff, nonzero_loss_cutoff")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Written, E> {
                Miner::deserialize(v.into_deserializer()).map(Written::Kind)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Written, A::Error> {
                Table::deserialize(MapAccessDeserializer::new(map)).map(Written::Table)
            }
        }
        d.deserialize_any(Visit)
    }
}

/// The table over [`MinerTable::ROBRANK`] (`#[serde(deserialize_with)]`).
pub fn robrank<'de, D: Deserializer<'de>>(d: D) -> Result<MinerTable, D::Error> {
    Written::deserialize(d).map(|w| MinerTable::ROBRANK.over(w))
}

/// The table over [`MinerTable::WU`] (`#[serde(deserialize_with)]`).
pub fn wu<'de, D: Deserializer<'de>>(d: D) -> Result<MinerTable, D::Error> {
    Written::deserialize(d).map(|w| MinerTable::WU.over(w))
}

/// [`MinerTable::ROBRANK`] (`#[serde(default)]`).
pub fn robrank_default() -> MinerTable {
    MinerTable::ROBRANK
}

/// [`MinerTable::WU`] (`#[serde(default)]`).
pub fn wu_default() -> MinerTable {
    MinerTable::WU
}
