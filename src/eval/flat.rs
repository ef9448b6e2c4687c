//! The JSON form of [`Metrics`]: one flat object whose keys say what they are, so that
//! `jq '."recall@1"'` or `pandas.json_normalize` need no knowledge of rdml's structs.
//!
//! | key | meaning | pytorch-metric-learning's name |
//! |---|---|---|
//! | `recall@K` | Recall@K (a hit among the K nearest) | `precision_at_1` for K = 1 |
//! | `map@r` | MAP@R (Musgrave et al.) | `mean_average_precision_at_r` |
//! | `map@10` | mAP over the 10 nearest (robrank's "mAP@R") | — |
//! | `map` | mAP over the whole ranking | `mean_average_precision` |
//! | `r_precision` | R-precision | `r_precision` |
//! | `nmi` | NMI of k-means | `NMI` |
//! | `pi_ratio` | π_ratio (Roth et al.) | — |

use super::Metrics;
use super::health::Health;
use super::metrics::Retrieval;
use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// The metric names of one evaluation, in the order they are written, with their values.
pub fn named(m: &Metrics) -> Vec<(String, f64)> {
    let r = &m.retrieval;
    let mut v: Vec<(String, f64)> = r.recall.iter().map(|(k, x)| (format!("recall@{k}"), *x)).collect();
    v.push(("map@r".into(), r.map_at_r));
    v.push(("map@10".into(), r.map_at_10));
    v.push(("map".into(), r.map));
    v.push(("r_precision".into(), r.r_precision));
    if let Some(x) = m.nmi {
        v.push(("nmi".into(), x));
    }
    if let Some(x) = m.pi_ratio {
        v.push(("pi_ratio".into(), x));
    }
    v
}

impl Serialize for Metrics {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for (k, v) in named(self) {
            map.serialize_entry(&k, &v)?;
        }
        map.serialize_entry("queries", &self.retrieval.queries)?;
        map.serialize_entry("lone_queries", &self.retrieval.lone_queries)?;
        if let Some(h) = &self.health {
            map.serialize_entry("health", h)?;
        }
        // No embedding time for embeddings the caller gave: the key would mean nothing.
        if self.embed_seconds > 0.0 {
            map.serialize_entry("embed_seconds", &self.embed_seconds)?;
        }
        map.serialize_entry("metric_seconds", &self.metric_seconds)?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for Metrics {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Value::Object(mut o) = Value::deserialize(d)? else {
            return Err(D::Error::custom("metrics: expected an object"));
        };
        let mut num = |new: &str, old: &str| -> Result<Option<f64>, D::Error> {
            match o.remove(new).or_else(|| o.remove(old)) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| D::Error::custom(format!("metrics: `{new}` must be a number"))),
            }
        };
        let need = |v: Option<f64>, key: &str| v.ok_or_else(|| D::Error::custom(format!("metrics: missing `{key}`")));
        let map_at_r = need(num("map@r", "map_at_r")?, "map@r")?;
        let map_at_10 = need(num("map@10", "map_at_10")?, "map@10")?;
        let map = need(num("map", "map")?, "map")?;
        let r_precision = need(num("r_precision", "r_precision")?, "r_precision")?;
        let nmi = num("nmi", "nmi")?;
        let pi_ratio = num("pi_ratio", "pi_ratio")?;
        let queries = num("queries", "queries")?.unwrap_or(0.0) as usize;
        let lone_queries = num("lone_queries", "lone_queries")?.unwrap_or(0.0) as usize;
        let embed_seconds = num("embed_seconds", "embed_seconds")?.unwrap_or(0.0);
        let metric_seconds = num("metric_seconds", "metric_seconds")?.unwrap_or(0.0);
        let recall = recall(&mut o).map_err(D::Error::custom)?;
        let health = match o.remove("health") {
            None | Some(Value::Null) => None,
            Some(v) => Some(Health::deserialize(v).map_err(D::Error::custom)?),
        };
        Ok(Metrics {
            retrieval: Retrieval {
                recall,
                map_at_r,
                map_at_10,
                map,
                r_precision,
                queries,
                lone_queries,
            },
            nmi,
            pi_ratio,
            health,
            embed_seconds,
            metric_seconds,
        })
    }
}

/// `recall@K` keys (in K order), or the old `"recall": [[K, value], …]`.
fn recall(o: &mut Map<String, Value>) -> Result<Vec<(usize, f64)>, String> {
    if let Some(v) = o.remove("recall") {
        return serde_json::from_value(v).map_err(|e| format!("metrics: `recall`: {e}"));
    }
    let mut out = vec![];
    for (key, v) in o.iter() {
        if let Some(k) = key.strip_prefix("recall@") {
            let k: usize = k
                .parse()
                .map_err(|_| format!("metrics: `{key}`: expected recall@K, K a number"))?;
            let x = v.as_f64().ok_or_else(|| format!("metrics: `{key}` must be a number"))?;
            out.push((k, x));
        }
    }
    out.sort_by_key(|p| p.0);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Metrics {
        Metrics {
            retrieval: Retrieval {
                recall: vec![(1, 0.75), (2, 0.8), (16, 0.95)],
                map_at_r: 0.5,
                map_at_10: 0.6,
                map: 0.55,
                r_precision: 0.52,
                queries: 100,
                lone_queries: 2,
            },
            nmi: Some(0.7),
            pi_ratio: None,
            health: None,
            embed_seconds: 1.5,
            metric_seconds: 0.25,
        }
    }

    #[test]
    fn metrics_are_one_flat_object_that_reads_back() {
        let m = sample();
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["recall@1"], 0.75);
        assert_eq!(v["recall@16"], 0.95);
        assert_eq!(v["map@r"], 0.5);
        assert_eq!(v["map@10"], 0.6);
        assert_eq!(v["nmi"], 0.7);
        assert!(v.get("recall").is_none() && v.get("pi_ratio").is_none());
        let text = serde_json::to_string(&m).unwrap();
        // recall@16 after recall@2: the order a reader expects.
        assert!(
            text.find("recall@2").unwrap() < text.find("recall@16").unwrap(),
            "{text}"
        );
        assert_eq!(serde_json::from_value::<Metrics>(v).unwrap(), m);
    }

    #[test]
    fn the_nested_form_of_older_runs_reads() {
        let old = r#"{"recall": [[1, 0.75], [2, 0.8], [16, 0.95]], "map_at_r": 0.5, "map_at_10": 0.6,
            "map": 0.55, "r_precision": 0.52, "queries": 100, "lone_queries": 2, "nmi": 0.7,
            "pi_ratio": null, "embed_seconds": 1.5, "metric_seconds": 0.25}"#;
        assert_eq!(serde_json::from_str::<Metrics>(old).unwrap(), sample());
        let e = serde_json::from_str::<Metrics>(r#"{"recall@1": 0.5}"#).unwrap_err();
        assert!(e.to_string().contains("map@r"), "{e}");
    }
}
