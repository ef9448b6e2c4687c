//! Embedding models: a backbone, ImageNet normalisation inside the model (so attack budgets are in
//! pixel units), and an optional L2 normalisation of the embedding.

pub mod c2f2;
pub mod checkpoint;
pub mod import;
pub mod layout;
pub mod multi_bn;
mod pickle_scan;
pub mod resnet;
pub mod weights;
pub mod weights_file;

/// The largest `model.embedding_dim` accepted (2048 × 16384 floats: a 128 MiB last layer).
pub const MAX_EMBEDDING_DIM: usize = 16384;

use anyhow::{Result, ensure};
use burn::module::Module;
use burn::tensor::{Device, Tensor};
use c2f2::C2f2;
use multi_bn::MultiBatchNorm;
use resnet::{BasicBlock, BnSpec, Bottleneck, ResNet};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arch {
    C2f2,
    Resnet18,
    Resnet50,
}

impl std::str::FromStr for Arch {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        serde_json::from_value(serde_json::Value::String(s.into()))
            .map_err(|_| anyhow::anyhow!("{s:?}: not an architecture (c2f2, resnet18, resnet50)"))
    }
}

/// The `[model]` table of an experiment config.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub arch: Arch,
    #[serde(default = "default_embedding")]
    pub embedding_dim: usize,
    /// L2-normalise the embedding (robrank's `N` and `C` metrics; the papers' unit sphere).
    #[serde(default = "crate::field::yes")]
    pub l2_normalize: bool,
    /// Normalise inputs with ImageNet mean/std inside the model; default: on for ResNets.
    #[serde(default)]
    pub imagenet_norm: Option<bool>,
    /// Per-channel mean and standard deviation the inputs are normalised with inside the model,
    /// in place of ImageNet's: what a model trained elsewhere saw (e.g. timm's 0.5, 0.5, 0.5);
    /// both or neither.
    #[serde(default)]
    pub input_mean: Option<Vec<f32>>,
    #[serde(default)]
    pub input_std: Option<Vec<f32>>,
    /// torchvision ImageNet weights (`.pth` or `.safetensors`) for the ResNet backbone.
    #[serde(default)]
    pub pretrained: Option<PathBuf>,
    /// Frozen batch norm (running statistics always; robrank's and Roth's ResNet setting).
    #[serde(default)]
    pub frozen_bn: bool,
    /// Batch-norm parameter sets per layer (MDProp/AdvProp use more than one; set 0 is clean).
    #[serde(default = "one")]
    pub bn_sets: usize,
}

fn default_embedding() -> usize {
    512
}
fn one() -> usize {
    1
}

impl ModelConfig {
    pub fn validate(&self) -> Result<()> {
        // The papers use 64–512; the bound keeps the last layer's weights (and Adam's two
        // moments of them) within memory instead of aborting the process on an allocation.
        ensure!(
            (1..=MAX_EMBEDDING_DIM).contains(&self.embedding_dim),
            "model.embedding_dim must be in 1..={MAX_EMBEDDING_DIM}, got {}",
            self.embedding_dim
        );
        ensure!(
            self.arch != Arch::C2f2 || self.bn_sets == 1,
            "model.bn_sets = {}: C2F2 has no batch norm, so it must be 1",
            self.bn_sets
        );
        ensure!(
            (1..=8).contains(&self.bn_sets),
            "model.bn_sets must be in 1..=8, got {}",
            self.bn_sets
        );
        match (&self.input_mean, &self.input_std) {
            (Some(m), Some(s)) => {
                ensure!(
                    m.len() == s.len() && !m.is_empty(),
                    "model.input_mean has {} values and model.input_std {}: give one per image channel",
                    m.len(),
                    s.len()
                );
                ensure!(
                    s.iter().all(|v| v.is_finite() && *v > 0.0) && m.iter().all(|v| v.is_finite()),
                    "model.input_std must be positive and model.input_mean finite, got {m:?} / {s:?}"
                );
                ensure!(
                    self.imagenet_norm != Some(true),
                    "model.input_mean/input_std replace the ImageNet normalisation: leave model.imagenet_norm unset"
                );
            }
            (None, None) => {}
            _ => anyhow::bail!("model.input_mean and model.input_std go together: give both or neither"),
        }
        if self.pretrained.is_some() {
            ensure!(
                self.arch != Arch::C2f2,
                "model.pretrained applies to ResNet backbones only"
            );
        }
        Ok(())
    }
}

