//! The key layouts of checkpoints trained elsewhere, and how their names map to rdml's
//! parameters. Names are first brought to one canonical spelling (torchvision's for ResNets:
//! `conv1`, `bn1`, `layer{1..4}.{i}.…`, `downsample.{0,1}`, `fc`; `conv1`, `conv2`, `fc1`,
//! `fc2` for C2F2), then mapped to rdml's paths (`backbone.Resnet18.layer1.0.bn1.sets.0.gamma`).
//!
//! Layouts recognised: a plain `state_dict` (torchvision, timm: the same names), robrank's
//! Lightning checkpoints (`backbone.` before every key; its C2F2 is a `Sequential`, indices 0, 3,
//! 7, 9), a `DataParallel` save (`module.`), and pytorch-metric-learning's trunk and embedder
//! (two files, or one dictionary with `trunk` and `embedder`). Anything else takes user rules.

use super::Arch;
use anyhow::{Result, bail, ensure};

/// A user's `--key-map OLD=NEW` rule: a key that starts with `OLD` has that prefix replaced by
/// `NEW` (empty `NEW` strips it). The first matching rule applies, before layout detection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRule {
    pub from: String,
    pub to: String,
}

impl KeyRule {
    /// The rule replacing the prefix `from` (not empty) with `to`.
    pub fn new(from: &str, to: &str) -> Result<Self> {
        ensure!(
            !from.is_empty(),
            "⟨key_map⟩ {from:?} → {to:?}: the prefix to replace is empty"
        );
        Ok(Self {
            from: from.into(),
            to: to.into(),
        })
    }
}

impl std::str::FromStr for KeyRule {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        let Some((from, to)) = s.split_once('=') else {
            bail!("⟨key_map⟩ {s:?}: expected OLD=NEW (a key prefix and its replacement; NEW may be empty to strip OLD)")
        };
        ensure!(!from.is_empty(), "⟨key_map⟩ {s:?}: the prefix to replace is empty");
        Self::new(from, to)
    }
}

/// Where a source key ended up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped {
    /// The key as the file spells it (with `embedder:` before an embedder file's keys).
    pub source: String,
    /// rdml's parameter path.
    pub path: String,
    /// PyTorch's `Linear.weight` is `[out, in]`, burn's `[in, out]`.
    pub transpose: bool,
}

/// The canonical names of `keys` (one entry per key, in order) and the layout's name.
pub fn canonical(keys: &[String], rules: &[KeyRule], pair: bool) -> Result<(Vec<String>, &'static str)> {
    let mut names: Vec<String> = keys
        .iter()
        .map(|k| match rules.iter().find(|r| k.starts_with(&r.from)) {
            Some(r) => format!("{}{}", r.to, &k[r.from.len()..]),
            None => k.clone(),
        })
        .collect();
    let all = |names: &[String], p: &str| !names.is_empty() && names.iter().all(|n| n.starts_with(p));
    if all(&names, "module.") {
        strip(&mut names, "module.");
    }
    let mut layout = if rules.is_empty() { "state_dict" } else { "key-map" };
    if all(&names, "backbone.") {
        strip(&mut names, "backbone.");
        layout = "robrank";
    }
    let has = |names: &[String], p: &str| names.iter().any(|n| n.starts_with(p));
    if pair || (has(&names, "trunk.") && has(&names, "embedder.")) {
        pml_pair(&mut names)?;
        layout = "pytorch-metric-learning";
    }
    // robrank's C2F2 is a Sequential: conv 0, conv 3, linear 7, linear 9.
    for (i, ours) in [("0.", "conv1."), ("3.", "conv2."), ("7.", "fc1."), ("9.", "fc2.")] {
        for n in names.iter_mut().filter(|n| n.starts_with(i)) {
            *n = format!("{ours}{}", &n[i.len()..]);
        }
    }
    Ok((names, layout))
}

fn strip(names: &mut [String], p: &str) {
    for n in names.iter_mut() {
        *n = n[p.len()..].to_string();
    }
}

