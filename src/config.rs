//! Experiment configs (TOML): data, model, loss, training and evaluation; presets for the papers'
//! settings; `--set key=value` overrides; validation with errors that name the key.

use crate::data::DataConfig;
use crate::data::sampler::SamplerConfig;
use crate::eval::EvalConfig;
use crate::loss::LossConfig;
use crate::model::ModelConfig;
use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The largest input tensor of one training batch, in bytes: a bound checked before allocation.
pub const MAX_BATCH_INPUT: u64 = 16 << 30;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub seed: u64,
    pub data: DataConfig,
    pub model: ModelConfig,
    /// `[loss]`, in today's layout or the one before `[loss.miner]` ([`crate::loss::legacy`]).
    #[serde(deserialize_with = "crate::loss::legacy::read")]
    pub loss: LossConfig,
    pub train: TrainConfig,
    #[serde(default)]
    pub eval: EvalConfig,
    /// Robust training (`[defense]`, kind = madry | est | act | hm); none by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defense: Option<crate::defense::DefenseConfig>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    pub epochs: usize,
    pub sampler: SamplerConfig,
    pub optimizer: OptimizerConfig,
    /// Stop each epoch after this many batches (quick runs).
    #[serde(default)]
    pub max_batches: Option<usize>,
    /// Where to train (`cpu`, `vulkan`, `vulkan:N`, `auto`); `--device` wins. Never written into
    /// a run's config: a run's results, checkpoints and resume do not depend on the device.
    #[serde(default, skip_serializing)]
    pub device: Option<crate::device::DeviceChoice>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OptimizerConfig {
    /// Only Adam (with PyTorch's L2 weight decay added to the gradient) is used by the papers.
    #[serde(default = "adam")]
    pub kind: String,
    pub lr: f64,
    #[serde(default)]
    pub weight_decay: f64,
    #[serde(default = "b1")]
    pub beta1: f32,
    #[serde(default = "b2")]
    pub beta2: f32,
    #[serde(default = "eps")]
    pub epsilon: f32,
}

fn adam() -> String {
    "adam".into()
}
fn b1() -> f32 {
    0.9
}
fn b2() -> f32 {
    0.999
}
fn eps() -> f32 {
    1e-8
}

macro_rules! presets {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../presets/", $name, ".toml")))),*]
    };
}

/// The presets shipped with rdml (also in `presets/`).
pub const PRESETS: &[(&str, &str)] = presets![
    "quickstart",
    "cars-resnet18-act",
    "cars-resnet18-ca-tride",
    "cars-resnet18-est",
    "cars-resnet18-hm-lga-ics",
    "cars-resnet18-triplet",
    "cars-resnet50-dro-kl",
    "cars-resnet50-dro-topk",
    "cars-resnet50-dro-topk-pn",
    "cars-resnet50-mdprop",
    "cub-resnet18-act",
    "cub-resnet18-ca-tride",
    "cub-resnet18-est",
    "cub-resnet18-hm-lga-ics",
    "cub-resnet18-triplet",
    "cub-resnet50-dro-kl",
    "cub-resnet50-dro-topk",
    "cub-resnet50-dro-topk-pn",
    "cub-resnet50-mdprop",
    "cub-resnet50-positive-perturbation-base",
    "fashion-c2f2-act",
    "fashion-c2f2-advprop",
    "fashion-c2f2-ca-tride",
    "fashion-c2f2-dro-kl",
    "fashion-c2f2-dro-kl-g",
    "fashion-c2f2-dro-ls",
    "fashion-c2f2-dro-ms",
    "fashion-c2f2-dro-topk",
    "fashion-c2f2-dro-topk-pn",
    "fashion-c2f2-est",
    "fashion-c2f2-hm-lga-ics",
    "fashion-c2f2-madry",
    "fashion-c2f2-mdprop",
    "fashion-c2f2-positive-perturbation",
    "fashion-c2f2-triplet",
    "inshop-resnet50-dro-kl",
    "inshop-resnet50-dro-topk",
    "inshop-resnet50-dro-topk-pn",
    "mnist-c2f2-triplet",
    "sop-resnet18-act",
    "sop-resnet18-ca-tride",
    "sop-resnet18-est",
    "sop-resnet18-hm-lga-ics",
    "sop-resnet18-triplet",
    "sop-resnet50-mdprop",
    "synthetic-two-gaussians",
];

