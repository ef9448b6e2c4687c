//! What every attack of a suite needs: the model in evaluation mode, the test set, its clean
//! embeddings (host and device copies) and the distance helpers the selections use.
//!
//! Two index spaces: *items* are the test set's images, the ones an attack moves (queries; the
//! candidates of CA± when the set ranks itself); *ranked* indices are the images a query's list
//! holds. Without a gallery the two are one set, and a query's own clean copy is left out of its
//! list (leave-one-out, robrank's protocol). With a gallery (re-identification's query/gallery
//! split) the lists hold the gallery alone and nothing is left out.

use super::oracle::{Net, Oracle};
use crate::data::{ImageSet, loader};
use crate::eval::batch_tensor;
use crate::eval::knn::{Embeddings, top_k};
use crate::eval::metrics::{self, QueryRow, Retrieval};
use crate::loss::distance::Distance;
use crate::model::EmbeddingNet;
use crate::ranks::Ranks;
use anyhow::{Context as _, Result};
use burn::tensor::{Device, Tensor, TensorData};
use std::sync::Arc;

/// The test set, its clean embeddings and the model: what every attack needs.
pub struct Context {
    /// The attacked model, as an oracle: an rdml network or a model held outside rdml.
    pub model: Arc<dyn Oracle>,
    pub set: ImageSet,
    pub clean: Embeddings,
    /// The ranked images when they are not the test set itself.
    pub gallery: Option<Gallery>,
    /// The ranked images' clean embeddings on the device, and their squared norms.
    pub(crate) cand: Tensor<2>,
    pub(crate) cand_sq: Tensor<2>,
    pub device: Device,
    /// Reproduce robrank's GTM target index and LTM self mask.
    pub robrank_compat: bool,
    /// The model's own distance, in which ES:D is reported (robrank: `1 − cos` for its cosine
    /// metric `C`, Euclidean for `N` and `E`). The selections and objectives rank in Euclidean
    /// distance, which orders unit vectors as the cosine distance does.
    pub distance: Distance,
    /// The ranks the work is split over: each embeds and attacks its share of the batches.
    pub ranks: Ranks,
}

/// A gallery apart from the queries: its images (CA± moves them), their clean embeddings, and
/// each query's own image among them, if it is there ([`crate::data::labelled::own_copies`]).
pub struct Gallery {
    pub set: ImageSet,
    pub clean: Embeddings,
    pub own: Vec<Option<usize>>,
}

/// The batch of the clean embeddings for [`Context::new`]; the pipelines pass their `--batch`.
const CLEAN_BATCH: usize = 256;

impl Context {
    pub fn new(model: &EmbeddingNet, set: &ImageSet, device: &Device, robrank_compat: bool) -> Result<Self> {
        Self::embedded_by(model, set, CLEAN_BATCH, device, robrank_compat)
    }

    /// The context with the clean embeddings made `batch` items at a time: a device that can
    /// attack `--batch` items at once can embed them, so a smaller `--batch` also gets a run
    /// that ran out of memory through. The embeddings do not depend on `batch`.
    pub fn embedded_by(
        model: &EmbeddingNet,
        set: &ImageSet,
        batch: usize,
        device: &Device,
        robrank_compat: bool,
    ) -> Result<Self> {
        Self::of(Arc::new(Net::new(model, 0)), set, batch, device, robrank_compat)
    }

    /// The context of any oracle on `set`, its clean embeddings made `batch` items at a time.
    pub fn of(
        model: Arc<dyn Oracle>,
        set: &ImageSet,
        batch: usize,
        device: &Device,
        robrank_compat: bool,
    ) -> Result<Self> {
        Self::of_ranked(model, set, (batch, &Ranks::alone()), device, robrank_compat)
    }

    /// [`Context::of`] on `ranks`: each rank embeds its share of the batches, and every rank
    /// holds them all.
    pub fn of_ranked(
        model: Arc<dyn Oracle>,
        set: &ImageSet,
        (batch, ranks): (usize, &Ranks),
        device: &Device,
        robrank_compat: bool,
    ) -> Result<Self> {
        let device = device.clone().without_autodiff();
        let clean = embed_share(model.as_ref(), set, batch.max(1), &device, ranks)?;
        if ranks.rank() == 0 {
            // Its warning is rank 0's to tell: the others need not ask the model again.
            check_answers_alike(model.as_ref(), set, &clean, &device)?;
        }
        let (cand, cand_sq) = on_device(&clean, &device);
        Ok(Self {
            model,
            set: set.clone(),
            clean,
            gallery: None,
            cand,
            cand_sq,
            device,
            robrank_compat,
            distance: Distance::Euclidean,
            ranks: ranks.clone(),
        })
    }