#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant)] // one model per process; boxing would change parameter paths
pub enum Backbone {
    C2f2(C2f2),
    Resnet18(ResNet<BasicBlock>),
    Resnet50(ResNet<Bottleneck>),
}

#[derive(Module, Debug)]
pub struct EmbeddingNet {
    pub backbone: Backbone,
    pub l2_normalize: bool,
    pub imagenet_norm: bool,
    /// `model.input_mean`/`input_std`, which take the place of ImageNet's; not a parameter
    /// (the config carries it), so checkpoints keep their layout.
    #[module(skip)]
    pub input_norm: Option<(Vec<f32>, Vec<f32>)>,
}

const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// Draws every lazily initialised parameter now. burn initialises a parameter on its first use,
/// so without this the weights would be drawn during the first forward pass, outside
/// [`crate::seeded`]'s lock, and a concurrent draw elsewhere (parallel tests, a user's worker
/// threads) would change them.
struct Materialise;

impl burn::module::ModuleVisitor for Materialise {
    fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<D>>) {
        let _ = param.val();
    }
}

impl EmbeddingNet {
    /// Builds the model for inputs of shape `in_shape = [c, h, w]`, loading pretrained weights
    /// when the config names them. The weights are drawn on the CPU and moved to `device`, so
    /// that a seed (see [`crate::seeded`]) gives the same model on every device.
    pub fn new(cfg: &ModelConfig, in_shape: [usize; 3], device: &Device) -> Result<Self> {
        let host = match device.is_autodiff() {
            true => crate::default_device().autodiff(),
            false => crate::default_device(),
        };
        let net = Self::build(cfg, in_shape, &host)?;
        // `fork`, not `to_device`: the moved parameters must stay leaves that gradients reach.
        Ok(if host == *device { net } else { net.fork(device) })
    }

    fn build(cfg: &ModelConfig, in_shape: [usize; 3], device: &Device) -> Result<Self> {
        cfg.validate()?;
        let bn = BnSpec {
            sets: cfg.bn_sets,
            frozen: cfg.frozen_bn,
        };
        let backbone = match cfg.arch {
            Arch::C2f2 => {
                check_c2f2_size(in_shape)?;
                Backbone::C2f2(C2f2::new(in_shape, cfg.embedding_dim, device))
            }
            Arch::Resnet18 => {
                let mut m = ResNet::<BasicBlock>::new(in_shape[0], [2, 2, 2, 2], cfg.embedding_dim, bn, device);
                if let Some(p) = &cfg.pretrained {
                    m = weights::load_torchvision(m, p, device)?;
                }
                Backbone::Resnet18(m)
            }
            Arch::Resnet50 => {
                let mut m = ResNet::<Bottleneck>::new(in_shape[0], [3, 4, 6, 3], cfg.embedding_dim, bn, device);
                if let Some(p) = &cfg.pretrained {
                    m = weights::load_torchvision(m, p, device)?;
                }
                Backbone::Resnet50(m)
            }
        };
        let input_norm = cfg.input_mean.clone().zip(cfg.input_std.clone());
        let imagenet_norm = input_norm.is_none() && cfg.imagenet_norm.unwrap_or(cfg.arch != Arch::C2f2);
        ensure!(
            !imagenet_norm || in_shape[0] == 3,
            "model.imagenet_norm needs 3-channel images, got {}",
            in_shape[0]
        );
        if let Some((m, _)) = &input_norm {
            ensure!(
                m.len() == in_shape[0],
                "model.input_mean has {} values for {}-channel images",
                m.len(),
                in_shape[0]
            );
        }
        let net = Self {
            backbone,
            l2_normalize: cfg.l2_normalize,
            imagenet_norm,
            input_norm,
        };
        net.visit(&mut Materialise);
        Ok(net)
    }

