//! A small reader for MATLAB 5 (level 5, not v7.3/HDF5) MAT files: the compressed struct arrays
//! of the Cars196 annotations. Numeric storage types are widened to f64, as MATLAB's class says
//! the values are double even when the file stores them as uint8/uint16.

use anyhow::{Context, Result, bail, ensure};
use flate2::read::ZlibDecoder;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// One MATLAB value.
#[derive(Debug, Clone, PartialEq)]
pub enum MatValue {
    /// Numeric or logical array, column-major, widened to f64.
    Numeric { dims: Vec<usize>, data: Vec<f64> },
    /// Character array (rows joined when it is a single row).
    Char { dims: Vec<usize>, text: String },
    /// Cell array, column-major.
    Cell { dims: Vec<usize>, items: Vec<MatValue> },
    /// Struct array: field names in file order, and one map per element (column-major).
    Struct {
        dims: Vec<usize>,
        fields: Vec<String>,
        items: Vec<BTreeMap<String, MatValue>>,
    },
}

impl MatValue {
    /// The single number of a 1×1 numeric array.
    pub fn scalar(&self) -> Option<f64> {
        match self {
            MatValue::Numeric { data, .. } if data.len() == 1 => Some(data[0]),
            _ => None,
        }
    }
    pub fn text(&self) -> Option<&str> {
        match self {
            MatValue::Char { text, .. } => Some(text),
            _ => None,
        }
    }
}

const MI_INT8: u32 = 1;
const MI_UINT8: u32 = 2;
const MI_INT16: u32 = 3;
const MI_UINT16: u32 = 4;
const MI_INT32: u32 = 5;
const MI_UINT32: u32 = 6;
const MI_SINGLE: u32 = 7;
const MI_DOUBLE: u32 = 9;
const MI_INT64: u32 = 12;
const MI_UINT64: u32 = 13;
const MI_MATRIX: u32 = 14;
const MI_COMPRESSED: u32 = 15;
const MI_UTF8: u32 = 16;
const MI_UTF16: u32 = 17;
const MI_UTF32: u32 = 18;

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'a str,
}

impl<'a> Cursor<'a> {
    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        ensure!(
            self.pos + n <= self.buf.len(),
            "{}: truncated data element at byte {} (need {n} more bytes)",
            self.what,
            self.pos
        );
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }
    /// Reads one tag and its payload; returns (type, payload). Handles the small-element format
    /// and the 8-byte padding that follows normal elements.
    fn element(&mut self) -> Result<(u32, &'a [u8])> {
        let first = self.u32()?;
        if first >> 16 != 0 {
            let ty = first & 0xffff;
            let n = (first >> 16) as usize;
            ensure!(n <= 4, "{}: small data element of {n} bytes", self.what);
            let b = self.take(4)?;
            return Ok((ty, &b[..n]));
        }
        let n = self.u32()? as usize;
        let data = self.take(n)?;
        if first != MI_COMPRESSED {
            let pad = (8 - n % 8) % 8;
            if self.pos + pad <= self.buf.len() {
                self.pos += pad;
            } else {
                self.pos = self.buf.len();
            }
        }
        Ok((first, data))
    }
}

fn widen(ty: u32, b: &[u8], what: &str) -> Result<Vec<f64>> {
    macro_rules! conv {
        ($t:ty, $n:expr) => {
            b.chunks_exact($n)
                .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk size")) as f64)
                .collect()
        };
    }
    Ok(match ty {
        MI_INT8 => b.iter().map(|&v| v as i8 as f64).collect(),
        MI_UINT8 | MI_UTF8 => b.iter().map(|&v| v as f64).collect(),
        MI_INT16 => conv!(i16, 2),
        MI_UINT16 | MI_UTF16 => conv!(u16, 2),
        MI_INT32 => conv!(i32, 4),
        MI_UINT32 | MI_UTF32 => conv!(u32, 4),
        MI_SINGLE => conv!(f32, 4),
        MI_DOUBLE => conv!(f64, 8),
        MI_INT64 => conv!(i64, 8),
        MI_UINT64 => conv!(u64, 8),
        _ => bail!("{what}: unsupported numeric storage type {ty}"),
    })
}

