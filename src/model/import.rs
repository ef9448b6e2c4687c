//! A model trained in PyTorch, as an [`EmbeddingNet`]: every tensor of its checkpoint(s) either
//! fills one parameter (checked by name and shape) or is listed as unused, and every parameter
//! is filled or listed as missing; either list is an error unless the user allows it.

use super::checkpoint::Checkpoint;
use super::layout::{self, KeyRule, Mapped};
use super::{Arch, EmbeddingNet, ModelConfig};
use anyhow::{Result, bail, ensure};
use burn::store::{ModuleSnapshot, SafetensorsStore};
use burn::tensor::Device;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the user allows besides an exact fit.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Allow {
    /// Tensors of the file that fill no parameter (a classifier head, an auxiliary branch).
    pub unused: bool,
    /// Parameters the file does not hold; they keep rdml's seeded initialisation.
    pub missing: bool,
}

/// What an import read and where it went (`import.json` of the run folder).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImportRecord {
    pub files: Vec<String>,
    pub format: String,
    pub layout: String,
    /// The dictionary the weights came from (`state_dict` in a Lightning checkpoint).
    pub root: String,
    pub key_map: Vec<String>,
    pub arch: Arch,
    pub embedding_dim: usize,
    /// Source key → rdml parameter.
    pub filled: BTreeMap<String, String>,
    pub unused: Vec<String>,
    pub missing: Vec<String>,
    /// BatchNorm step counters and other integer tensors: no parameter takes them.
    pub integer: Vec<String>,
    /// Tensors outside the weights' dictionary (optimiser state): not read.
    pub outside: usize,
    /// The config the run took its data from; `None`: the architecture's default.
    #[serde(default)]
    pub config: Option<String>,
    /// Imported without a config: the run is scored on its architecture's default config's
    /// data, which commands say when they do (false in records of earlier versions).
    #[serde(default)]
    pub default_config: bool,
}

/// The keys of `sources` with an embedder file's keys under `embedder.` (PML's second file).
fn source_keys(sources: &[Checkpoint]) -> Vec<(usize, String, String)> {
    let mut keys = Vec::new();
    for (i, ck) in sources.iter().enumerate() {
        for k in ck.tensors.keys() {
            let (shown, named) = match (sources.len() > 1, i) {
                (true, 0) => (k.clone(), format!("trunk.{k}")),
                (true, _) => (format!("embedder:{k}"), format!("embedder.{k}")),
                _ => (k.clone(), k.clone()),
            };
            keys.push((i, shown, named));
        }
    }
    keys
}

