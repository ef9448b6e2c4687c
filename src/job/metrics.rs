//! Metrics of embeddings the caller holds (Python's `rdml.metrics`): `eval --json`'s metrics of
//! query embeddings with their labels, each query against the others or against a gallery.

use crate::eval::knn::Embeddings;
use crate::eval::{EvalConfig, Metrics};
use anyhow::Result;
use burn::tensor::Device;

/// Embeddings `[n, dim]` (row-major) with a label each, of any integers.
#[derive(Debug, Clone, Default)]
pub struct Labelled {
    pub values: Vec<f32>,
    pub n: usize,
    pub labels: Vec<i64>,
}

/// How embeddings the caller gives are compared (`distance=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricDistance {
    #[default]
    Euclidean,
    /// Rows scaled to unit length first (cosine ranking is Euclidean ranking on the sphere).
    Cosine,
}

/// The metrics asked for.
#[derive(Debug, Clone)]
pub struct MetricsJob {
    pub query: Labelled,
    pub dim: usize,
    /// The items the queries are ranked among; `None`: the queries among themselves.
    pub gallery: Option<Labelled>,
    pub distance: MetricDistance,
    pub eval: EvalConfig,
    /// NMI's k-means seed.
    pub seed: u64,
}

impl MetricsJob {
    pub fn run(mut self, device: &Device) -> Result<Metrics> {
        self.eval.validate().map_err(|e| crate::input_error(format!("{e:#}")))?;
        let cosine = self.distance == MetricDistance::Cosine;
        crate::ensure_input!(
            self.dim > 0,
            "embeddings: rows of 0 values; each row needs at least one"
        );
        crate::ensure_input!(
            self.query.n >= if self.gallery.is_some() { 1 } else { 2 },
            "{}",
            if self.gallery.is_some() {
                "embeddings: no query rows".to_string()
            } else {
                format!(
                    "embeddings: {} row(s); each query is ranked against the others, so at least 2 are needed",
                    self.query.n
                )
            }
        );
        finite(&self.query.values, self.dim, "embeddings")?;
        if let Some(g) = &self.gallery {
            finite(&g.values, self.dim, "gallery")?;
            let g_dim = g.values.len() / g.n.max(1);
            crate::ensure_input!(
                g.n == 0 || g_dim == self.dim,
                "gallery: {g_dim} dimensions, the queries have {}",
                self.dim
            );
        }
        crate::ensure_input!(
            self.query.labels.len() == self.query.n,
            "labels: {} labels for {} embeddings",
            self.query.labels.len(),
            self.query.n
        );
        if cosine {
            unit_rows(&mut self.query.values, self.dim);
            if let Some(g) = self.gallery.as_mut() {
                unit_rows(&mut g.values, self.dim);
            }
        }
        let mut ids = crate::data::labelled::DenseIds::default();
        let ql = ids.ids(&self.query.labels);
        let q = Embeddings::new(self.query.values, self.query.n, self.dim)?;
        let gallery = match self.gallery {
            Some(g) => {
                crate::ensure_input!(
                    g.labels.len() == g.n,
                    "gallery_labels: {} labels for {} gallery embeddings",
                    g.labels.len(),
                    g.n
                );
                let gl = ids.ids(&g.labels);
                Some((Embeddings::new(g.values, g.n, self.dim)?, gl))
            }
            None => None,
        };
        let gallery = gallery.as_ref().map(|(e, l)| (e, l.as_slice()));
        crate::eval::score_given(&q, &ql, gallery, &self.eval, self.seed, device)
    }
}

/// Rows scaled to unit length (cosine ranking = Euclidean ranking on the unit sphere).
fn unit_rows(v: &mut [f32], dim: usize) {
    for row in v.chunks_exact_mut(dim.max(1)) {
        let n = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        if n > 0.0 {
            row.iter_mut().for_each(|x| *x /= n);
        }
    }
}

/// Every value of `values` (rows of `dim`) finite: a NaN would rank arbitrarily and every metric
/// would look complete.
fn finite(values: &[f32], dim: usize, what: &str) -> Result<()> {
    match values.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(crate::input_error(format!(
            "{what}: contains NaN or infinite values (row {}, column {})",
            i / dim.max(1),
            i % dim.max(1)
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows without values are the caller's error, not a panic in a kernel.
    #[test]
    fn rows_of_no_values_are_refused() {
        let job = MetricsJob {
            query: Labelled {
                values: vec![],
                n: 4,
                labels: vec![0, 0, 1, 1],
            },
            dim: 0,
            gallery: None,
            distance: MetricDistance::Euclidean,
            eval: EvalConfig::default(),
            seed: 0,
        };
        let e = job.run(&crate::default_device()).unwrap_err();
        assert!(e.chain().any(|c| c.is::<crate::InputError>()), "{e:#}");
        assert!(format!("{e:#}").contains("rows of 0 values"), "{e:#}");
    }
}
