//! The files `rdml embed` writes: safetensors (its header carrying the model's digest), one
//! NumPy `.npz` archive (stored, uncompressed), or a `.npy` set beside a manifest
//! ([`super::npy_set`]); each written whole, or refused before any work.

use super::npy_set::{self, files};
use super::{Exported, Format};
use crate::atomic::write_atomic;
use anyhow::{Context as _, Result};
use std::path::Path;

/// Writes `e` to `path` in the format its name says; `meta` goes into the safetensors header.
pub fn write(path: &Path, e: &Exported, meta: &[(&str, String)]) -> Result<()> {
    let n = e.len();
    let labels: Vec<i64> = e.labels.iter().map(|&l| l as i64).collect();
    let ids: Vec<i64> = e.ids.iter().map(|&i| i as i64).collect();
    let arrays: [(&str, Array); 4] = [
        ("embeddings", Array::F32(&e.embeddings, vec![n, e.dim])),
        ("labels", Array::I64(&labels, vec![n])),
        ("ids", Array::I64(&ids, vec![n])),
        ("split", Array::U8(&e.split, vec![n])),
    ];
    match Format::of(path)? {
        Format::Safetensors => {
            let bytes: Vec<(String, Vec<u8>, safetensors::Dtype, Vec<usize>)> = arrays
                .iter()
                .map(|(k, a)| (k.to_string(), a.bytes(), a.dtype(), a.shape().to_vec()))
                .collect();
            let views = bytes
                .iter()
                .map(|(k, b, t, s)| Ok((k.clone(), safetensors::tensor::TensorView::new(*t, s.clone(), b)?)))
                .collect::<Result<Vec<_>>>()?;
            let info = meta.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
            let out = safetensors::serialize(views, Some(info)).context("encoding safetensors")?;
            write_atomic(path, &out)
        }
        Format::Npz => {
            let members: Vec<(String, Vec<u8>)> = arrays.iter().map(|(k, a)| (format!("{k}.npy"), a.npy())).collect();
            write_atomic(path, &zip_stored(&members)?)
        }
        Format::Npy => {
            let members = files(path)?
                .into_iter()
                .zip(&arrays)
                .map(|(f, (_, a))| (f, a.npy()))
                .collect();
            npy_set::write(path, members, meta)
        }
    }
}

/// One array to write, little-endian.
enum Array<'a> {
    F32(&'a [f32], Vec<usize>),
    I64(&'a [i64], Vec<usize>),
    U8(&'a [u8], Vec<usize>),
}

impl Array<'_> {
    fn shape(&self) -> &[usize] {
        match self {
            Array::F32(_, s) | Array::I64(_, s) | Array::U8(_, s) => s,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        match self {
            Array::F32(v, _) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Array::I64(v, _) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Array::U8(v, _) => v.to_vec(),
        }
    }

    fn dtype(&self) -> safetensors::Dtype {
        match self {
            Array::F32(..) => safetensors::Dtype::F32,
            Array::I64(..) => safetensors::Dtype::I64,
            Array::U8(..) => safetensors::Dtype::U8,
        }
    }

    /// The NumPy `.npy` file (format 1.0): magic, header dict padded to 64 bytes, data.
    fn npy(&self) -> Vec<u8> {
        let descr = match self {
            Array::F32(..) => "<f4",
            Array::I64(..) => "<i8",
            Array::U8(..) => "|u1",
        };
        let shape = match self.shape() {
            [n] => format!("({n},)"),
            s => format!("({})", s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
        };
        let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        let unpadded = 10 + header.len() + 1;
        header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend((header.len() as u16).to_le_bytes());
        out.extend(header.as_bytes());
        out.extend(self.bytes());
        out
    }
}

/// A zip archive of uncompressed members (what `numpy.savez` writes).
fn zip_stored(members: &[(String, Vec<u8>)]) -> Result<Vec<u8>> {
    let mut out = vec![];
    let mut central = vec![];
    const DATE: u16 = (1 << 5) | 1; // 1980-01-01
    for (name, data) in members {
        let size = u32::try_from(data.len()).context("an array over 4 GiB: write .npy or .safetensors instead")?;
        let offset = u32::try_from(out.len()).context("an archive over 4 GiB: write .npy or .safetensors instead")?;
        let crc = crc32fast::hash(data);
        let fixed = |sig: u32, central: bool| {
            let mut h = sig.to_le_bytes().to_vec();
            if central {
                h.extend(20u16.to_le_bytes()); // made by
            }
            for v in [20u16, 0, 0, 0, DATE] {
                h.extend(v.to_le_bytes());
            }
            h.extend(crc.to_le_bytes());
            h.extend(size.to_le_bytes());
            h.extend(size.to_le_bytes());
            h.extend((name.len() as u16).to_le_bytes());
            h.extend(0u16.to_le_bytes()); // extra
            h
        };
        out.extend(fixed(0x0403_4b50, false));
        out.extend(name.as_bytes());
        out.extend(data);
        let mut c = fixed(0x0201_4b50, true);
        c.extend([0u8; 8]); // comment length, disk, internal and external attributes (2+2+2+... )
        c.extend([0u8; 2]);
        c.extend(offset.to_le_bytes());
        c.extend(name.as_bytes());
        central.push(c);
    }
    let cd_offset = u32::try_from(out.len()).context("an archive over 4 GiB")?;
    let cd: Vec<u8> = central.concat();
    out.extend(&cd);
    out.extend(0x0605_4b50u32.to_le_bytes());
    out.extend([0u8; 4]); // disk numbers
    out.extend((members.len() as u16).to_le_bytes());
    out.extend((members.len() as u16).to_le_bytes());
    out.extend((cd.len() as u32).to_le_bytes());
    out.extend(cd_offset.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_header_is_aligned_and_shaped() {
        let v = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = Array::F32(&v, vec![2, 3]).npy();
        assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
        let hl = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hl) % 64, 0);
        let h = std::str::from_utf8(&b[10..10 + hl]).unwrap();
        assert!(
            h.contains("'shape': (2, 3)") && h.contains("'<f4'") && h.ends_with('\n'),
            "{h}"
        );
        assert_eq!(&b[10 + hl..10 + hl + 4], &1.0f32.to_le_bytes());
        assert_eq!(b.len(), 10 + hl + 24);
    }

    #[test]
    fn zip_has_its_members_and_directory() {
        let z = zip_stored(&[("a.npy".into(), vec![1, 2, 3]), ("b.npy".into(), vec![])]).unwrap();
        assert_eq!(&z[..4], &0x0403_4b50u32.to_le_bytes());
        let eocd = z.len() - 22;
        assert_eq!(&z[eocd..eocd + 4], &0x0605_4b50u32.to_le_bytes());
        assert_eq!(u16::from_le_bytes([z[eocd + 10], z[eocd + 11]]), 2);
        let cd = u32::from_le_bytes(z[eocd + 16..eocd + 20].try_into().unwrap()) as usize;
        assert_eq!(&z[cd..cd + 4], &0x0201_4b50u32.to_le_bytes());
        // The first central header's name follows its 46 fixed bytes.
        assert_eq!(&z[cd + 46..cd + 51], b"a.npy");
    }
}