fn parse_matrix(payload: &[u8], what: &str) -> Result<(String, MatValue)> {
    let mut c = Cursor {
        buf: payload,
        pos: 0,
        what,
    };
    if payload.is_empty() {
        return Ok((
            String::new(),
            MatValue::Numeric {
                dims: vec![0, 0],
                data: vec![],
            },
        ));
    }
    let (_, flags) = c.element()?;
    ensure!(flags.len() >= 4, "{what}: array flags too short");
    let class = flags[0];
    let (_, dims_raw) = c.element()?;
    let dims: Vec<usize> = widen(MI_INT32, dims_raw, what)?
        .into_iter()
        .map(|d| d as usize)
        .collect();
    let count = crate::read::declared_len(&dims).with_context(|| overflow(what, &dims))?;
    if matches!(class, 1 | 2) {
        check_room(&c, count, &dims)?;
    }
    let (_, name_raw) = c.element()?;
    let name = String::from_utf8_lossy(name_raw).into_owned();
    let value = match class {
        1 => {
            let mut items = Vec::with_capacity(count);
            for _ in 0..count {
                let (ty, p) = c.element()?;
                ensure!(ty == MI_MATRIX, "{what}: cell element of type {ty}, expected miMATRIX");
                items.push(parse_matrix(p, what)?.1);
            }
            MatValue::Cell { dims, items }
        }
        2 => {
            let (_, len_raw) = c.element()?;
            let len = widen(MI_INT32, len_raw, what)?.first().copied().unwrap_or(0.0) as usize;
            ensure!(len > 0, "{what}: struct field-name length 0");
            let (_, names_raw) = c.element()?;
            let fields: Vec<String> = names_raw
                .chunks(len)
                .map(|ch| {
                    let end = ch.iter().position(|&b| b == 0).unwrap_or(ch.len());
                    String::from_utf8_lossy(&ch[..end]).into_owned()
                })
                .collect();
            let mut items = Vec::with_capacity(count);
            for _ in 0..count {
                let mut m = BTreeMap::new();
                for f in &fields {
                    let (ty, p) = c.element()?;
                    ensure!(ty == MI_MATRIX, "{what}: struct field {f} of type {ty}");
                    m.insert(f.clone(), parse_matrix(p, what)?.1);
                }
                items.push(m);
            }
            MatValue::Struct { dims, fields, items }
        }
        4 => {
            let text = if c.done() {
                String::new()
            } else {
                let (ty, p) = c.element()?;
                let codes = widen(ty, p, what)?;
                if ty == MI_UTF8 {
                    String::from_utf8_lossy(p).into_owned()
                } else {
                    codes
                        .iter()
                        .map(|&v| char::from_u32(v as u32).unwrap_or('\u{fffd}'))
                        .collect()
                }
            };
            MatValue::Char { dims, text }
        }
        6..=15 => {
            let data = if c.done() {
                vec![]
            } else {
                let (ty, p) = c.element()?;
                widen(ty, p, what)?
            };
            ensure!(
                data.len() == count,
                "{what}: numeric array {name} has {} values for dims {dims:?}",
                data.len()
            );
            MatValue::Numeric { dims, data }
        }
        other => bail!("{what}: MATLAB class {other} (variable {name}) is not supported"),
    };
    Ok((name, value))
}

/// Parses a MAT-file from memory into its named variables.
pub fn parse(bytes: &[u8], what: &str) -> Result<BTreeMap<String, MatValue>> {
    ensure!(
        bytes.len() >= 128,
        "{what}: {} bytes is too short for a MAT-file header",
        bytes.len()
    );
    ensure!(
        bytes.starts_with(b"MATLAB 5.0"),
        "{what}: not a MATLAB 5 MAT-file (header does not start with 'MATLAB 5.0'; v7.3 HDF5 files are not supported)"
    );
    ensure!(
        &bytes[126..128] == b"IM",
        "{what}: big-endian MAT-files are not supported"
    );
    let mut c = Cursor {
        buf: &bytes[128..],
        pos: 0,
        what,
    };
    let mut vars = BTreeMap::new();
    while !c.done() {
        let (ty, payload) = c.element()?;
        let inflated;
        let (ty, payload) = if ty == MI_COMPRESSED {
            let mut out = Vec::new();
            ZlibDecoder::new(payload)
                .read_to_end(&mut out)
                .with_context(|| format!("{what}: corrupt zlib stream"))?;
            inflated = out;
            Cursor {
                buf: &inflated,
                pos: 0,
                what,
            }
            .element()?
        } else {
            (ty, payload)
        };
        if ty == MI_MATRIX {
            let (name, value) = parse_matrix(payload, what)?;
            vars.insert(name, value);
        }
    }
    Ok(vars)
}

/// Reads a MAT-file from disk.
pub fn read(path: &Path) -> Result<BTreeMap<String, MatValue>> {
    let bytes = crate::read::bytes(path, crate::read::Follow::Links, crate::read::ANY)?;
    parse(&bytes, &path.display().to_string())
}

/// The error of dimensions whose product does not fit a `usize`.
/// A cell's or struct's every item is an element of 8 bytes at least: a count the bytes left
/// cannot hold is a damaged file, never a reservation of that many items.
fn check_room(c: &Cursor, count: usize, dims: &[usize]) -> Result<()> {
    let left = c.buf.len().saturating_sub(c.pos);
    ensure!(
        count <= left / 8,
        "{}: an array of dimensions {dims:?} declares {count} items; the {left} bytes left hold {} at most (a \
         damaged or non-MAT file)",
        c.what,
        left / 8
    );
    Ok(())
}

fn overflow(what: &str, dims: &[usize]) -> String {
    format!("{what}: the dimensions {dims:?} overflow (a damaged or non-MAT file)")
}
