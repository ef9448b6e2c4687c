//! What an attack reports: typed columns, each named as robrank and the papers print it.

use anyhow::{Context as _, Result, ensure};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// One reported quantity, known by its name as robrank and the papers print it. A column is
/// declared by what reports it: an attack unit declares its own (`es::ES_D`, `ranking::CA_PLUS`,
/// each in the unit's file); the columns every attack's scoring shares are below. Percentages
/// unless its declaration says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Column(&'static str);

impl Column {
    /// Recall@1 of the attacked queries unattacked.
    pub const RECALL_CLEAN: Column = Column("recall@1:clean");
    pub const MAP_AT_R: Column = Column("map@r");
    /// The mean ARS rank term of the ranking attacks (CA-TRIDE, Eq. 27/29/30).
    pub const ARS: Column = Column("ARS");
    /// NMI and π_ratio of all attacked embeddings (fractions).
    pub const NMI: Column = Column("nmi");
    pub const PI_RATIO: Column = Column("pi_ratio");
    /// Forward passes of the attacked model an attack spent per query (black-box attacks).
    pub const MODEL_QUERIES: Column = Column("model_queries");

    /// A column an attack unit declares, by the name it is printed and written with.
    pub const fn named(name: &'static str) -> Self {
        Self(name)
    }

    /// Recall@k of the attacked queries.
    pub fn recall(k: usize) -> Self {
        Self(intern(&format!("recall@{k}")))
    }

    pub fn name(self) -> &'static str {
        self.0
    }

    /// The column named `s`, as rdml writes it or as rdml ≤ 0.3 wrote it (`R@1`, `R@1:clean`,
    /// `MAP@R`, `NMI`), so that older JSON reads. A name no attack of this build declares still
    /// reads (a file from a newer rdml keeps its columns through `compare` and `report`).
    pub fn parse(s: &str) -> Result<Self> {
        let name = canonical(s)?;
        Ok(Self(intern(&name)))
    }

    /// Whether this is the column named `s` (any name [`Column::parse`] reads), without keeping
    /// `s`: a lookup by a name no result holds leaves nothing behind.
    pub fn is_named(self, s: &str) -> bool {
        canonical(s).is_ok_and(|n| n == self.0)
    }
}

/// The name rdml writes for `s`: rdml ≤ 0.3's names mapped, `R@k`/`recall@k` as `recall@k`.
fn canonical(s: &str) -> Result<std::borrow::Cow<'_, str>> {
    let s = match s {
        "R@1:clean" => "recall@1:clean",
        "MAP@R" => "map@r",
        "NMI" => "nmi",
        s => s,
    };
    let digits = |k: &str| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit());
    if let Some(k) = s
        .strip_prefix("R@")
        .or_else(|| s.strip_prefix("recall@"))
        .filter(|k| digits(k))
    {
        let k = k
            .parse::<usize>()
            .ok()
            .filter(|&k| k >= 1)
            .with_context(|| format!("score column '{s}': Recall@k needs a whole k ≥ 1"))?;
        return Ok(format!("recall@{k}").into());
    }
    ensure!(
        !s.is_empty() && s.len() <= 64 && !s.chars().any(char::is_control),
        "score column '{}': expected a name of 1 to 64 printable characters",
        s.escape_debug()
    );
    Ok(s.into())
}

/// The one `'static` copy of a column name read from a file or built at run time: columns stay
/// `Copy` and compare by name, and each distinct name is kept once for the process.
fn intern(name: &str) -> &'static str {
    static NAMES: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = names.iter().find(|n| **n == name) {
        return n;
    }
    let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.push(n);
    n
}

impl fmt::Display for Column {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
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

#[cfg(test)]
mod tests {
    use super::Column;

    #[test]
    fn a_column_reads_by_its_name_its_old_name_or_a_name_this_build_does_not_declare() {
        assert_eq!(Column::parse("R@1:clean").unwrap(), Column::RECALL_CLEAN);
        assert_eq!(Column::parse("MAP@R").unwrap(), Column::MAP_AT_R);
        assert_eq!(Column::parse("R@4").unwrap(), Column::recall(4));
        assert_eq!(Column::parse("recall@4").unwrap(), Column::recall(4));
        assert_eq!(Column::parse("ES:D").unwrap(), crate::attack::units::es::ES_D);
        let newer = Column::parse("XY:Z").unwrap();
        assert_eq!((newer.name(), newer), ("XY:Z", Column::parse("XY:Z").unwrap()));
        assert_eq!(Column::parse("recall@04").unwrap(), Column::recall(4));
        assert!(crate::attack::units::es::ES_D.is_named("ES:D") && Column::recall(1).is_named("R@1"));
        assert_eq!(Column::parse("recall@1:clean").unwrap(), Column::RECALL_CLEAN);
        for bad in ["", "R@0", "recall@0", "a\nb"] {
            assert!(Column::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Column::parse(&"x".repeat(65)).is_err());
    }
}
