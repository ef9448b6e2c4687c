//! A model held outside rdml (a PyTorch module on its own device, called from the Python
//! package) attacked and scored on the caller's own images: the request that
//! `rdml.robustness(model, images, labels, …)`, `rdml.attack(model, …)` and `rdml.embed(model, …)`
//! fill. The model is an oracle ([`crate::attack::oracle::External`]); objectives, selections,
//! budgets, defaults and every check of the caller's input live here, with the fields named as
//! the Python keywords.

use crate::attack::oracle::{External, HostModel, Net, Oracle};
use crate::attack::record::{FILE, RobustnessRecord};
use crate::attack::registry::{self, SpecBudget};
use crate::attack::result::AttackResult;
use crate::attack::suite::Context;
use crate::eval::knn::Embeddings;
use crate::out_folder;
use crate::scoring::options::{Resolved, ScoringOptions};
use crate::scoring::{Scoree, Session};
use anyhow::Result;
use burn::tensor::Device;
use std::path::PathBuf;
use std::sync::Arc;

pub use super::images::{Images, check_images};

/// The record's `surrogate` when the surrogate is a model outside rdml (it has no folder).
pub const OUTSIDE_SURROGATE: &str = "(a model outside rdml)";

/// What `out` receives: the suite's record and its page (written by the request above, which
/// renders the page: [`crate::html`] sits above this module).
pub const OUT_FILES: [&str; 2] = [FILE, crate::run_dir::REPORT];

/// The model a request scores: one held outside rdml, or an rdml run folder's network (scored
/// on the caller's images as the outside one is: the same selections, seeds and checks).
pub enum Model {
    Outside(Box<dyn HostModel>),
    Run(PathBuf),
}

impl Model {
    fn differentiable(&self) -> bool {
        match self {
            Model::Outside(m) => m.differentiable(),
            Model::Run(_) => true,
        }
    }

    /// The run folder scored and the digest of its weights (for a model outside rdml, the one
    /// its caller took of its parameters and buffers).
    fn record_of(&self, outside: Option<&String>) -> Result<(PathBuf, Option<String>)> {
        Ok(match self {
            Model::Outside(_) => (PathBuf::new(), outside.cloned()),
            Model::Run(dir) => (dir.clone(), Some(crate::run_dir::model_digest(dir)?)),
        })
    }

    /// The model as an oracle for images of `item` shape `[c, h, w]` on `device`.
    fn oracle(self, item: [usize; 3], device: &Device) -> Result<Arc<dyn Oracle>> {
        Ok(match self {
            Model::Outside(m) => Arc::new(External::new(m, device)),
            Model::Run(dir) => {
                // Images of another shape than the run's data are said by load_model itself.
                let (_, net) = crate::train::load_model(&dir, item, device)
                    .map_err(|e| e.context(format!("model: the run {}", dir.display())))?;
                Arc::new(Net::new(&net, 0))
            }
        })
    }
}

/// How the caller's model is attacked: the Python keywords of `rdml.robustness` and `rdml.attack`.
#[derive(Debug, Clone)]
pub struct ModelScoring {
    /// The budget, the method, the queries and the seed, as every scoring job takes them.
    pub options: ScoringOptions,
    pub repeats: usize,
    /// The images the queries are ranked among (re-identification's gallery); `None`: the
    /// images among themselves, each query's own copy left out.
    pub gallery: Option<Images>,
    /// A folder for the suite's record and report (nothing is written without it).
    pub out: Option<PathBuf>,
    pub progress: bool,
    /// The digest of a model outside rdml (its parameters and buffers), for the record.
    pub model_digest: Option<String>,
    /// The ranks the work is split over (each its share of the batches; `out` written by rank 0).
    pub ranks: crate::ranks::Ranks,
}

impl Default for ModelScoring {
    fn default() -> Self {
        Self {
            options: ScoringOptions::default(),
            repeats: crate::scoring::defaults::REPEATS,
            gallery: None,
            out: None,
            progress: true,
            model_digest: None,
            ranks: Default::default(),
        }
    }
}

/// What the suite gives: its record (as `Run.robustness` returns it), the images it ranked
/// (for the page), and the checked folder to write both to.
pub struct ModelScored {
    pub record: RobustnessRecord,
    pub images: usize,
    pub out: Option<PathBuf>,
}

impl ModelScoring {
    /// The options resolved once, with `repeats` runs; robrank's mode refused with a gallery.
    fn resolve(&self, spec: SpecBudget, repeats: usize) -> Result<Resolved> {
        let options = self.options.resolve(spec, repeats)?;
        crate::ensure_input!(
            !(options.robrank_compat && self.gallery.is_some()),
            "robrank_compat: robrank ranks the test set among itself; it has no gallery to follow (drop one \
             of robrank_compat and gallery)"
        );
        Ok(options)
    }

