//! Reading a run's `model.safetensors` with errors a user can act on: a damaged file (truncated,
//! not safetensors, offsets outside the data) is named as damaged, and weights that are NaN or
//! infinite are refused naming the tensor, instead of evaluating to numbers that look real.

use anyhow::{Context, Result, bail, ensure};
use std::path::Path;

/// What to do about a damaged weights file.
const ADVICE: &str =
    "the file is damaged: train the run again, or resume it (train with ⟨resume!⟩) if its checkpoint/ is intact";

/// The bytes of `path` once its layout and every float value have been checked.
pub fn read_checked(path: &Path) -> Result<Vec<u8>> {
    ensure!(
        std::fs::metadata(path).is_ok(),
        "{}: no such weights file",
        path.display()
    );
    let bytes = crate::read::bytes(path, crate::read::Follow::Links, crate::read::ANY)?;
    check(&bytes).with_context(|| format!("{}: {ADVICE}", path.display()))?;
    Ok(bytes)
}

/// Checks a safetensors image: an 8-byte little-endian header length, a JSON header whose
/// tensors' `data_offsets` tile the data that follows, and finite F32/F64 values.
pub fn check(bytes: &[u8]) -> Result<()> {
    ensure!(
        bytes.len() >= 8,
        "{} bytes, shorter than a safetensors header",
        bytes.len()
    );
    let n = u64::from_le_bytes(bytes[..8].try_into()?) as usize;
    ensure!(
        n <= bytes.len() - 8,
        "its header claims {n} bytes but the file holds {} (truncated, or not a safetensors file)",
        bytes.len()
    );
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).context("its header is not the JSON of a safetensors file")?;
    let data = &bytes[8 + n..];
    let mut end = 0usize;
    for (name, t) in header.iter().filter(|(k, _)| *k != "__metadata__") {
        let (dtype, shape, lo, hi) =
            parse_entry(t).with_context(|| format!("tensor {name}: malformed header entry"))?;
        ensure!(
            lo <= hi && hi <= data.len(),
            "tensor {name} lies at bytes {lo}..{hi} of {} (truncated)",
            data.len()
        );
        let width = match dtype {
            "F64" | "I64" | "U64" => 8,
            "F32" | "I32" | "U32" => 4,
            "F16" | "BF16" | "I16" | "U16" => 2,
            _ => 1,
        };
        // Checked: a crafted shape whose product wraps must not pass for the bytes it names.
        let need = shape
            .iter()
            .try_fold(width, |a: usize, &d| a.checked_mul(d))
            .with_context(|| format!("tensor {name}: shape {shape:?} has more elements than memory can hold"))?;
        ensure!(
            need == hi - lo,
            "tensor {name}: shape {shape:?} of {dtype} needs {need} bytes, the header gives {}",
            hi - lo
        );
        // An empty tensor's other dimensions are sizes too (a model's channel counts): none may
        // declare more than the file could hold.
        let declared = shape
            .iter()
            .filter(|&&d| d > 0)
            .try_fold(width, |a: usize, &d| a.checked_mul(d))
            .filter(|&b| b <= data.len().max(width));
        ensure!(
            declared.is_some(),
            "tensor {name}: shape {shape:?} declares dimensions the file could not hold ({} bytes of data)",
            data.len()
        );
        let raw = &data[lo..hi];
        let bad = match dtype {
            "F32" => raw
                .chunks_exact(4)
                .position(|c| !f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite()),
            "F64" => raw
                .chunks_exact(8)
                .position(|c| !f64::from_le_bytes(c.try_into().unwrap_or([0; 8])).is_finite()),
            _ => None,
        };
        if let Some(i) = bad {
            bail!(
                "tensor {name} holds a NaN or infinite value (element {i}): the model diverged or the file was altered"
            );
        }
        end = end.max(hi);
    }
    ensure!(end == data.len(), "{} bytes after the last tensor", data.len() - end);
    Ok(())
}

fn parse_entry(t: &serde_json::Value) -> Option<(&str, Vec<usize>, usize, usize)> {
    let dtype = t.get("dtype")?.as_str()?;
    let shape = t
        .get("shape")?
        .as_array()?
        .iter()
        .map(|d| d.as_u64().map(|d| d as usize))
        .collect::<Option<Vec<_>>>()?;
    let off = t.get("data_offsets")?.as_array()?;
    Some((
        dtype,
        shape,
        off.first()?.as_u64()? as usize,
        off.get(1)?.as_u64()? as usize,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(values: &[f32]) -> Vec<u8> {
        let header = format!(
            "{{\"__metadata__\":{{}},\"fc.weight\":{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[0,{}]}}}}",
            values.len(),
            4 * values.len()
        );
        let mut b = (header.len() as u64).to_le_bytes().to_vec();
        b.extend(header.as_bytes());
        for v in values {
            b.extend(v.to_le_bytes());
        }
        b
    }

    #[test]
    fn damage_and_nan_are_named() {
        assert!(check(&file(&[1.0, 2.0])).is_ok());
        let err = |b: &[u8]| format!("{:#}", check(b).unwrap_err());
        assert!(err(&file(&[1.0, f32::NAN])).contains("tensor fc.weight holds a NaN"));
        assert!(err(&file(&[f32::INFINITY])).contains("fc.weight"));
        let good = file(&[1.0, 2.0]);
        assert!(err(&good[..good.len() - 3]).contains("truncated"));
        assert!(err(&good[..20]).contains("truncated, or not a safetensors file"));
        assert!(err(&[]).contains("shorter than a safetensors header"));
        assert!(err(&[0xff; 64]).contains("not a safetensors file"));
        let mut extra = good.clone();
        extra.push(0);
        assert!(err(&extra).contains("after the last tensor"));
        // 2^32 × 2^32 × 4 bytes wraps to 0 in 64 bits: refused, not read as an empty tensor.
        let header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}";
        let mut wrap = (header.len() as u64).to_le_bytes().to_vec();
        wrap.extend(header.as_bytes());
        assert!(
            err(&wrap).contains("more elements than memory can hold"),
            "{}",
            err(&wrap)
        );
    }
}