impl Experiment {
    pub fn validate(&self) -> Result<()> {
        self.data.validate()?;
        self.model.validate()?;
        self.loss.validate(self.model.l2_normalize).context("in [loss]")?;
        self.eval.validate()?;
        if let Some(d) = &self.defense {
            d.validate(&self.loss).context("in [defense]")?;
            let has_bn = self.model.arch != crate::model::Arch::C2f2;
            ensure!(
                !has_bn || d.distributions().is_empty() || self.model.bn_sets == d.bn_sets(),
                "defense {} generates {} distribution(s) besides the clean one{}: set model.bn_sets = {}",
                d.name(),
                d.distributions().len(),
                if d.bn_sets() == 1 {
                    " through the clean BN set (separate_bn = false)"
                } else {
                    ", each with its own BN set"
                },
                d.bn_sets()
            );
        }
        let t = &self.train;
        ensure!(t.epochs >= 1, "train.epochs must be ≥ 1");
        t.sampler.validate()?;
        // The batch's input tensor alone (3 × crop² floats an image, more for file data sets,
        // whose items are decoded at their size first): a bound that fails here, not in an
        // allocation that aborts the process.
        let input = t.sampler.batch_size() as u64 * 3 * (self.data.crop as u64).pow(2) * 4;
        ensure!(
            input <= MAX_BATCH_INPUT,
            "a batch of {} images of {}×{} is {} GiB of input alone, beyond rdml's limit of {} GiB: \
             lower train.sampler.pairs (or classes × per_class) or data.crop",
            t.sampler.batch_size(),
            self.data.crop,
            self.data.crop,
            input >> 30,
            MAX_BATCH_INPUT >> 30
        );
        self.loss.unit().validate_batch(t.sampler.batch_size())?;
        ensure!(t.max_batches != Some(0), "train.max_batches must be ≥ 1 when given");
        let o = &t.optimizer;
        ensure!(
            o.kind == "adam",
            "train.optimizer.kind = '{}': only 'adam' is supported",
            o.kind
        );
        ensure!(
            o.lr > 0.0 && o.lr.is_finite(),
            "train.optimizer.lr must be > 0, got {}",
            o.lr
        );
        ensure!(o.weight_decay >= 0.0, "train.optimizer.weight_decay must be ≥ 0");
        ensure!(
            (0.0..1.0).contains(&o.beta1) && (0.0..1.0).contains(&o.beta2),
            "train.optimizer.beta1/beta2 must be in [0, 1)"
        );
        ensure!(o.epsilon > 0.0, "train.optimizer.epsilon must be > 0");
        Ok(())
    }

    /// Parses TOML text; `origin` names it in errors (which carry the line and column).
    pub fn from_toml(text: &str, origin: &str, overrides: &[String]) -> Result<Self> {
        // First parse as written, so an error in the file reports its line.
        let said = |e: toml::de::Error| {
            let shown = at_key(text, &e).unwrap_or_else(|| e.to_string());
            anyhow::anyhow!("{origin}: {}", crate::field::plain_serde(&shown))
        };
        let _: Experiment = toml::from_str(text).map_err(said)?;
        let mut value: toml::Value = toml::from_str(text).map_err(said)?;
        for w in repeated_overrides(overrides) {
            crate::notes::warn(w);
        }
        for o in overrides {
            apply_override(&mut value, o)?;
        }
        let exp: Experiment = value.try_into().map_err(|e| {
            let given: Vec<String> = overrides.iter().map(|o| overrides::said(o)).collect();
            let said = crate::field::plain_serde(&keyed(&e, overrides));
            anyhow::anyhow!("{origin} with {}: {said}", given.join(" "))
        })?;
        exp.validate()
            .with_context(|| format!("{origin}: invalid configuration"))?;
        Ok(exp)
    }