    /// The session of `model` (attacked) and `surrogate` (the attacker of a transfer attack) on
    /// `images`: their clean embeddings made `batch` at a time. The method is refused when the
    /// model that makes the examples cannot give the gradients it needs.
    fn session<'o>(
        &self,
        options: &'o Resolved,
        (model, surrogate): (Model, Option<Model>),
        images: Images,
        device: &Device,
    ) -> Result<Session<'o>> {
        let transfer = surrogate.is_some();
        crate::ensure_input!(
            !options.method.needs_gradient() || surrogate.as_ref().unwrap_or(&model).differentiable(),
            "method = {:?} needs the {} gradient, and it was declared not differentiable: use method=\"nes\" \
             (a black-box gradient estimate from its outputs alone){}",
            options.method_spec,
            if transfer { "surrogate's" } else { "model's" },
            if transfer {
                ""
            } else {
                ", or a differentiable surrogate= (a transfer attack)"
            }
        );
        let (scored, digest) = model.record_of(self.model_digest.as_ref())?;
        let surrogate_path = surrogate.as_ref().map(|s| match s {
            Model::Run(dir) => dir.clone(),
            Model::Outside(_) => PathBuf::from(OUTSIDE_SURROGATE),
        });
        let (set, gallery) = Images::sets(images, self.gallery.clone())?;
        let context = |m: Model| -> Result<Context> {
            let oracle = m.oracle(set.item_shape(), device)?;
            let ctx = Context::of_ranked(
                oracle,
                &set,
                (options.batch, &self.ranks),
                device,
                options.robrank_compat,
            )?;
            match &gallery {
                Some((g, own)) => ctx.with_gallery(g, own.clone(), options.batch),
                None => Ok(ctx),
            }
        };
        Ok(Session {
            target: context(model)?,
            surrogate: surrogate.map(context).transpose()?,
            options,
            scoree: Scoree {
                model: scored,
                digest,
                surrogate: surrogate_path,
            },
            progress: self.progress,
        })
    }

    /// robrank's ERS suite on the caller's model and images (with `out`, that folder checked
    /// before any work).
    pub fn robustness(
        &self,
        model: Model,
        surrogate: Option<Model>,
        images: Images,
        device: &Device,
    ) -> Result<ModelScored> {
        let options = self.resolve(Default::default(), self.repeats)?;
        // On ranks, rank 0 writes the record and its page.
        let out = self
            .out
            .as_ref()
            .filter(|_| self.ranks.rank() == 0)
            .map(|o| out_folder::check(o, &OUT_FILES))
            .transpose()?;
        let session = self.session(&options, (model, surrogate), images, device)?;
        let record = session.robustness()?.record;
        let images = session.target.n();
        Ok(ModelScored { record, images, out })
    }

    /// One attack (`spec`, as `rdml attack` names it) on the caller's model and images, run
    /// `repeats` times.
    pub fn attack(
        &self,
        spec: &str,
        model: Model,
        surrogate: Option<Model>,
        images: Images,
        device: &Device,
    ) -> Result<Vec<AttackResult>> {
        crate::ensure_input!(
            self.out.is_none(),
            "out: an attack writes no record; out is for the robustness suite"
        );
        let (unit, spec_budget) =
            registry::attack_with_budget(spec).map_err(|e| crate::input_error(format!("spec: {e:#}")))?;
        let options = self.resolve(spec_budget, self.repeats)?;
        let session = self.session(&options, (model, surrogate), images, device)?;
        session.attack(unit.as_ref(), None)
    }

    /// One attack (`spec`) on the caller's model and images, once: its result and its
    /// adversarial images (torchattacks' convention); `every`: every item the attack moves is
    /// attacked, whatever the queries option says.
    pub fn attack_images(
        &self,
        spec: &str,
        models: (Model, Option<Model>),
        images: Images,
        every: bool,
        device: &Device,
    ) -> Result<(AttackResult, Adversarial)> {
        crate::ensure_input!(
            self.out.is_none() && self.repeats == 1,
            "out, repeats: an attack that returns its images runs once and writes no record"
        );
        let (unit, spec_budget) =
            registry::attack_with_budget(spec).map_err(|e| crate::input_error(format!("spec: {e:#}")))?;
        let options = self.resolve(spec_budget, 1)?;
        let of_gallery = unit.moves_ranked() && self.gallery.is_some();
        let moved = match (&self.gallery, of_gallery) {
            (Some(g), true) => g,
            _ => &images,
        };
        let mut adv = Adversarial {
            values: moved.images.clone(),
            shape: moved.shape,
            attacked: vec![],
            of_gallery,
        };
        let session = self.session(&options, models, images, device)?;
        let result = session.attack_once(unit.as_ref(), every, Some(&mut adv))?;
        Ok((result, adv))
    }
}

