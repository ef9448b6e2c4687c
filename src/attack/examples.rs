//! `--save-examples DIR`: the adversarial images of an attack run as PNG files, one per attacked
//! item, named by the attack and the item's index in the test split, with `index.json` listing
//! them in `ATTACK-index.json` (index, label, file, and the L∞ size of the perturbation applied).

use crate::atomic::{write_atomic, write_json};
use anyhow::{Context as _, Result, ensure};
use burn::tensor::Tensor;
use serde::Serialize;
use std::io::Cursor;
use std::path::{Path, PathBuf};

/// What receives an attack run's images, batch by batch: the clean and adversarial images
/// (`[b, c, h, w]` in [0, 1]) of the test items `items` (indices into the test split, whose
/// labels are `labels`).
pub trait AdversarialSink {
    fn add(&mut self, items: &[usize], labels: &[u32], clean: &Tensor<4>, adv: &Tensor<4>) -> Result<()>;
}

/// One saved image.
#[derive(Debug, Clone, Serialize)]
pub struct Example {
    pub index: usize,
    pub label: u32,
    pub file: String,
    pub linf: f32,
}

/// Where a run's examples go.
pub struct ExampleWriter {
    dir: PathBuf,
    stem: String,
    saved: Vec<Example>,
}

impl ExampleWriter {
    /// Checks that `dir` can be written (making it) before any work. An earlier set of the same
    /// attack loses its index first, so that until this one is finished the folder holds no
    /// index that could describe a mix.
    pub fn new(dir: &Path, attack_spec: &str) -> Result<Self> {
        crate::atomic::check_writable(&dir.join("index.json")).context("--save-examples")?;
        let stem = attack_spec.replace(':', "_").replace('=', "-").replace('/', "_");
        let w = Self {
            dir: dir.to_path_buf(),
            stem,
            saved: vec![],
        };
        crate::run_dir::remove_file(&w.index()).context("--save-examples")?;
        Ok(w)
    }

    fn index(&self) -> PathBuf {
        self.dir.join(format!("{}-index.json", self.stem))
    }

    /// Whether `name` is one of this attack's images (`STEM-NNNNNN.png`).
    fn is_ours(&self, name: &str) -> bool {
        name.strip_prefix(&format!("{}-", self.stem))
            .and_then(|r| r.strip_suffix(".png"))
            .is_some_and(|n| n.len() == 6 && n.bytes().all(|b| b.is_ascii_digit()))
    }

    /// Removes the images of earlier sets of this attack that this one did not write, then
    /// writes `ATTACK-index.json`, last: the folder then holds exactly the set the index lists.
    /// Returns the number of images written.
    pub fn finish(self) -> Result<usize> {
        let kept: std::collections::HashSet<&str> = self.saved.iter().map(|e| e.file.as_str()).collect();
        for e in std::fs::read_dir(&self.dir).with_context(|| format!("cannot read {}", self.dir.display()))? {
            let name = e?.file_name().to_string_lossy().into_owned();
            if self.is_ours(&name) && !kept.contains(name.as_str()) {
                crate::run_dir::remove_file(&self.dir.join(&name))?;
            }
        }
        write_json(&self.index(), &self.saved)?;
        Ok(self.saved.len())
    }
}

impl AdversarialSink for ExampleWriter {
    /// Writes the adversarial images `adv` of `items` (c = 1 or 3).
    fn add(&mut self, items: &[usize], labels: &[u32], clean: &Tensor<4>, adv: &Tensor<4>) -> Result<()> {
        let [b, c, h, w] = adv.dims();
        ensure!(
            c == 1 || c == 3,
            "--save-examples: images with {c} channels cannot be written as PNG"
        );
        let read = |t: &Tensor<4>| crate::host::read(&t.clone().reshape([b, c * h * w]));
        let (x, a) = (read(clean)?, read(adv)?);
        let per = c * h * w;
        for (r, &index) in items.iter().enumerate().take(b) {
            let img = &a[r * per..(r + 1) * per];
            let linf = img
                .iter()
                .zip(&x[r * per..(r + 1) * per])
                .map(|(p, q)| (p - q).abs())
                .fold(0.0f32, f32::max);
            let png = png_bytes(img, [c, h, w])?;
            let file = format!("{}-{index:06}.png", self.stem);
            write_atomic(&self.dir.join(&file), &png)?;
            self.saved.push(Example {
                index,
                label: labels[index],
                file,
                linf,
            });
        }
        Ok(())
    }
}

/// One image (channel-major `[c, h, w]` in [0, 1], c = 1 or 3) as PNG bytes.
pub fn png_bytes(img: &[f32], [c, h, w]: [usize; 3]) -> Result<Vec<u8>> {
    ensure!(c == 1 || c == 3, "images with {c} channels cannot be written as PNG");
    ensure!(
        img.len() == c * h * w,
        "an image of {} values is not {c}×{h}×{w}",
        img.len()
    );
    // Channel-major to interleaved 8-bit pixels.
    let px: Vec<u8> = (0..h * w)
        .flat_map(|i| (0..c).map(move |ch| (ch, i)))
        .map(|(ch, i)| (img[ch * h * w + i].clamp(0.0, 1.0) * 255.0).round() as u8)
        .collect();
    let color = if c == 1 {
        image::ExtendedColorType::L8
    } else {
        image::ExtendedColorType::Rgb8
    };
    let mut png = Cursor::new(vec![]);
    image::write_buffer_with_format(&mut png, &px, w as u32, h as u32, color, image::ImageFormat::Png)
        .context("encoding a PNG")?;
    Ok(png.into_inner())
}
