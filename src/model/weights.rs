//! Importing torchvision ImageNet weights (`resnet18-f37072fd.pth`, `resnet50-0676ba61.pth`, or a
//! `.safetensors` export of the same state dict). torchvision names map to ours by
//! `downsample.0 → downsample.conv`, `downsample.1 → downsample.bn`, and every batch norm into
//! parameter set 0 (`bn1.weight → bn1.sets.0.gamma`); `fc` (the ImageNet classifier) and
//! `num_batches_tracked` are skipped. Extra sets are copied from set 0.

use super::multi_bn::MultiBatchNorm;
use super::resnet::{Block, ResNet};
use anyhow::{Result, bail, ensure};
use burn::store::{KeyRemapper, ModuleSnapshot, PyTorchToBurnAdapter, PytorchStore, SafetensorsStore};
use burn::tensor::Device;
use std::path::Path;

fn remapper() -> Result<KeyRemapper> {
    KeyRemapper::from_patterns(vec![
        (r"downsample\.0\.", "downsample.conv."),
        (r"downsample\.1\.", "downsample.bn."),
        (r"^(.*bn\d?)\.(weight|bias|running_mean|running_var)$", "$1.sets.0.$2"),
    ])
    .map_err(|e| anyhow::anyhow!("internal key pattern: {e}"))
}

fn keep(path: &str, _container: &str) -> bool {
    !path.starts_with("fc.") && !path.ends_with("num_batches_tracked")
}

/// Loads torchvision ResNet weights into `model` (all but `fc`); any tensor of ours that the file
/// lacks, or a shape that differs, is an error naming the tensors.
pub fn load_torchvision<K: Block>(mut model: ResNet<K>, path: &Path, _device: &Device) -> Result<ResNet<K>>
where
    ResNet<K>: burn::module::Module,
{
    ensure!(path.is_file(), "model.pretrained: {} is not a file", path.display());
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let result = match ext.as_str() {
        "pth" | "pt" => {
            let mut store = PytorchStore::from_file(path)
                .remap(remapper()?)
                .allow_partial(true)
                .with_predicate(keep);
            model
                .load_from(&mut store)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        }
        "safetensors" => {
            let mut store = SafetensorsStore::from_file(path)
                .remap(remapper()?)
                .with_from_adapter(PyTorchToBurnAdapter)
                .allow_partial(true)
                .with_predicate(keep);
            model
                .load_from(&mut store)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        }
        _ => bail!(
            "model.pretrained: {} must end in .pth, .pt or .safetensors",
            path.display()
        ),
    };
    if !result.errors.is_empty() {
        bail!(
            "{}: weights do not fit the model: {}",
            path.display(),
            result
                .errors
                .iter()
                .take(6)
                .map(|e| format!("{e:?}"))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    // Only set 0 of each batch norm comes from the file; `fc` is the new embedding layer.
    let missing: Vec<&str> = result
        .missing
        .iter()
        .map(|m| m.0.as_str())
        .filter(|p| !p.starts_with("fc.") && (!p.contains(".sets.") || p.contains(".sets.0.")))
        .collect();
    if !missing.is_empty() {
        bail!(
            "{}: not torchvision ResNet weights for this depth: {} tensors missing, e.g. {:?} (file holds e.g. {:?})",
            path.display(),
            missing.len(),
            &missing[..missing.len().min(5)],
            &result.unused[..result.unused.len().min(5)]
        );
    }
    Ok(copy_bn_sets(model))
}

/// Copies set 0 of every batch norm into the other sets.
fn copy_bn_sets<K: Block>(model: ResNet<K>) -> ResNet<K> {
    model.map_bns(&MultiBatchNorm::copy_main_to_aux)
}

impl<K: Block> ResNet<K> {
    /// Applies `f` to every batch norm of the network.
    pub fn map_bns(self, f: &dyn Fn(MultiBatchNorm) -> MultiBatchNorm) -> Self {
        let mut m = self;
        m.bn1 = f(m.bn1);
        for layer in [&mut m.layer1, &mut m.layer2, &mut m.layer3, &mut m.layer4] {
            let blocks = std::mem::take(layer);
            *layer = blocks.into_iter().map(|b| b.map_bns(f)).collect();
        }
        m
    }
}