    /// The same context ranking the queries among `gallery` (embedded `batch` at a time) rather
    /// than among themselves, query `i` left out of the gallery at `own[i]` where it has one.
    pub fn with_gallery(mut self, gallery: &ImageSet, own: Vec<Option<usize>>, batch: usize) -> Result<Self> {
        anyhow::ensure!(
            own.len() == self.n(),
            "{} own places for {} queries",
            own.len(),
            self.n()
        );
        let clean = embed_share(self.model.as_ref(), gallery, batch.max(1), &self.device, &self.ranks)?;
        anyhow::ensure!(
            clean.dim == self.clean.dim,
            "the model embeds the gallery in {} dimensions and the queries in {}",
            clean.dim,
            self.clean.dim
        );
        (self.cand, self.cand_sq) = on_device(&clean, &self.device);
        self.gallery = Some(Gallery {
            set: gallery.clone(),
            clean,
            own,
        });
        Ok(self)
    }

    /// The same context reporting ES:D in `distance` (the run's `loss.distance`).
    pub fn with_distance(mut self, distance: Distance) -> Self {
        self.distance = distance;
        self
    }

    /// Items in the test set.
    pub fn n(&self) -> usize {
        self.clean.n
    }

    /// The ranked images' set: the gallery, or the test set itself.
    pub fn ranked_set(&self) -> &ImageSet {
        self.gallery.as_ref().map_or(&self.set, |g| &g.set)
    }

    /// The ranked images' clean embeddings.
    pub fn ranked_clean(&self) -> &Embeddings {
        self.gallery.as_ref().map_or(&self.clean, |g| &g.clean)
    }

    /// The ranked images' labels.
    pub fn ranked_labels(&self) -> &[u32] {
        &self.ranked_set().labels
    }

    /// Images in a query's list.
    pub fn ranked_n(&self) -> usize {
        self.ranked_clean().n
    }

    /// Item `i`'s own place in the lists, left out of its own: `i` without a gallery, its own
    /// image's row in a gallery that holds it.
    pub fn own(&self, i: usize) -> Option<usize> {
        match &self.gallery {
            None => Some(i),
            Some(g) => g.own.get(i).copied().flatten(),
        }
    }

    /// The top 1 % of a ranking (at least one item): where CA− and QA− draw their targets.
    pub fn topmost(&self) -> usize {
        ((0.01 * self.ranked_n() as f64) as usize).max(1)
    }

    pub(crate) fn rows_host(&self, idx: &[usize]) -> Vec<f32> {
        idx.iter().flat_map(|&i| self.clean.row(i).iter().copied()).collect()
    }

    /// Clean embeddings of items `idx` as a device tensor `[idx.len(), d]`.
    pub(crate) fn rows(&self, idx: &[usize]) -> Tensor<2> {
        Tensor::<2>::from_data(
            TensorData::new(self.rows_host(idx), [idx.len(), self.clean.dim]),
            &self.device,
        )
    }

    /// Clean embeddings of ranked images `idx` as a device tensor `[idx.len(), d]`.
    pub(crate) fn ranked_rows(&self, idx: &[usize]) -> Tensor<2> {
        let r = self.ranked_clean();
        let host = idx.iter().flat_map(|&i| r.row(i).iter().copied()).collect();
        Tensor::<2>::from_data(TensorData::new(host, [idx.len(), r.dim]), &self.device)
    }

    /// Euclidean distances of host row `e` to every ranked image.
    pub fn host_dists(&self, e: &[f32]) -> Vec<f32> {
        use rayon::prelude::*;
        let r = self.ranked_clean();
        (0..r.n).into_par_iter().map(|j| euclid(r.row(j), e)).collect()
    }

    /// Item `i`'s `k` nearest clean ranked images (its own copy left out), nearest first.
    pub fn neighbours(&self, i: usize, k: usize) -> Vec<(f32, u32)> {
        top_k(&self.host_dists(self.clean.row(i)), k, self.own(i))
    }

    /// The `k` queries nearest to ranked image `c`, nearest first: where CA− draws the query of a
    /// gallery's candidate.
    pub fn queries_near(&self, c: usize, k: usize) -> Vec<(f32, u32)> {
        use rayon::prelude::*;
        let e = self.ranked_clean().row(c);
        let d: Vec<f32> = (0..self.n())
            .into_par_iter()
            .map(|j| euclid(self.clean.row(j), e))
            .collect();
        top_k(&d, k, None)
    }

    /// Retrieval metrics of the embeddings `emb` of `items` (one row each) against the clean
    /// ranked images, each item's own clean copy left out when it is among them, and each item's own values.
    pub(crate) fn retrieval(
        &self,
        items: &[usize],
        emb: &Embeddings,
        ks: &[usize],
    ) -> Result<(Retrieval, Vec<Option<QueryRow>>)> {
        let labels: Vec<u32> = items.iter().map(|&i| self.set.labels[i]).collect();
        let own: Vec<Option<usize>> = items.iter().map(|&i| self.own(i)).collect();
        metrics::retrieval_rows(
            emb,
            &labels,
            self.ranked_clean(),
            self.ranked_labels(),
            Some(&own),
            ks,
            &self.device,
        )
    }

