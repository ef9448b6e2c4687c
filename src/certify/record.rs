//! The certification's record: what `rdml certify` keeps in a run folder (`certify.json`, beside
//! `robustness.json`) and prints with `--json`, and what `rdml.certify` returns.

use super::{Certification, Method, QueryCertificate, Smoothing};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The record's name in a run folder.
pub const FILE: &str = crate::run_dir::CERTIFY;

/// One certification of one model. Percentages are of the queries certified (those with another
/// item of their class among the ranked images).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CertifyRecord {
    /// The run folder certified (empty for a model outside rdml).
    #[serde(default, serialize_with = "crate::output::path_text")]
    pub model: PathBuf,
    /// The digest of the weights certified ([`crate::run_dir::model_digest`]).
    #[serde(default)]
    pub model_digest: Option<String>,
    /// The smoothed retrieval certified: `cohen` (the noisy query's top-1 label) or `center`
    /// (the 1-NN of its centre-smoothed embedding); records before centre smoothing are Cohen's.
    #[serde(default = "cohen")]
    pub method: String,
    /// Centre smoothing's Δ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<f64>,
    pub sigma: f32,
    /// Noisy copies per query that picked its label (centre smoothing: its centre, and as many
    /// again checked it), and that bounded its probability (the distances' quantile).
    pub select: usize,
    pub samples: usize,
    pub alpha: f64,
    pub seed: u64,
    /// The queries asked for, those certified and those left out as lone.
    pub queries: usize,
    pub queries_used: usize,
    pub lone: usize,
    /// Certified Recall@1 at each radius asked (ℓ2, pixels of [0, 1] images), keyed by the
    /// radius as written (`"0.25"`).
    pub certified: serde_json::Map<String, serde_json::Value>,
    /// Recall@1 of the smoothed model's answer (the majority label of the noisy copies), without
    /// a certificate.
    pub clean: f64,
    /// Queries that abstained: Cohen's bound at most 1/2, a centre not holding half the mass.
    pub abstained: f64,
    /// The radius of each query certified correct, largest first: the certified Recall@1 at any
    /// radius `r` is the share of the `queries_used` whose radius is at least `r` (the curve the
    /// report draws).
    #[serde(default)]
    pub certified_radii: Vec<f64>,
    pub seconds: f64,
    /// Each query's certificate, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_query: Option<Vec<QueryCertificate>>,
    /// What crossed between rdml and a model held outside it (none for rdml's own networks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<crate::attack::oracle::Crossed>,
}

fn cohen() -> String {
    "cohen".into()
}

/// What the record says was certified, and how.
pub struct Setting<'a> {
    pub model: PathBuf,
    pub model_digest: Option<String>,
    pub smoothing: &'a Smoothing,
    pub seed: u64,
    pub queries: usize,
    pub radii: &'a [f64],
    pub per_query: bool,
    pub seconds: f64,
}

impl CertifyRecord {
    /// The certified Recall@1 (percent) at radius `r`, from [`Self::certified_radii`].
    pub fn certified_at(&self, r: f64) -> f64 {
        let n = self.queries_used.saturating_sub(self.lone).max(1) as f64;
        100.0 * self.certified_radii.iter().filter(|&&x| x >= r).count() as f64 / n
    }

    /// The record of `c`, certified as `s` says.
    pub fn of(c: Certification, s: Setting) -> Self {
        let n = c.rows.len().max(1) as f64;
        let share = |f: &dyn Fn(&QueryCertificate) -> bool| 100.0 * c.rows.iter().filter(|q| f(q)).count() as f64 / n;
        let certified = s
            .radii
            .iter()
            .map(|&r| (format!("{r}"), serde_json::Value::from(share(&|q| q.certified_at(r)))))
            .collect();
        Self {
            model: s.model,
            model_digest: s.model_digest,
            method: match s.smoothing.method {
                Method::Cohen => "cohen",
                Method::Center { .. } => "center",
            }
            .into(),
            delta: match s.smoothing.method {
                Method::Cohen => None,
                Method::Center { delta } => Some(delta),
            },
            sigma: s.smoothing.sigma,
            select: s.smoothing.select,
            samples: s.smoothing.samples,
            alpha: s.smoothing.alpha,
            seed: s.seed,
            queries: s.queries,
            queries_used: c.queries,
            lone: c.lone,
            certified,
            clean: share(&|q| q.majority == q.label),
            abstained: share(&|q| q.abstained),
            certified_radii: {
                let mut r: Vec<f64> = c
                    .rows
                    .iter()
                    .filter(|q| q.selected == q.label)
                    .filter_map(|q| q.radius)
                    .collect();
                r.sort_by(|a, b| b.total_cmp(a));
                r
            },
            seconds: s.seconds,
            per_query: s.per_query.then_some(c.rows),
            route: None,
        }
    }
}