fn list(keys: &[String]) -> String {
    let shown: Vec<&str> = keys.iter().take(8).map(String::as_str).collect();
    let more = keys.len().saturating_sub(8);
    format!(
        "{}{}",
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}

/// The embedding width and the `[c, h, w]` the checkpoint was built for, read off its shapes.
pub fn inferred_shape(arch: Arch, sources: &[Checkpoint], rules: &[KeyRule]) -> Result<(Option<usize>, [usize; 3])> {
    let keys = source_keys(sources);
    let named: Vec<String> = keys.iter().map(|k| k.2.clone()).collect();
    let (names, _) = layout::canonical(&named, rules, sources.len() > 1)?;
    // The sizes the model is built with: each from a tensor that holds its values (an empty
    // tensor's shape, `[0, 2^63]`, declares sizes no data backs).
    let shape = |want: &str| -> Result<Option<Vec<usize>>> {
        let Some(i) = names.iter().position(|n| n == want) else {
            return Ok(None);
        };
        let (src, key) = (keys[i].0, &keys[i].1);
        let key = key.strip_prefix("embedder:").unwrap_or(key);
        let t = &sources[src].tensors[key];
        crate::ensure_input!(
            !t.values.is_empty() && crate::read::declared_len(&t.shape) == Some(t.values.len()),
            "{}: tensor {key} of shape {:?} holds {} values: a model's weights hold one per element, at least one",
            sources[src].path.display(),
            t.shape,
            t.values.len()
        );
        Ok(Some(t.shape.clone()))
    };
    let dim =
        |want: &str, axis: usize| -> Result<Option<usize>> { Ok(shape(want)?.and_then(|s| s.get(axis).copied())) };
    let channels = dim("conv1.weight", 1)?.unwrap_or(3);
    Ok(match arch {
        Arch::C2f2 => {
            let flat = dim("fc1.weight", 1)?.unwrap_or(3136);
            let side = 4 * ((flat / 64) as f64).sqrt().round() as usize;
            (dim("fc2.weight", 0)?, [channels, side, side])
        }
        _ => (dim("fc.weight", 0)?, [channels, 224, 224]),
    })
}

/// Builds the model `cfg` describes for inputs `in_shape` and fills it from `sources` (one
/// file, or PML's trunk then embedder).
pub fn import(
    cfg: &ModelConfig,
    in_shape: [usize; 3],
    sources: &[Checkpoint],
    rules: &[KeyRule],
    allow: &Allow,
    device: &Device,
) -> Result<(EmbeddingNet, ImportRecord)> {
    let keys = source_keys(sources);
    let named: Vec<String> = keys.iter().map(|k| k.2.clone()).collect();
    let (names, layout_name) = layout::canonical(&named, rules, sources.len() > 1)?;
    let mut net = crate::seeded(device, 0, || EmbeddingNet::new(cfg, in_shape, device))?;
    let expected: BTreeMap<String, Vec<usize>> = net
        .collect(None, None, false)
        .into_iter()
        .map(|t| (t.name.clone(), t.shape.to_vec()))
        .collect();
    let mut mapped: Vec<(Mapped, usize)> = Vec::new();
    let mut unused = Vec::new();
    for ((src, shown, _), name) in keys.iter().zip(&names) {
        match layout::ours(cfg.arch, name).filter(|(p, _)| expected.contains_key(p)) {
            Some((path, transpose)) => mapped.push((
                Mapped {
                    source: shown.clone(),
                    path,
                    transpose,
                },
                *src,
            )),
            None => unused.push(shown.clone()),
        }
    }
    let hint = layout::looks_like(&names)
        .filter(|a| !a.ends_with(arch_name(cfg.arch)))
        .map(|a| format!(" (the file looks like {a}; rdml was asked for {})", arch_name(cfg.arch)))
        .unwrap_or_default();
    let bytes = fitted(&mapped, sources, &expected, &hint)?;
    let filled: BTreeMap<String, String> = mapped.iter().map(|(m, _)| (m.source.clone(), m.path.clone())).collect();
    let targets: std::collections::HashSet<&String> = filled.values().collect();
    let mut missing: Vec<String> = expected
        .keys()
        .filter(|p| !targets.contains(p) && (!p.contains(".sets.") || p.contains(".sets.0.")))
        .cloned()
        .collect();
    missing.sort();
    refuse_foreign(sources, cfg.arch, &names, expected_main(&expected), missing.len())?;
    if !unused.is_empty() && !allow.unused {
        bail!(
            "{}: {} tensor(s) fit no parameter of rdml's {}: {}{hint}; pass ⟨allow_unused!⟩ to leave them out",
            sources[0].path.display(),
            unused.len(),
            arch_name(cfg.arch),
            list(&unused)
        );
    }
    if !missing.is_empty() && !allow.missing {
        bail!(
            "{}: {} parameter(s) of rdml's {} are not in the file: {}{hint}; pass ⟨allow_missing!⟩ to keep their random initialisation, or ⟨key_map⟩ OLD=NEW to rename the file's keys",
            sources[0].path.display(),
            missing.len(),
            arch_name(cfg.arch),
            list(&missing)
        );
    }
    let mut store = SafetensorsStore::from_bytes(Some(bytes)).allow_partial(true);
    let r = net
        .load_from(&mut store)
        .map_err(|e| anyhow::anyhow!("{}: {e}", sources[0].path.display()))?;
    ensure!(r.errors.is_empty(), "internal: import load errors {:?}", r.errors);
    let net = net.map_all_bns_from_main();
    let record = ImportRecord {
        files: sources.iter().map(|s| s.path.display().to_string()).collect(),
        format: sources[0].format.clone(),
        layout: layout_name.into(),
        root: sources[0].root.clone(),
        key_map: rules.iter().map(|r| format!("{}={}", r.from, r.to)).collect(),
        arch: cfg.arch,
        embedding_dim: cfg.embedding_dim,
        filled,
        unused,
        missing,
        integer: sources.iter().flat_map(|s| s.integer.clone()).collect(),
        outside: sources.iter().map(|s| s.outside.len()).sum(),
        config: None,
        default_config: false,
    };
    Ok((net, record))
}

/// rdml's parameters a file must fill (the first batch-norm set stands for the others).
fn expected_main(expected: &BTreeMap<String, Vec<usize>>) -> usize {
    expected
        .keys()
        .filter(|p| !p.contains(".sets.") || p.contains(".sets.0."))
        .count()
}

/// Refuses a file that fills fewer than half of rdml's parameters: another architecture, which
/// `--allow-missing` would turn into a mostly random network.
fn refuse_foreign(sources: &[Checkpoint], arch: Arch, names: &[String], expected: usize, missing: usize) -> Result<()> {
    let filled = expected - missing.min(expected);
    if 2 * filled >= expected {
        return Ok(());
    }
    let found = layout::looks_like(names)
        .map(|a| format!("the file looks like {a}"))
        .unwrap_or_else(|| {
            format!(
                "its keys begin {}",
                list(&names.iter().take(4).cloned().collect::<Vec<_>>())
            )
        });
    bail!(foreign_message(
        &sources[0].path,
        arch,
        &format!(
            "it fills {filled} of the {expected} parameters of rdml's {} ({found})",
            arch_name(arch)
        )
    ))
}

/// Refuses, before anything is inferred from it, a file of a family rdml does not build (a vision
/// transformer, an EfficientNet, …), whatever the flags.
pub fn refuse_unreadable(arch: Arch, sources: &[Checkpoint], rules: &[KeyRule]) -> Result<()> {
    let keys = source_keys(sources);
    let named: Vec<String> = keys.iter().map(|k| k.2.clone()).collect();
    let (names, _) = layout::canonical(&named, rules, sources.len() > 1)?;
    // A ResNet or C2F2 with an extra head of another name is still read (`--allow-unused`).
    match layout::looks_like(&names).filter(|_| layout::foreign(&names) == layout::looks_like(&names)) {
        Some(family) => bail!(foreign_message(
            &sources[0].path,
            arch,
            &format!("the file holds {family}")
        )),
        None => Ok(()),
    }
}

/// Why a file is not imported, and the route that scores its model.
fn foreign_message(path: &std::path::Path, arch: Arch, why: &str) -> String {
    format!(
        "{}: not a {} that rdml can read: {why}. rdml import reads C2F2, ResNet-18 and ResNet-50 \
         only, and never builds a model it cannot fill (⟨allow_missing!⟩ covers a few absent \
         parameters, not another architecture). Any PyTorch model is attacked and scored where it \
         lives: in Python, rdml.robustness(model, images, labels) (README: \"Score your own PyTorch model\")",
        path.display(),
        arch_name(arch)
    )
}

fn arch_name(arch: Arch) -> &'static str {
    match arch {
        Arch::C2f2 => "C2F2",
        Arch::Resnet18 => "ResNet-18",
        Arch::Resnet50 => "ResNet-50",
    }
}