    /// The clean embeddings of `items` as host rows.
    pub(crate) fn clean_of(&self, items: &[usize]) -> Result<Embeddings> {
        Embeddings::new(self.rows_host(items), items.len(), self.clean.dim)
    }
}

/// Clean embeddings on the device `[n, d]`, and their squared norms `[1, n]`.
fn on_device(clean: &Embeddings, device: &Device) -> (Tensor<2>, Tensor<2>) {
    let cand = Tensor::<2>::from_data(TensorData::new(clean.data.clone(), [clean.n, clean.dim]), device);
    let cand_sq = cand.clone().powi_scalar(2).sum_dim(1).transpose();
    (cand, cand_sq)
}

/// The embeddings of images `x` by `model`, read back to the host.
pub fn embed_tensor(model: &dyn Oracle, x: Tensor<4>) -> Result<Vec<f32>> {
    crate::host::read(&model.embed(x)?).context("reading the attacked embeddings")
}

/// Every item of `set` embedded by `model`, `batch` at a time (a Ctrl-C is heard between
/// batches).
pub fn embed_set(model: &dyn Oracle, set: &ImageSet, batch: usize, device: &Device) -> Result<Embeddings> {
    embed_share(model, set, batch, device, &Ranks::alone())
}

/// [`embed_set`] across `ranks`: each rank embeds its share of the batches (the batches of a
/// single process, so each row is what it would be there), and every rank gets them all.
pub fn embed_share(
    model: &dyn Oracle,
    set: &ImageSet,
    batch: usize,
    device: &Device,
    ranks: &Ranks,
) -> Result<Embeddings> {
    let batches = loader::sequential(set.len(), batch);
    let own = batches[ranks.share(batches.len())].to_vec();
    let mut data = Vec::new();
    let mut dim = 0;
    for b in loader::prefetch(set.clone(), own, None, 2) {
        let e = model.embed(batch_tensor(&b?, device))?;
        dim = e.dims()[1];
        data.extend(crate::host::read(&e)?);
        crate::progress::between_batches()?;
    }
    let (data, dim) = ranks.gather_rows(&data, dim)?;
    Embeddings::new(data, set.len(), dim)
}

/// Images embedded a second time to tell a model that answers differently to the same images.
const RECHECKED: usize = 8;

/// Warns when `model` answers differently to the first images of `set` than it did for `clean`
/// (dropout or noise left on, a model that is not deterministic): the clean ranking and the
/// attacked one would then be two draws of it, and every score a draw's. A tolerance of 1e-3 of
/// the largest value lets through what another batch size or a GPU's order of sums changes.
fn check_answers_alike(model: &dyn Oracle, set: &ImageSet, clean: &Embeddings, device: &Device) -> Result<()> {
    let items: Vec<usize> = (0..set.len().min(RECHECKED)).collect();
    if items.is_empty() || clean.dim == 0 {
        return Ok(());
    }
    let again = embed_tensor(model, batch_tensor(&loader::load_batch(set, &items, None)?, device))?;
    let first = &clean.data[..again.len().min(clean.data.len())];
    let scale = first.iter().fold(0f32, |m, v| m.max(v.abs())).max(f32::MIN_POSITIVE);
    let diff = first.iter().zip(&again).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    if diff > 1e-3 * scale {
        crate::notes::warn(format!(
            "model: answers differently to the same images: the first {} images embedded twice differ by up \
             to {diff:.3e} (largest value {scale:.3e}); it is random (dropout or noise left on) or not \
             deterministic, so the clean ranking and the attacked one are two draws of it and every score is \
             one draw's",
            items.len()
        ));
    }
    Ok(())
}

/// Euclidean distance of two host embeddings.
pub(crate) fn euclid(a: &[f32], b: &[f32]) -> f32 {
    Distance::Euclidean.host(a, b)
}

/// A uniformly random index in `0..n` other than `own` (W = 1 / M = 1 selections).
pub(crate) fn random_other(rng: &mut rand_chacha::ChaCha8Rng, n: usize, own: Option<usize>) -> usize {
    use rand::Rng;
    loop {
        let j = rng.random_range(0..n);
        if Some(j) != own || n < 2 {
            return j;
        }
    }
}

/// A random item among the `topmost` nearest neighbours `nb` (the top 1 %), or `own` if none.
pub(crate) fn from_top(rng: &mut rand_chacha::ChaCha8Rng, nb: &[(f32, u32)], topmost: usize, own: usize) -> usize {
    use rand::seq::IndexedRandom;
    nb[..topmost.min(nb.len())]
        .choose(rng)
        .map(|x| x.1 as usize)
        .unwrap_or(own)
}