    /// The model that infers with batch-norm set `k` in place of the clean set 0 (MDProp §5's
    /// ablation of inference with an auxiliary set): every evaluation, attack and export of the
    /// returned model uses set `k`.
    pub fn with_inference_bn_set(self, k: usize) -> Result<Self> {
        let sets = match &self.backbone {
            Backbone::C2f2(_) => 1,
            Backbone::Resnet18(m) => m.bn1.num_sets(),
            Backbone::Resnet50(m) => m.bn1.num_sets(),
        };
        ensure!(
            k < sets,
            "batch-norm set {k}: the model has {sets} batch-norm set(s) (0 to {}){}",
            sets - 1,
            if matches!(self.backbone, Backbone::C2f2(_)) {
                "; C2F2 has no batch norm"
            } else {
                ""
            }
        );
        let swap = move |bn: MultiBatchNorm| bn.swap_into_main(k);
        let backbone = match self.backbone {
            Backbone::Resnet18(m) => Backbone::Resnet18(m.map_bns(&swap)),
            Backbone::Resnet50(m) => Backbone::Resnet50(m.map_bns(&swap)),
            c => c,
        };
        Ok(Self { backbone, ..self })
    }

    /// Embeds images in [0, 1] using batch-norm set 0 (the clean set).
    pub fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        self.forward_set(x, 0)
    }

    /// Embeds images with batch-norm parameter set `set`.
    pub fn forward_set(&self, x: Tensor<4>, set: usize) -> Tensor<2> {
        let norm = match &self.input_norm {
            Some((m, s)) => Some((m.as_slice(), s.as_slice())),
            None => self.imagenet_norm.then_some((&IMAGENET_MEAN[..], &IMAGENET_STD[..])),
        };
        let x = match norm {
            Some((m, s)) => {
                let device = x.device();
                let c = m.len();
                let mean = Tensor::<1>::from_floats(m, &device).reshape([1, c, 1, 1]);
                let std = Tensor::<1>::from_floats(s, &device).reshape([1, c, 1, 1]);
                (x - mean) / std
            }
            None => x,
        };
        let e = match &self.backbone {
            Backbone::C2f2(m) => m.forward(x),
            Backbone::Resnet18(m) => m.forward(x, set),
            Backbone::Resnet50(m) => m.forward(x, set),
        };
        if self.l2_normalize { l2_normalize(e) } else { e }
    }

    /// Saves the weights as safetensors, atomically (temporary file, then rename), with the
    /// same permissions as the run's other files.
    pub fn save(&self, path: &Path) -> Result<()> {
        let bytes = self
            .to_bytes()
            .map_err(|e| anyhow::anyhow!("saving {}: {e}", path.display()))?;
        crate::atomic::write_atomic(path, &bytes)
    }

    /// The weights as the bytes of a safetensors file (the same tensors: the same bytes).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        use burn::store::{ModuleSnapshot, SafetensorsStore};
        let mut store = SafetensorsStore::from_bytes(None);
        self.save_into(&mut store).map_err(|e| anyhow::anyhow!("{e}"))?;
        let bytes = store.get_bytes().map_err(|e| anyhow::anyhow!("{e}"))?;
        canonical_header(bytes)
    }

    /// Loads weights saved by [`save`](Self::save) into a model of the same configuration,
    /// refusing a damaged file or non-finite weights (see [`weights_file`]).
    pub fn load(mut self, path: &Path) -> Result<Self> {
        use burn::store::{ModuleSnapshot, SafetensorsStore};
        let bytes = weights_file::read_checked(path)?;
        let mut store = SafetensorsStore::from_bytes(Some(bytes));
        let r = self.load_from(&mut store).map_err(|e| {
            anyhow::anyhow!(
                "{}: the weights do not fit the model that the run's config.toml describes: {e}",
                path.display()
            )
        })?;
        ensure!(
            r.errors.is_empty() && r.missing.is_empty(),
            "{}: weights do not match the model of the run's config.toml (missing: {:?}; errors: {:?})",
            path.display(),
            r.missing.iter().map(|m| &m.0).take(8).collect::<Vec<_>>(),
            r.errors.iter().take(8).collect::<Vec<_>>()
        );
        Ok(self)
    }
}