    /// Loads a config with `--defense` applied: an inline TOML table that replaces `[defense]`,
    /// or `none` to train the config without its defense.
    pub fn load_with_defense(path_or_preset: &str, overrides: &[String], defense: Option<&str>) -> Result<Self> {
        let mut o = overrides.to_vec();
        if let Some(d) = defense.filter(|d| d.trim() != "none") {
            let table = toml::from_str::<toml::Table>(&format!("v = {d}"))
                .ok()
                .and_then(|mut t| t.remove("v"))
                .filter(|v| v.is_table());
            ensure!(
                table.is_some(),
                "⟨defense⟩ {d:?}: expected an inline TOML table such as '{{kind=\"act\",eps=0.302,step=0.0118,steps=32}}', or none; kind is one of {}",
                crate::defense::DefenseConfig::KINDS.join(", ")
            );
            o.push(format!("⟨defense⟩={d}"));
        }
        let mut exp = Self::load(path_or_preset, &o)?;
        if defense.is_some_and(|d| d.trim() == "none") {
            exp.defense = None;
        }
        Ok(exp)
    }

    /// Loads a config file, or a preset by name when no such file exists.
    pub fn load(path_or_preset: &str, overrides: &[String]) -> Result<Self> {
        let p = Path::new(path_or_preset);
        ensure!(
            !p.is_dir(),
            "{path_or_preset} is a folder; ⟨config⟩ takes a TOML file or a preset name (`rdml presets` lists them)"
        );
        if crate::read::is_file(p, crate::read::Follow::Links)? {
            return Self::load_file(p, overrides);
        }
        if let Some((name, text)) = PRESETS.iter().find(|(n, _)| *n == path_or_preset) {
            return Self::from_toml(text, &format!("preset {name}"), overrides);
        }
        bail!(
            "{path_or_preset}: no such config file, and not a preset (presets: {})",
            PRESETS.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
        )
    }

    /// A config file by its path (any path, UTF-8 or not; `load` also takes preset names).
    pub fn load_file(p: &Path, overrides: &[String]) -> Result<Self> {
        let text = crate::read::text(p, crate::read::Follow::Links, crate::read::TEXT)?;
        Self::from_toml(&text, &p.display().to_string(), overrides)
    }

    pub fn to_toml(&self) -> Result<String> {
        Ok(toml::to_string_pretty(self)?)
    }

    /// A config that rdml wrote, of this version or an earlier one (whose layout may differ:
    /// `[loss]` before `[loss.miner]`), as this version writes it; `None` when it does not read.
    pub fn rewritten(text: &str) -> Option<String> {
        toml::from_str::<Experiment>(text).ok()?.to_toml().ok()
    }
}

