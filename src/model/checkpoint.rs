//! Reading the tensors of a checkpoint written by PyTorch (`torch.save`: `.pth`, `.pt`, a
//! Lightning `.ckpt`) or by safetensors, without running any of its pickle code: the pickle is
//! parsed by `pytorch-reader`, which interprets only the calls that rebuild tensors, and every
//! other callable the pickle names is refused here unless it is one of the plain data types
//! PyTorch and Lightning write (see `DATA_TYPES`).

use anyhow::{Context, Result, bail, ensure};
use pytorch_reader::{DType, PickleValue, PytorchReader};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One tensor of a checkpoint, as `f32` in PyTorch's layout (row-major, torch's shape).
#[derive(Debug, Clone)]
pub struct SourceTensor {
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

/// The weights a checkpoint holds, by the names the file gives them.
#[derive(Debug)]
pub struct Checkpoint {
    pub path: PathBuf,
    /// `torch zip`, `torch legacy`, `safetensors`.
    pub format: String,
    /// The key of the dictionary the weights were read from (`state_dict` for a Lightning
    /// checkpoint), empty for the file's root.
    pub root: String,
    pub tensors: BTreeMap<String, SourceTensor>,
    /// Tensors outside that dictionary (optimiser state, EMA copies): not model weights.
    pub outside: Vec<String>,
    /// Integer tensors (BatchNorm's step counters): no model parameter takes them.
    pub integer: Vec<String>,
}

/// The Python callables a checkpoint's pickle may name: tensor and storage rebuilding, the
/// containers, and the metadata types that `torch.save`, numpy and Lightning write. Anything
/// else (`os.system`, `builtins.eval`, a user's class) is code that `torch.load` would run.
const DATA_TYPES: &[&str] = &[
    "collections.OrderedDict",
    "collections.defaultdict",
    "builtins.set",
    "builtins.frozenset",
    "builtins.slice",
    "builtins.complex",
    "__builtin__.set",
    "torch.Tensor",
    "torch.TypedStorage",
    "torch.UntypedStorage",
    "torch.Size",
    "torch.device",
    "torch.dtype",
    "torch.nn.parameter.Parameter",
    "numpy.dtype",
    "numpy.ndarray",
    "numpy.core.multiarray.scalar",
    "numpy._core.multiarray.scalar",
    "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct",
    "argparse.Namespace",
    "pytorch_lightning.utilities.parsing.AttributeDict",
    "lightning_fabric.utilities.data.AttributeDict",
    "lightning.fabric.utilities.data.AttributeDict",
    "int",
    "object",
];

fn is_data_type(name: &str) -> bool {
    let storage = name.strip_prefix("torch.").is_some_and(|n| n.ends_with("Storage"));
    let dtype = name.strip_prefix("torch.").is_some_and(|n| {
        let base = n.trim_end_matches(|c: char| c.is_ascii_digit());
        [
            "float", "int", "uint", "bfloat", "bool", "complex", "half", "double", "long", "short", "cfloat",
        ]
        .contains(&base)
    });
    storage || dtype || DATA_TYPES.contains(&name)
}

/// Reads `path`, whatever its extension: a safetensors file, or a PyTorch zip or legacy pickle.
pub fn read(path: &Path) -> Result<Checkpoint> {
    ensure!(
        std::fs::metadata(path).is_ok(),
        "{}: no such checkpoint file",
        path.display()
    );
    let mut head = [0u8; 16];
    let n = {
        use std::io::Read;
        let (mut f, _) = crate::read::open(path, crate::read::Follow::Links, crate::read::ANY)?;
        f.read(&mut head)
            .with_context(|| format!("cannot read {}", path.display()))?
    };
    let head = &head[..n];
    // PyTorch's old tar format (before 1.0): its pickles sit in tar members that rdml's scan of
    // callables does not open, so it is refused whole (the reader would take it for one).
    let mut tar = [0u8; 5];
    let is_tar = {
        use std::io::{Read, Seek};
        let (mut f, _) = crate::read::open(path, crate::read::Follow::Links, crate::read::ANY)?;
        f.seek(std::io::SeekFrom::Start(257)).is_ok() && f.read_exact(&mut tar).is_ok() && &tar == b"ustar"
    };
    ensure!(
        !is_tar,
        "{}: PyTorch's old tar checkpoint format (before PyTorch 1.0) is not read: load it in PyTorch \
         and save `model.state_dict()` again",
        path.display()
    );
    if head.len() >= 9 && head[8] == b'{' {
        return read_safetensors(path);
    }
    let zip = head.starts_with(b"PK\x03\x04");
    let pickle = head.first() == Some(&0x80);
    ensure!(
        zip || pickle,
        "{}: not a checkpoint: neither a PyTorch file (`torch.save`'s zip or pickle) nor safetensors",
        path.display()
    );
    read_torch(path, if zip { "torch zip" } else { "torch legacy" })
}

fn damaged(path: &Path, e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!(
        "{}: not a readable PyTorch checkpoint (truncated or damaged?): {e}",
        path.display()
    )
}

fn read_torch(path: &Path, format: &str) -> Result<Checkpoint> {
    let tree = match PytorchReader::read_pickle_data(path, None) {
        Ok(tree) => tree,
        Err(e) => {
            // A callable the reader stumbled over is said by its own name, not as damage.
            if let Err(found) = super::pickle_scan::refuse_hidden_code(path, is_data_type)
                && found.is::<crate::InputError>()
            {
                return Err(found);
            }
            return Err(damaged(path, e));
        }
    };
    refuse_code(path, &tree, &mut Vec::new())?;
    super::pickle_scan::refuse_hidden_code(path, is_data_type)?;
    let root = weights_key(&tree);
    let reader = PytorchReader::new(path).map_err(|e| damaged(path, e))?;
    let prefix = if root.is_empty() {
        String::new()
    } else {
        format!("{root}.")
    };
    let mut ck = Checkpoint {
        path: path.to_path_buf(),
        format: format.into(),
        root,
        tensors: BTreeMap::new(),
        outside: Vec::new(),
        integer: Vec::new(),
    };
    for (name, t) in reader.into_tensors() {
        let Some(key) = name.strip_prefix(&prefix) else {
            ck.outside.push(name);
            continue;
        };
        let bytes = t.read().map_err(|e| damaged(path, format!("tensor {name}: {e}")))?;
        match floats(t.dtype(), &bytes) {
            Some(values) => {
                ck.tensors
                    .insert(key.to_string(), checked(path, &name, t.shape().to_vec(), values)?);
            }
            None => {
                // A parameter's name on integer values: weights cast by mistake, said as such
                // (not as an architecture without its layers).
                let parameter = [".weight", ".bias", ".running_mean", ".running_var"]
                    .iter()
                    .any(|s| key.ends_with(s) || key == &s[1..]);
                ensure!(
                    !parameter,
                    "{}: tensor {name} holds {} values: a model's weights are floating point (float32, float16, \
                     bfloat16 or float64); save them as such (`tensor.float()`)",
                    path.display(),
                    match t.dtype() {
                        DType::I64 => "int64",
                        DType::I32 => "int32",
                        DType::I16 => "int16",
                        DType::I8 => "int8",
                        DType::U8 => "uint8",
                        DType::Bool => "bool",
                        _ => "integer",
                    }
                );
                ck.integer.push(key.to_string())
            }
        }
    }
    ck.outside.sort();
    ck.integer.sort();
    Ok(ck)
}

/// The dictionary holding the weights: a Lightning checkpoint's (or any training script's)
/// `state_dict`, `model_state_dict` or `model` entry when the root has one, else the root.
fn weights_key(tree: &PickleValue) -> String {
    let PickleValue::Dict(d) = tree else {
        return String::new();
    };
    ["state_dict", "model_state_dict", "model"]
        .into_iter()
        .find(|k| matches!(d.get(*k), Some(PickleValue::Dict(_))))
        .unwrap_or("")
        .to_string()
}

/// Refuses a pickle that names a callable outside [`DATA_TYPES`], naming the key it sits under.
fn refuse_code(path: &Path, v: &PickleValue, at: &mut Vec<String>) -> Result<()> {
    match v {
        PickleValue::Dict(d) => {
            let mut keys: Vec<_> = d.keys().collect();
            keys.sort();
            for k in keys {
                at.push(k.clone());
                refuse_code(path, &d[k], at)?;
                at.pop();
            }
        }
        PickleValue::List(items) => {
            for (i, item) in items.iter().enumerate() {
                at.push(i.to_string());
                refuse_code(path, item, at)?;
                at.pop();
            }
        }
        PickleValue::Unsupported(name) if !is_data_type(name) => bail!(
            "{}: the pickle calls `{name}` (at key '{}'): loading it in PyTorch would run that code. \
             rdml runs no code from a checkpoint and reads only tensor records; if the file is yours, \
             save `model.state_dict()` (or a safetensors file) instead",
            path.display(),
            if at.is_empty() {
                "<root>".to_string()
            } else {
                at.join(".")
            }
        ),
        _ => {}
    }
    Ok(())
}

fn read_safetensors(path: &Path) -> Result<Checkpoint> {
    let bytes = crate::read::bytes(path, crate::read::Follow::Links, crate::read::ANY)?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| {
        anyhow::anyhow!(
            "{}: not a readable safetensors file (truncated or damaged?): {e}",
            path.display()
        )
    })?;
    let mut ck = Checkpoint {
        path: path.to_path_buf(),
        format: "safetensors".into(),
        root: String::new(),
        tensors: BTreeMap::new(),
        outside: Vec::new(),
        integer: Vec::new(),
    };
    for (name, view) in st.tensors() {
        use safetensors::Dtype as S;
        let dtype = match view.dtype() {
            S::F32 => DType::F32,
            S::F64 => DType::F64,
            S::F16 => DType::F16,
            S::BF16 => DType::BF16,
            _ => {
                ck.integer.push(name);
                continue;
            }
        };
        let values = floats(dtype, view.data()).context("internal: float conversion")?;
        ck.tensors
            .insert(name.clone(), checked(path, &name, view.shape().to_vec(), values)?);
    }
    ck.integer.sort();
    Ok(ck)
}

/// Little-endian bytes of a float dtype as `f32`; `None` for the integer dtypes.
fn floats(dtype: DType, b: &[u8]) -> Option<Vec<f32>> {
    let v = match dtype {
        DType::F32 => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        DType::F64 => b
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32)
            .collect(),
        DType::F16 => b
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        DType::BF16 => b
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => return None,
    };
    Some(v)
}

fn checked(path: &Path, name: &str, shape: Vec<usize>, values: Vec<f32>) -> Result<SourceTensor> {
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        bail!(
            "{}: tensor {name} holds a NaN or infinite value (element {i}): the model diverged or the file was altered",
            path.display()
        );
    }
    Ok(SourceTensor { shape, values })
}