/// pytorch-metric-learning's pair: the trunk's keys lose `trunk.`; the embedder (an `MLP`, whose
/// one `Linear` sits at `net.0` or `net.1`) becomes the embedding layer `fc`.
fn pml_pair(names: &mut [String]) -> Result<()> {
    let mut linears: Vec<String> = names
        .iter()
        .filter_map(|n| n.strip_prefix("embedder.")?.strip_suffix(".weight").map(str::to_string))
        .collect();
    linears.sort();
    linears.dedup();
    ensure!(
        linears.len() <= 1,
        "the embedder holds {} layers with weights ({}): rdml's models end in one embedding layer",
        linears.len(),
        linears.join(", ")
    );
    for n in names.iter_mut() {
        if let Some(rest) = n.strip_prefix("trunk.") {
            *n = rest.to_string();
        } else if let Some(rest) = n.strip_prefix("embedder.") {
            let leaf = linears
                .first()
                .and_then(|l| rest.strip_prefix(l.as_str()))
                .unwrap_or(rest);
            *n = format!(
                "fc{}",
                if leaf.starts_with('.') {
                    leaf.to_string()
                } else {
                    format!(".{leaf}")
                }
            );
        }
    }
    Ok(())
}

/// rdml's parameter for a canonical name, or `None` for a name no parameter of `arch` has.
pub fn ours(arch: Arch, name: &str) -> Option<(String, bool)> {
    let (module, leaf) = name.rsplit_once('.')?;
    match arch {
        Arch::C2f2 => {
            ensure_one_of(module, &["conv1", "conv2", "fc1", "fc2"])?;
            ensure_one_of(leaf, &["weight", "bias"])?;
            Some((
                format!("backbone.C2f2.{name}"),
                module.starts_with("fc") && leaf == "weight",
            ))
        }
        Arch::Resnet18 | Arch::Resnet50 => {
            let variant = if arch == Arch::Resnet18 { "Resnet18" } else { "Resnet50" };
            let module = module
                .replace("downsample.0", "downsample.conv")
                .replace("downsample.1", "downsample.bn");
            let last = module.rsplit('.').next().unwrap_or(&module);
            let is_bn = last.starts_with("bn") || module.ends_with("downsample.bn");
            let (path, transpose) = if is_bn {
                let leaf = match leaf {
                    "weight" => "gamma",
                    "bias" => "beta",
                    "running_mean" | "running_var" => leaf,
                    _ => return None,
                };
                (format!("{module}.sets.0.{leaf}"), false)
            } else {
                ensure_one_of(leaf, &["weight", "bias"])?;
                (format!("{module}.{leaf}"), module == "fc" && leaf == "weight")
            };
            Some((format!("backbone.{variant}.{path}"), transpose))
        }
    }
}

fn ensure_one_of(s: &str, options: &[&str]) -> Option<()> {
    options.contains(&s).then_some(())
}

/// The architecture a set of canonical names looks like, for an error's hint.
pub fn looks_like(names: &[String]) -> Option<&'static str> {
    let has = |k: &str| names.iter().any(|n| n == k);
    let prefix = |k: &str| names.iter().any(|n| n.starts_with(k));
    if has("layer1.0.conv3.weight") {
        Some(if prefix("layer3.6.") {
            "a ResNet-101/152"
        } else {
            "a ResNet-50"
        })
    } else if has("layer1.0.conv1.weight") {
        Some(if prefix("layer3.2.") {
            "a ResNet-34"
        } else {
            "a ResNet-18"
        })
    } else if has("conv2.weight") && has("fc1.weight") {
        Some("a C2F2")
    } else {
        foreign(names)
    }
}

