//! MNIST-family IDX files (gzipped or raw, big-endian), the format robrank reads for MNIST and
//! Fashion-MNIST.

use anyhow::{Context, Result, bail};
use flate2::read::GzDecoder;
use std::io::Read;
use std::path::Path;

const IMAGE_MAGIC: u32 = 2051;
const LABEL_MAGIC: u32 = 2049;

/// Images as read from an IDX file: `n` images of `rows × cols` bytes.
#[derive(Debug, Clone)]
pub struct IdxImages {
    pub n: usize,
    pub rows: usize,
    pub cols: usize,
    pub pixels: Vec<u8>,
}

/// Reads a whole file, inflating it when it starts with the gzip magic bytes.
fn read_maybe_gz(path: &Path) -> Result<Vec<u8>> {
    let raw = crate::read::bytes(path, crate::read::Follow::Links, crate::read::ANY)?;
    if raw.len() >= 2 && raw[0] == 0x1f && raw[1] == 0x8b {
        let mut out = Vec::new();
        GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .with_context(|| format!("{}: corrupt gzip stream", path.display()))?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

fn be_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Parses an IDX image file (magic 2051) from bytes; `what` names the file in errors.
pub fn parse_images(bytes: &[u8], what: &str) -> Result<IdxImages> {
    if bytes.len() < 16 {
        bail!(
            "{what}: {} bytes is too short for an IDX image header (16 bytes)",
            bytes.len()
        );
    }
    let magic = be_u32(bytes, 0);
    if magic != IMAGE_MAGIC {
        bail!("{what}: IDX magic {magic}, expected {IMAGE_MAGIC} for an image file");
    }
    let n = be_u32(bytes, 4) as usize;
    let rows = be_u32(bytes, 8) as usize;
    let cols = be_u32(bytes, 12) as usize;
    if rows == 0 || cols == 0 {
        bail!("{what}: the header declares images of {rows}x{cols} pixels; an image holds one at least");
    }
    let want = n.checked_mul(rows).and_then(|v| v.checked_mul(cols)).with_context(|| {
        format!("{what}: the header's dimensions {n} × {rows} × {cols} overflow (a damaged or non-IDX file)")
    })?;
    if bytes.len() - 16 != want {
        bail!(
            "{what}: header says {n} images of {rows}x{cols} ({want} bytes) but the file holds {} bytes of pixels",
            bytes.len() - 16
        );
    }
    Ok(IdxImages {
        n,
        rows,
        cols,
        pixels: bytes[16..].to_vec(),
    })
}

/// Parses an IDX label file (magic 2049) from bytes.
pub fn parse_labels(bytes: &[u8], what: &str) -> Result<Vec<u8>> {
    if bytes.len() < 8 {
        bail!(
            "{what}: {} bytes is too short for an IDX label header (8 bytes)",
            bytes.len()
        );
    }
    let magic = be_u32(bytes, 0);
    if magic != LABEL_MAGIC {
        bail!("{what}: IDX magic {magic}, expected {LABEL_MAGIC} for a label file");
    }
    let n = be_u32(bytes, 4) as usize;
    if bytes.len() - 8 != n {
        bail!("{what}: header says {n} labels but the file holds {}", bytes.len() - 8);
    }
    Ok(bytes[8..].to_vec())
}

/// Reads an image file and its label file and checks that their counts agree.
pub fn read_pair(images: &Path, labels: &Path) -> Result<(IdxImages, Vec<u8>)> {
    let img = parse_images(&read_maybe_gz(images)?, &images.display().to_string())?;
    let lab = parse_labels(&read_maybe_gz(labels)?, &labels.display().to_string())?;
    if img.n != lab.len() {
        bail!(
            "{} holds {} images but {} holds {} labels",
            images.display(),
            img.n,
            labels.display(),
            lab.len()
        );
    }
    Ok((img, lab))
}

/// Finds `<stem>-images-idx3-ubyte[.gz]` and `<stem>-labels-idx1-ubyte[.gz]` in `dir`.
pub fn find_pair(dir: &Path, stem: &str) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    if let Ok(m) = std::fs::metadata(dir)
        && !m.is_dir()
    {
        bail!(
            "{}: is {}, not a folder (data.root, or ⟨data⟩, must name the folder of the IDX files)",
            dir.display(),
            crate::read::kind(&m).unwrap_or("a file")
        );
    }
    anyhow::ensure!(
        dir.is_dir(),
        "{}: no such folder (data.root, or ⟨data⟩, must name the folder of the IDX files)",
        dir.display()
    );
    let find = |kind: &str| -> Result<std::path::PathBuf> {
        for name in [format!("{stem}-{kind}-ubyte.gz"), format!("{stem}-{kind}-ubyte")] {
            let p = dir.join(&name);
            if crate::read::is_file(&p, crate::read::Follow::Links)? {
                return Ok(p);
            }
        }
        bail!("{}: no {stem}-{kind}-ubyte[.gz] file", dir.display())
    };
    Ok((find("images-idx3")?, find("labels-idx1")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(magic: u32, dims: &[u32]) -> Vec<u8> {
        let mut v = magic.to_be_bytes().to_vec();
        for d in dims {
            v.extend(d.to_be_bytes());
        }
        v
    }

    #[test]
    fn parses_and_rejects() {
        let mut img = header(2051, &[2, 2, 2]);
        img.extend([1, 2, 3, 4, 5, 6, 7, 8]);
        let p = parse_images(&img, "x").unwrap();
        assert_eq!((p.n, p.rows, p.cols), (2, 2, 2));
        assert_eq!(p.pixels[7], 8);
        let err = parse_images(&img[..20], "x").unwrap_err().to_string();
        assert!(err.contains("8 bytes"), "{err}");
        // Images of no pixels (issue 52: a panic once they reached a model).
        let err = parse_images(&header(2051, &[10, 0, 0]), "x").unwrap_err().to_string();
        assert!(err.contains("images of 0x0 pixels"), "{err}");
        let err = parse_labels(&img, "lab.gz").unwrap_err().to_string();
        assert!(err.contains("lab.gz") && err.contains("2049"), "{err}");
    }
}
