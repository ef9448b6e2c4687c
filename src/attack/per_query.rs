//! Per-query raw values, kept on request (`--per-query`, `per_query=True`): each attacked item's
//! own value of every column its attack reports per item, beside the means. An auditor sees which
//! queries fall, and can take any statistic of them (a median, a bootstrap interval) without
//! rerunning the attack.

use super::column::Column;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Each attacked item and its value of each column, in the order the items were attacked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerQuery {
    /// Each attacked item's index in the set it was taken from: the queries, or the gallery's
    /// candidates for CA± when there is a gallery.
    pub item: Vec<usize>,
    /// Each column's value per item (aligned with `item`), as its mean is reported (percent for
    /// the Recall and rank columns); `None` where the item has none — a query with no other item
    /// of its class has no Recall@k or MAP@R, as `eval` leaves it out.
    #[serde(with = "by_name")]
    pub values: Vec<(Column, Vec<Option<f64>>)>,
}

/// The values of the items of the batch being scored, as the attack units report them by row.
#[derive(Debug, Default)]
pub(crate) struct Rows {
    batch: Vec<usize>,
    items: Vec<usize>,
    values: Vec<(Column, Vec<(usize, f64)>)>,
}

impl Rows {
    /// The items of the next batch, row by row.
    pub fn batch(&mut self, items: &[usize]) {
        self.batch = items.to_vec();
        self.items.extend_from_slice(items);
    }

    /// The value of row `row` of the current batch.
    pub fn add(&mut self, column: Column, row: usize, v: f64) {
        let item = self.batch.get(row).copied().unwrap_or(usize::MAX);
        match self.values.iter_mut().find(|c| c.0 == column) {
            Some(c) => c.1.push((item, v)),
            None => self.values.push((column, vec![(item, v)])),
        }
    }

    /// Every item's values, `None` where an item reported none.
    pub fn finish(self) -> PerQuery {
        let place: std::collections::HashMap<usize, usize> =
            self.items.iter().enumerate().map(|(p, &i)| (i, p)).collect();
        let values = self
            .values
            .into_iter()
            .map(|(column, vs)| {
                let mut per = vec![None; self.items.len()];
                for (item, v) in vs {
                    if let Some(&p) = place.get(&item) {
                        per[p] = Some(v);
                    }
                }
                (column, per)
            })
            .collect();
        PerQuery {
            item: self.items,
            values,
        }
    }
}

impl PerQuery {
    /// The values of the column named `name` ("CA+", "R@1").
    pub fn column(&self, name: &str) -> Option<&[Option<f64>]> {
        self.values.iter().find(|c| c.0.is_named(name)).map(|c| c.1.as_slice())
    }
}

/// The columns as one JSON object `{"CA+": [12.5, 0.0, …], "recall@1": [100.0, null, …]}` in the
/// order the attack reports them.
mod by_name {
    use super::*;
    use serde::ser::SerializeMap;

    type Values = Vec<(Column, Vec<Option<f64>>)>;

    pub fn serialize<S: Serializer>(values: &Values, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(values.len()))?;
        for (c, v) in values {
            m.serialize_entry(c.name(), v)?;
        }
        m.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Values, D::Error> {
        use serde::de::Error;
        let m = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
        m.into_iter()
            .map(|(k, v)| {
                let c = Column::parse(&k).map_err(D::Error::custom)?;
                let v = Vec::<Option<f64>>::deserialize(v)
                    .map_err(|e| D::Error::custom(format!("per-query values of `{k}`: {e}")))?;
                Ok((c, v))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_land_on_their_items_and_read_back() {
        let mut r = Rows::default();
        r.batch(&[0, 1]);
        r.add(Column::recall(1), 1, 100.0);
        r.add(Column::ARS, 0, 3.0);
        r.add(Column::ARS, 1, 4.0);
        r.batch(&[2]);
        r.add(Column::recall(1), 0, 0.0);
        let p = r.finish();
        assert_eq!(p.item, vec![0, 1, 2]);
        assert_eq!(p.column("R@1").unwrap(), &[None, Some(100.0), Some(0.0)]);
        assert_eq!(p.column("ARS").unwrap(), &[Some(3.0), Some(4.0), None]);
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["values"]["recall@1"], serde_json::json!([null, 100.0, 0.0]));
        assert_eq!(serde_json::from_value::<PerQuery>(json).unwrap(), p);
    }

    /// Every attack family's per-item values: one per attacked item of every column the attack
    /// averages over items, their mean its reported score, and the scores those of a run that
    /// kept none.
    #[test]
    fn each_items_values_average_to_the_attacks_scores_and_change_none() {
        use crate::attack::budget::{Norm, Pgd};
        use crate::attack::suite::{Setup, run_with};
        let (n, width) = (18, 4);
        let mut state = 7u32;
        let points: Vec<f32> = (0..n * width)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 8) as f32 / (1u32 << 24) as f32
            })
            .collect();
        let mut labels: Vec<u32> = (0..n as u32).map(|i| i % 3).collect();
        labels[n - 1] = 9; // a lone query: no Recall@k or MAP@R of its own
        let ctx = crate::attack::units::pixels::context_of(&points, width, &labels, false);
        let pgd = Pgd {
            eps: 0.1,
            step: 0.02,
            steps: 3,
            norm: Norm::Linf,
            random_start: false,
            start_radius: 1.0,
            project: true,
        };
        let set_level = [Column::NMI, Column::PI_RATIO, Column::MODEL_QUERIES];
        for spec in ["CA+", "QA-", "SPQA+", "TMA", "ES", "LTM", "GTM", "GTT", "NN", "MTAX"] {
            let attack = crate::attack::registry::attack(spec).unwrap();
            let mut setup = Setup::white_box(&ctx, &pgd, n, 5, 3);
            let plain = run_with(&setup, attack.as_ref()).unwrap();
            setup.per_query = true;
            let kept = run_with(&setup, attack.as_ref()).unwrap();
            assert!(plain.per_query.is_none());
            let scores = |r: &crate::attack::result::AttackResult| -> Vec<(Column, f64)> {
                r.scores.iter().map(|s| (s.name, s.value)).collect()
            };
            assert_eq!(scores(&plain), scores(&kept), "{spec}: keeping values changed a score");
            let p = kept.per_query.expect("asked for");
            assert_eq!(p.item, (0..n).collect::<Vec<_>>(), "{spec}");
            for s in kept.scores.iter().filter(|s| !set_level.contains(&s.name)) {
                let v = p
                    .column(s.name.name())
                    .unwrap_or_else(|| panic!("{spec}: no values of {}", s.name));
                assert_eq!(v.len(), n, "{spec} {}", s.name);
                let some: Vec<f64> = v.iter().flatten().copied().collect();
                let mean = some.iter().sum::<f64>() / some.len() as f64;
                assert!(
                    (mean - s.value).abs() < 1e-9,
                    "{spec} {}: {mean} vs {}",
                    s.name,
                    s.value
                );
                // The lone query has no Recall@k or MAP@R (LTM, GTM and ES:R are Recall@1 too).
                let recall = s.name.name().starts_with("recall") || s.name == Column::MAP_AT_R;
                assert!(some.len() == n - 1 || (!recall && some.len() == n), "{spec} {}", s.name);
            }
        }
    }
}