/// A family rdml does not build, recognised by its parameter names (timm's, torchvision's,
/// Hugging Face's and OpenAI CLIP's spellings).
pub fn foreign(names: &[String]) -> Option<&'static str> {
    let any = |parts: &[&str]| names.iter().any(|n| parts.iter().any(|p| n.contains(p)));
    if any(&[
        "attn.qkv",
        "cls_token",
        "pos_embed",
        "self_attention",
        "attention.query",
        "in_proj_weight",
    ]) {
        Some("a vision transformer (ViT, DeiT, DINO, CLIP's visual tower)")
    } else if any(&[
        "_depthwise_conv",
        "conv_dw",
        "block.0.0.",
        "_blocks.",
        "se.conv_reduce",
        "conv_pw",
    ]) {
        Some("an EfficientNet or MobileNet (depthwise blocks)")
    } else if any(&["Mixed_", "inception", "Conv2d_1a", "inception_3a"]) {
        Some("an Inception network (GoogLeNet, BN-Inception, Inception-v3)")
    } else if any(&["stages.", "downsample_layers."]) {
        Some("a ConvNeXt")
    } else if any(&["features.denseblock"]) {
        Some("a DenseNet")
    } else if any(&["features.0.weight", "classifier.0.weight"]) {
        Some("a VGG or AlexNet")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(keys: &[&str], rules: &[&str], pair: bool) -> (Vec<String>, &'static str) {
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let rules: Vec<KeyRule> = rules.iter().map(|r| r.parse().unwrap()).collect();
        canonical(&keys, &rules, pair).unwrap()
    }

    #[test]
    fn layouts_reach_canonical_names() {
        let (n, l) = names(&["backbone.0.weight", "backbone.9.bias"], &[], false);
        assert_eq!((n, l), (vec!["conv1.weight".into(), "fc2.bias".into()], "robrank"));
        let (n, l) = names(&["module.layer1.0.bn1.weight"], &[], false);
        assert_eq!((n, l), (vec!["layer1.0.bn1.weight".into()], "state_dict"));
        let (n, l) = names(
            &["trunk.conv1.weight", "embedder.net.0.weight", "embedder.net.0.bias"],
            &[],
            false,
        );
        assert_eq!(n, ["conv1.weight", "fc.weight", "fc.bias"]);
        assert_eq!(l, "pytorch-metric-learning");
        let (n, l) = names(&["enc.conv1.weight", "head.weight"], &["enc.=", "head.=fc."], false);
        assert_eq!((n, l), (vec!["conv1.weight".into(), "fc.weight".into()], "key-map"));
        let two = ["trunk.x", "embedder.a.weight", "embedder.b.weight"].map(String::from);
        let err = canonical(&two, &[], false).unwrap_err().to_string();
        assert!(err.contains("2 layers with weights (a, b)"), "{err}");
        assert!("noequals".parse::<KeyRule>().is_err());
        assert!("=x".parse::<KeyRule>().is_err());
    }

    #[test]
    fn canonical_names_map_to_parameters() {
        let r = |n| ours(Arch::Resnet18, n);
        assert_eq!(
            r("bn1.weight"),
            Some(("backbone.Resnet18.bn1.sets.0.gamma".into(), false))
        );
        assert_eq!(
            r("layer2.0.downsample.1.running_var"),
            Some((
                "backbone.Resnet18.layer2.0.downsample.bn.sets.0.running_var".into(),
                false
            ))
        );
        assert_eq!(
            r("layer2.0.downsample.0.weight"),
            Some(("backbone.Resnet18.layer2.0.downsample.conv.weight".into(), false))
        );
        assert_eq!(r("fc.weight"), Some(("backbone.Resnet18.fc.weight".into(), true)));
        assert_eq!(r("bn1.num_batches_tracked"), None);
        assert_eq!(
            ours(Arch::C2f2, "fc1.weight"),
            Some(("backbone.C2f2.fc1.weight".into(), true))
        );
        assert_eq!(
            ours(Arch::C2f2, "conv1.weight"),
            Some(("backbone.C2f2.conv1.weight".into(), false))
        );
        assert_eq!(ours(Arch::C2f2, "fc3.weight"), None);
    }
}