/// `x / max(‖x‖₂, 1e-12)` row-wise, as `torch.nn.functional.normalize`.
pub fn l2_normalize(e: Tensor<2>) -> Tensor<2> {
    let norm = e.clone().powi_scalar(2).sum_dim(1).sqrt().clamp_min(1e-12);
    e / norm
}

/// A safetensors file with its `__metadata__` keys sorted: burn writes them in a hash map's
/// order, so the same tensors saved twice gave different bytes (and a resumed run's weights
/// another digest, orphaning its records). The tensors' entries and data stay as they are.
fn canonical_header(bytes: Vec<u8>) -> Result<Vec<u8>> {
    let n = bytes
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as usize)
        .filter(|&n| 8 + n <= bytes.len())
        .ok_or_else(|| anyhow::anyhow!("burn wrote a safetensors file without a header"))?;
    let mut header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&bytes[8..8 + n])?;
    if let Some(serde_json::Value::Object(meta)) = header.get_mut("__metadata__") {
        let mut sorted: Vec<(String, serde_json::Value)> = std::mem::take(meta).into_iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        meta.extend(sorted);
    }
    let mut text = serde_json::to_vec(&header)?;
    // The data stays 8-byte aligned, as safetensors writers keep it.
    text.resize(text.len().next_multiple_of(8), b' ');
    let mut out = Vec::with_capacity(8 + text.len() + bytes.len() - 8 - n);
    out.extend((text.len() as u64).to_le_bytes());
    out.extend(text);
    out.extend(&bytes[8 + n..]);
    Ok(out)
}

/// C2F2's first fully-connected layer has `64·(H/4)·(W/4)·1024` weights: checked against a
/// stated limit before it is allocated (a 1024² crop asked 17 GB and aborted the process).
fn check_c2f2_size([_, h, w]: [usize; 3]) -> Result<()> {
    // Two 2×2 poolings: an image under 4×4 leaves its first fully-connected layer no input.
    crate::ensure_input!(
        h >= 4 && w >= 4,
        "model.arch = c2f2 on {h}×{w} images: it needs images of 4×4 pixels at least (it halves them twice)"
    );
    const MAX_FC1_BYTES: u64 = 4 << 30;
    // Saturating: a declared size at the edge must not wrap into a small one.
    let weights = [h as u64 / 4, w as u64 / 4, 1024]
        .iter()
        .fold(64u64, |a, &d| a.saturating_mul(d));
    ensure!(
        weights.saturating_mul(4) <= MAX_FC1_BYTES,
        "model.arch = c2f2 on {h}×{w} images: its first fully-connected layer would hold {weights} weights \
         ({:.1} GiB), beyond rdml's limit of {} GiB; C2F2 is a network for small images (28×28): lower \
         data.crop, or choose model.arch = resnet18",
        weights as f64 * 4.0 / (1u64 << 30) as f64,
        MAX_FC1_BYTES >> 30
    );
    Ok(())
}

#[cfg(test)]
mod size_tests {
    /// Issue 38: a 1024² C2F2 once aborted the process on a 17 GB allocation; now it is an error
    /// before anything is allocated, and the papers' 28² and a 224² one are built.
    #[test]
    fn c2f2_sizes_are_checked_before_allocation() {
        let e = super::check_c2f2_size([1, 1024, 1024]).unwrap_err().to_string();
        assert!(
            e.contains("would hold 4294967296 weights (16.0 GiB), beyond rdml's limit of 4 GiB"),
            "{e}"
        );
        assert!(super::check_c2f2_size([1, 28, 28]).is_ok());
        assert!(super::check_c2f2_size([3, 224, 224]).is_ok());
        // Issue 52: too small for its poolings (a NaN initialisation and a panic before), and at
        // the edge of a u32 header (a wrapped product before).
        let e = super::check_c2f2_size([1, 1, 1]).unwrap_err().to_string();
        assert!(e.contains("it needs images of 4×4 pixels at least"), "{e}");
        let edge = u32::MAX as usize;
        assert!(
            super::check_c2f2_size([1, edge, edge])
                .unwrap_err()
                .to_string()
                .contains("beyond rdml's limit")
        );
    }
}
