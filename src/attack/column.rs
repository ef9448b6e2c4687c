//! What an attack reports: typed columns, each named as robrank and the papers print it, and the
//! running sums a suite run accumulates them in.

use anyhow::{Result, bail};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// One reported quantity. Percentages unless said otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Column {
    /// Percentile rank of the attacked candidate in its query's list (CA+, CA−, QA+, QA−).
    CaPlus,
    CaMinus,
    QaPlus,
    QaMinus,
    /// SPQA's candidate rank, and the mean rank of its semantics-preserving items.
    SpqaPlus,
    SpqaMinus,
    SemanticRank,
    /// Cosine similarity of the attacked embedding to its target (not a percentage).
    Tma,
    /// Embedding shift: the distance moved (not a percentage), and Recall@1 after it.
    EsD,
    EsR,
    /// Recall@1 of the attacked queries under LTM, GTM; GTT's top-4 hit rate.
    Ltm,
    Gtm,
    Gtt,
    /// Recall@k of the attacked queries.
    Recall(usize),
    /// Recall@1 of the same queries unattacked.
    RecallClean,
    MapAtR,
    /// The mean ARS rank term of the ranking attacks (CA-TRIDE, Eq. 27/29/30).
    Ars,
    /// NMI and π_ratio of all attacked embeddings (fractions).
    Nmi,
    PiRatio,
    /// Forward passes of the attacked model an attack spent per query (black-box attacks).
    ModelQueries,
}

impl Column {
    pub fn name(self) -> String {
        match self {
            Self::CaPlus => "CA+".into(),
            Self::CaMinus => "CA-".into(),
            Self::QaPlus => "QA+".into(),
            Self::QaMinus => "QA-".into(),
            Self::SpqaPlus => "SPQA+".into(),
            Self::SpqaMinus => "SPQA-".into(),
            Self::SemanticRank => "SP:GT".into(),
            Self::Tma => "TMA".into(),
            Self::EsD => "ES:D".into(),
            Self::EsR => "ES:R".into(),
            Self::Ltm => "LTM".into(),
            Self::Gtm => "GTM".into(),
            Self::Gtt => "GTT".into(),
            Self::Recall(k) => format!("recall@{k}"),
            Self::RecallClean => "recall@1:clean".into(),
            Self::MapAtR => "map@r".into(),
            Self::Ars => "ARS".into(),
            Self::Nmi => "nmi".into(),
            Self::PiRatio => "pi_ratio".into(),
            Self::ModelQueries => "model_queries".into(),
        }
    }

    /// The column named `s`: its name, or the name rdml ≤ 0.3 wrote (`R@1`, `R@1:clean`,
    /// `MAP@R`, `NMI`), so that older JSON reads.
    pub fn parse(s: &str) -> Result<Self> {
        let s = match s {
            "R@1:clean" => "recall@1:clean",
            "MAP@R" => "map@r",
            "NMI" => "nmi",
            s => s,
        };
        const FIXED: [Column; 19] = [
            Column::CaPlus,
            Column::CaMinus,
            Column::QaPlus,
            Column::QaMinus,
            Column::SpqaPlus,
            Column::SpqaMinus,
            Column::SemanticRank,
            Column::Tma,
            Column::EsD,
            Column::EsR,
            Column::Ltm,
            Column::Gtm,
            Column::Gtt,
            Column::RecallClean,
            Column::MapAtR,
            Column::Ars,
            Column::Nmi,
            Column::PiRatio,
            Column::ModelQueries,
        ];
        if let Some(c) = FIXED.iter().find(|c| c.name() == s) {
            return Ok(*c);
        }
        match s
            .strip_prefix("recall@")
            .or_else(|| s.strip_prefix("R@"))
            .and_then(|k| k.parse::<usize>().ok())
        {
            Some(k) if k >= 1 => Ok(Self::Recall(k)),
            _ => bail!("unknown score column '{s}'"),
        }
    }
}

impl fmt::Display for Column {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl Serialize for Column {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Column {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Column::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// One column's value for a whole run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Score {
    pub name: Column,
    pub value: f64,
}

/// A run's scores in JSON: one flat object `{"CA+": 0.879, "recall@1:clean": 85.2}` in the
/// order the attack reports them; the list of `{name, value}` of rdml ≤ 0.3 still reads.
pub mod flat_scores {
    use super::{Column, Score};
    use serde::ser::SerializeMap;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(scores: &[Score], s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(scores.len()))?;
        for sc in scores {
            m.serialize_entry(&sc.name.name(), &sc.value)?;
        }
        m.end()
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        Flat(serde_json::Map<String, serde_json::Value>),
        List(Vec<Score>),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Score>, D::Error> {
        use serde::de::Error;
        match Form::deserialize(d)? {
            Form::List(v) => Ok(v),
            Form::Flat(m) => m
                .into_iter()
                .map(|(k, v)| {
                    let name = Column::parse(&k).map_err(D::Error::custom)?;
                    let value = v
                        .as_f64()
                        .ok_or_else(|| D::Error::custom(format!("score `{k}` must be a number")))?;
                    Ok(Score { name, value })
                })
                .collect(),
        }
    }
}

/// Per-column sums over the items of a run and how many items each covers, in the order
/// columns first appear. Each column is averaged over its own items: the Recall@k and MAP@R
/// columns leave out queries with no other item of their class, as `eval` does.
#[derive(Debug, Default)]
pub struct Tally {
    sums: Vec<(Column, f64, usize)>,
}

impl Tally {
    /// One item's value.
    pub fn add(&mut self, column: Column, v: f64) {
        self.add_sum(column, v, 1);
    }

    /// The sum of `items` items' values.
    pub fn add_sum(&mut self, column: Column, sum: f64, items: usize) {
        match self.sums.iter_mut().find(|s| s.0 == column) {
            Some(s) => {
                s.1 += sum;
                s.2 += items;
            }
            None => self.sums.push((column, sum, items)),
        }
    }

    /// Each column's mean over its items; a column that covered no item (every query lone) is
    /// left out rather than reported as 0.
    pub fn means(self) -> Vec<Score> {
        self.sums
            .into_iter()
            .filter(|s| s.2 > 0)
            .map(|(name, v, n)| Score {
                name,
                value: v / n as f64,
            })
            .collect()
    }
}