/// An attack's adversarial images in place of the clean ones they came from: the caller's images
/// (or, for an attack that moves the ranked candidates, its gallery's), and the items moved.
pub struct Adversarial {
    pub values: Vec<f32>,
    pub shape: [usize; 4],
    pub attacked: Vec<usize>,
    pub of_gallery: bool,
}

impl crate::attack::adversarial::AdversarialSink for Adversarial {
    fn add(
        &mut self,
        items: &[usize],
        _labels: &[u32],
        _clean: &burn::tensor::Tensor<4>,
        adv: &burn::tensor::Tensor<4>,
    ) -> Result<()> {
        let per: usize = self.shape[1..].iter().product();
        let v = crate::host::read(&adv.clone().reshape([items.len(), per]))?;
        for (k, &i) in items.iter().enumerate() {
            let row = self
                .values
                .get_mut(i * per..(i + 1) * per)
                .ok_or_else(|| anyhow::anyhow!("attack: item {i} outside the attacked set"))?;
            row.copy_from_slice(&v[k * per..(k + 1) * per]);
            self.attacked.push(i);
        }
        Ok(())
    }
}

/// `runs` of one attack as `rdml attack --json` prints them: the one result, or with repeats
/// every run and each score's mean and sample std.
pub fn attack_json(runs: &[AttackResult]) -> Result<serde_json::Value> {
    Ok(match runs {
        [one] => serde_json::to_value(one)?,
        _ => serde_json::json!({"runs": runs, "mean_std": crate::attack::result::spread(runs)}),
    })
}

/// The embeddings of the caller's images by the caller's model, `batch` at a time; on ranks,
/// each rank embeds its share of the batches and every rank gets them all.
pub fn embed(
    model: Model,
    images: &[f32],
    (shape, batch): ([usize; 4], usize),
    device: &Device,
    ranks: &crate::ranks::Ranks,
) -> Result<Embeddings> {
    crate::ensure_input!(batch >= 1, "batch must be ≥ 1");
    let [n, c, h, w] = shape;
    if let (0, Model::Run(dir)) = (n, &model) {
        // A run says its width without a forward pass: no images, no rows.
        let (exp, _) = crate::train::load_model(dir, [c, h, w], device)?;
        return Embeddings::new(vec![], 0, exp.model.embedding_dim);
    }
    crate::ensure_input!(n >= 1, "images: no image to embed");
    check_images(images, shape)?;
    let oracle = model.oracle([c, h, w], device)?;
    let per = c * h * w;
    let mut data = Vec::with_capacity(n);
    let mut dim = 0;
    let own = ranks.share(n.div_ceil(batch));
    for start in (own.start * batch..(own.end * batch).min(n)).step_by(batch) {
        let m = batch.min(n - start);
        let x = burn::tensor::Tensor::<4>::from_data(
            burn::tensor::TensorData::new(images[start * per..(start + m) * per].to_vec(), [m, c, h, w]),
            &device.clone().without_autodiff(),
        );
        let e = oracle.embed(x)?;
        dim = e.dims()[1];
        data.extend(crate::host::read(&e)?);
        crate::progress::between_batches()?;
    }
    let (data, dim) = ranks.gather_rows(&data, dim)?;
    Embeddings::new(data, n, dim)
}

/// Certified Recall@1 ([`crate::certify`]) of the caller's model on its images (`rdml.certify`):
/// smoothing needs the embeddings alone, so any model — differentiable or not — is certified.
pub fn certify(
    model: Model,
    images: Images,
    gallery: Option<Images>,
    options: &crate::certify::options::CertifyOptions,
    (model_digest, progress): (Option<String>, bool),
    device: &Device,
    ranks: &crate::ranks::Ranks,
) -> Result<crate::certify::record::CertifyRecord> {
    let certification = options.resolve()?;
    let (scored, digest) = model.record_of(model_digest.as_ref())?;
    let (set, gallery) = Images::sets(images, gallery)?;
    let ctx = Context::of_ranked(
        model.oracle(set.item_shape(), device)?,
        &set,
        (options.batch, ranks),
        device,
        false,
    )?;
    let ctx = match gallery {
        Some((g, own)) => ctx.with_gallery(&g, own, options.batch)?,
        None => ctx,
    };
    let mut record = certification.run(&ctx, scored, digest, progress)?;
    record.route = crate::attack::crossing::across(&ctx.ranks, ctx.model.crossed())?;
    Ok(record)
}