mod overrides;
mod said;
pub use overrides::{SetKeys, apply_override, command_overrides, config_key, repeated_overrides};
use said::{at_key, keyed};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse_and_validate() {
        for (name, _) in PRESETS {
            Experiment::load(name, &[]).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        }
        // Every file in presets/ is shipped.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("presets");
        for f in std::fs::read_dir(dir).unwrap() {
            let name = f
                .unwrap()
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".toml")
                .to_string();
            assert!(
                PRESETS.iter().any(|p| p.0 == name),
                "presets/{name}.toml is not in PRESETS"
            );
        }
    }

    /// An override's mistake is one line with its table first, not toml's trailing "in `loss`".
    #[test]
    fn an_override_error_names_its_table_on_one_line() {
        let said = |o: &str| format!("{:#}", Experiment::load("quickstart", &[o.to_string()]).unwrap_err());
        let e = said(r#"loss={kind="triplet",margn=1}"#);
        assert!(
            e.ends_with("loss: margn is not a key here (the keys: distance, miner, margin)"),
            "{e}"
        );
        let e = said(r#"train.epochs="x""#);
        assert!(
            e.ends_with(r#"train.epochs: a value of the wrong kind (string "x", where usize was expected)"#),
            "{e}"
        );
        let e = said(r#"loss.kind="dro""#);
        assert!(
            e.contains("loss: distance is not a key here") && e.contains("keeps the table's other keys"),
            "{e}"
        );
        let e = said(r#"loss={kind="dro",variant="top-k"}"#);
        assert!(
            e.ends_with(r#": loss.k (number of pairs) is required by variant "top-k""#),
            "{e}"
        );
    }

    /// A wrong value inside a `kind` table names its key, in a file at the key's own line (not
    /// the table's header), in an override with its table.
    #[test]
    fn a_wrong_value_in_a_kind_table_names_its_key_and_line() {
        let file = "[model]\narch = \"c2f2\"\n\n[defense]\nkind = \"act\"\neps = \"big\"\nstep = 0.01\nsteps = 2\n";
        let e = format!("{:#}", Experiment::from_toml(file, "x.toml", &[]).unwrap_err());
        assert!(e.contains("line 6, column 7") && e.contains("6 | eps = \"big\""), "{e}");
        assert!(
            e.contains(r#"eps: a value of the wrong kind (string "big", where f32 was expected)"#),
            "{e}"
        );
        let file = "[loss]\nmargin = [1]\nkind = \"triplet\"\n";
        let e = format!("{:#}", Experiment::from_toml(file, "y.toml", &[]).unwrap_err());
        assert!(
            e.contains("line 2, column 10") && e.contains("margin: a value of the wrong kind"),
            "{e}"
        );
        let said = |o: &str| {
            format!(
                "{:#}",
                Experiment::load("fashion-c2f2-act", &[o.to_string()]).unwrap_err()
            )
        };
        let e = said("defense.eps=big");
        assert!(
            e.ends_with(r#"defense.eps: a value of the wrong kind (string "big", where f32 was expected)"#),
            "{e}"
        );
        let e = said("loss.margin=true");
        assert!(
            e.contains("loss.margin: a value of the wrong kind (boolean `true`"),
            "{e}"
        );
        let e = said(r#"defense={kind=3}"#);
        assert!(
            e.ends_with("defense.kind: an integer, where a string naming the kind was expected"),
            "{e}"
        );
    }

    /// Seed 000 §4: the training PGD's step is `2ε/i` for `i` iterations.
    #[test]
    fn positive_perturbation_preset_steps_twice_eps_over_iterations() {
        let e = Experiment::load("fashion-c2f2-positive-perturbation", &[]).unwrap();
        let b = e.defense.as_ref().unwrap().unit().budget();
        let (eps, step, steps) = (b.eps, b.step, b.steps);
        assert_eq!(steps, 5);
        assert!((step - 2.0 * eps / steps as f32).abs() < 1e-7, "step {step}, ε {eps}");
    }

    #[test]
    fn overrides_and_errors() {
        let e = Experiment::load(
            "fashion-c2f2-triplet",
            &["train.epochs=3".into(), "loss.margin=0.5".into()],
        )
        .unwrap();
        assert_eq!(e.train.epochs, 3);
        assert_eq!(e.loss.triplet_margin(), Some(0.5));
        let err = format!(
            "{:#}",
            Experiment::load("fashion-c2f2-triplet", &["train.epochz=3".into()]).unwrap_err()
        );
        assert!(err.contains("epochz"), "{err}");
        let err = format!(
            "{:#}",
            Experiment::load("fashion-c2f2-triplet", &["train.optimizer.lr=-1".into()]).unwrap_err()
        );
        assert!(err.contains("train.optimizer.lr"), "{err}");
        // A miner's name set on the preset's [loss.miner] table keeps its anchors and cutoffs.
        let e = Experiment::load(
            "cub-resnet50-positive-perturbation-base",
            &["loss.miner=semihard".into()],
        )
        .unwrap();
        let want = crate::loss::miner::Mining {
            miner: crate::loss::miner::Miner::Semihard,
            anchors: crate::loss::miner::Anchors::All,
            margin: 0.2,
            cutoff: 0.5,
            nonzero_loss_cutoff: Some(1.4),
        };
        assert_eq!(e.loss.mining(), want);
        // And on a name, replaces it; a name's kind is set as a table's.
        let e = Experiment::load("quickstart", &["loss.miner=\"hardest\"".into()]).unwrap();
        assert_eq!(e.loss.tuple_miner(), crate::loss::miner::Miner::Hardest);
        let e = Experiment::load("quickstart", &["loss.miner.kind=semihard".into()]).unwrap();
        assert_eq!(e.loss.tuple_miner(), crate::loss::miner::Miner::Semihard);
        let bad = "seed = 0\n[data]\ndataset = \"fashion-mnist\"\ncolour = 1\n";
        let err = format!("{:#}", Experiment::from_toml(bad, "x.toml", &[]).unwrap_err());
        assert!(
            err.contains("x.toml") && err.contains("line 4") && err.contains("colour"),
            "{err}"
        );
    }
}