/// The mapped tensors as a safetensors image under rdml's names, each checked against the
/// parameter's shape; two keys for one parameter are refused.
fn fitted(
    mapped: &[(Mapped, usize)],
    sources: &[Checkpoint],
    expected: &BTreeMap<String, Vec<usize>>,
    hint: &str,
) -> Result<Vec<u8>> {
    let mut data: BTreeMap<String, (Vec<usize>, Vec<u8>)> = BTreeMap::new();
    let mut wrong = Vec::new();
    for (m, src) in mapped {
        let key = m.source.strip_prefix("embedder:").unwrap_or(&m.source);
        let t = &sources[*src].tensors[key];
        let (shape, values) = if m.transpose && t.shape.len() == 2 {
            let (r, c) = (t.shape[0], t.shape[1]);
            let mut v = vec![0f32; r * c];
            for i in 0..r {
                for j in 0..c {
                    v[j * r + i] = t.values[i * c + j];
                }
            }
            (vec![c, r], v)
        } else {
            (t.shape.clone(), t.values.clone())
        };
        if expected[&m.path] != shape {
            let torch_shape = |s: &[usize]| {
                if m.transpose {
                    s.iter().rev().copied().collect()
                } else {
                    s.to_vec()
                }
            };
            wrong.push(format!(
                "{} is {:?} in the file, rdml's {} needs {:?}",
                m.source,
                t.shape,
                m.path,
                torch_shape(&expected[&m.path])
            ));
            continue;
        }
        if data.contains_key(&m.path) {
            bail!(
                "{}: two keys map to {} (the second is {})",
                sources[*src].path.display(),
                m.path,
                m.source
            );
        }
        data.insert(m.path.clone(), (shape, bytemuck::cast_slice(&values).to_vec()));
    }
    if !wrong.is_empty() {
        bail!(
            "{}: shapes differ from the model's: {}{hint}",
            sources[0].path.display(),
            list(&wrong)
        );
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = data
        .iter()
        .map(|(k, (s, b))| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                .map(|v| (k.clone(), v))
                .map_err(|e| anyhow::anyhow!("internal: {e}"))
        })
        .collect::<Result<_>>()?;
    safetensors::serialize(views, None).map_err(|e| anyhow::anyhow!("internal: {e}"))
}

impl EmbeddingNet {
    /// Copies every batch norm's set 0 into its other sets (an imported model has one set of
    /// statistics; MDProp fine-tuning starts its auxiliary sets from it).
    fn map_all_bns_from_main(self) -> Self {
        use super::{Backbone, multi_bn::MultiBatchNorm};
        let backbone = match self.backbone {
            Backbone::Resnet18(m) => Backbone::Resnet18(m.map_bns(&MultiBatchNorm::copy_main_to_aux)),
            Backbone::Resnet50(m) => Backbone::Resnet50(m.map_bns(&MultiBatchNorm::copy_main_to_aux)),
            c => c,
        };
        Self { backbone, ..self }
    }
}