/// A certificate as a record holds it. Records from before centre smoothing (Cohen's alone) have no
/// `abstained`: there a query abstained exactly when it has no radius.
#[derive(Deserialize)]
pub(super) struct StoredCertificate {
    item: usize,
    label: u32,
    selected: u32,
    count: u64,
    p_lower: f64,
    radius: Option<f64>,
    majority: u32,
    abstained: Option<bool>,
    #[serde(default)]
    margin: Option<f64>,
    #[serde(default)]
    least_bound: Option<f64>,
}

impl From<StoredCertificate> for QueryCertificate {
    fn from(s: StoredCertificate) -> Self {
        QueryCertificate {
            abstained: s.abstained.unwrap_or(s.radius.is_none()),
            item: s.item,
            label: s.label,
            selected: s.selected,
            count: s.count,
            p_lower: s.p_lower,
            radius: s.radius,
            majority: s.majority,
            margin: s.margin,
            least_bound: s.least_bound,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The curve the report draws (from each certified query's radius) is the record's
    /// certified Recall@1 at every radius asked, and counts only queries certified correct.
    #[test]
    fn the_curve_is_the_certified_recall_at_every_radius() {
        let q = |item: usize, label: u32, selected: u32, radius: Option<f64>| QueryCertificate {
            item,
            label,
            selected,
            count: 0,
            p_lower: 0.0,
            radius,
            majority: selected,
            abstained: radius.is_none(),
            margin: None,
            least_bound: None,
        };
        let rows = vec![
            q(0, 1, 1, Some(0.3)),
            q(1, 1, 1, Some(0.05)),
            q(2, 2, 1, Some(0.9)), // certified, but of the wrong label
            q(3, 2, 2, None),      // abstained
            q(4, 0, 0, Some(0.6)),
        ];
        let smoothing = Smoothing {
            sigma: 0.25,
            select: 10,
            samples: 100,
            alpha: 0.001,
            method: Method::Cohen,
        };
        let radii = [0.0, 0.1, 0.25, 0.5, 1.0];
        let rec = CertifyRecord::of(
            Certification {
                rows,
                lone: 1,
                queries: 6,
            },
            Setting {
                model: PathBuf::new(),
                model_digest: None,
                smoothing: &smoothing,
                seed: 0,
                queries: 6,
                radii: &radii,
                per_query: false,
                seconds: 0.0,
            },
        );
        assert_eq!(rec.certified_radii, vec![0.6, 0.3, 0.05]);
        for r in radii {
            let asked = rec.certified[&format!("{r}")].as_f64().unwrap();
            assert!(
                (rec.certified_at(r) - asked).abs() < 1e-9,
                "{r}: {} vs {asked}",
                rec.certified_at(r)
            );
        }
        assert_eq!(rec.certified_at(0.25), 40.0);
    }

    /// A row written before centre smoothing has no `abstained`: it abstained where it has no
    /// radius. A centre-smoothing row keeps its margin and least bound; a Cohen row writes neither.
    #[test]
    fn rows_read_back_as_written_and_older_rows_abstain_by_their_radius() {
        let old = r#"[{"item":3,"label":1,"selected":1,"count":40,"p_lower":0.3,"radius":null,"majority":1},
                      {"item":4,"label":1,"selected":1,"count":99,"p_lower":0.9,"radius":0.3,"majority":1}]"#;
        let rows: Vec<QueryCertificate> = serde_json::from_str(old).unwrap();
        assert!(rows[0].abstained && !rows[1].abstained);
        assert!(!serde_json::to_string(&rows[1]).unwrap().contains("margin"));
        let centre = QueryCertificate {
            margin: Some(0.2),
            least_bound: Some(0.5),
            radius: None,
            ..rows[1].clone()
        };
        let back: QueryCertificate = serde_json::from_str(&serde_json::to_string(&centre).unwrap()).unwrap();
        assert_eq!(back, centre);
        assert!(!back.abstained);
    }
}
