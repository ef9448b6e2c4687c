//! `--save-examples DIR`: the adversarial images of an attack run as PNG files, one per attacked
//! item, named by the attack and the item's index in the test split, with `index.json` listing
//! them in `ATTACK-index.json` (index, label, file, and the L∞ size of the perturbation applied).
//! The set changes whole (see [`ExampleWriter`]).

use crate::owned::{Change, Ledger};
use anyhow::{Context as _, Result, ensure};
use burn::tensor::Tensor;
use serde::Serialize;
use std::io::Cursor;
use std::path::Path;

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

/// Where a run's examples go: a folder whose files rdml wrote are recorded in its ledger
/// ([`crate::owned`], `.rdml-examples.json`); a new set is staged whole and swapped in with its
/// index, so the folder holds the earlier set or the new one, never a mix, and a file rdml did
/// not write (a user's PNG of the same name) is never replaced or removed.
pub struct ExampleWriter {
    stem: String,
    change: Option<Change>,
    saved: Vec<Example>,
}

/// The ledger of an examples folder.
pub const LEDGER: &str = ".rdml-examples.json";
const WHAT: &str = "⟨save_examples⟩";

impl ExampleWriter {
    /// Checks, before any work, that `dir` can take the set (making it): every file there that
    /// bears this attack's names must be one rdml wrote. An interrupted earlier set is settled.
    pub fn new(dir: &Path, attack_spec: &str) -> Result<Self> {
        crate::run_dir::refuse_own_folder(dir, dir).context(WHAT)?;
        crate::atomic::check_writable(&dir.join("index.json")).context(WHAT)?;
        ensure!(
            !crate::run_dir::is_link(dir),
            "{WHAT}: {} is a symbolic link; rdml does not write through links",
            dir.display()
        );
        let stem = attack_spec.replace(':', "_").replace('=', "-").replace('/', "_");
        let ledger = Ledger::open(dir, LEDGER, WHAT)?;
        let index = index_name(&stem);
        let mine: Vec<String> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| is_ours(&stem, n) || *n == index)
            .collect();
        ledger.check_free(mine.iter().map(String::as_str), WHAT)?;
        Ok(Self {
            stem,
            change: Some(ledger.begin()?),
            saved: vec![],
        })
    }

    fn change(&mut self) -> Result<&mut Change> {
        self.change.as_mut().context("the examples were already written")
    }

    /// Puts the set in place with its index, removing this attack's earlier images that it did
    /// not write again. Returns the number of images written.
    pub fn finish(mut self) -> Result<usize> {
        let index = index_name(&self.stem);
        let bytes = serde_json::to_vec_pretty(&self.saved)?;
        let change = self.change.take().context("the examples were already written")?;
        let kept: std::collections::HashSet<&str> = self.saved.iter().map(|e| e.file.as_str()).collect();
        let stale: Vec<String> = change
            .ledger()
            .names()
            .filter(|n| is_ours(&self.stem, n) && !kept.contains(n))
            .map(str::to_string)
            .collect();
        let mut change = change;
        change.stage(&index, &bytes)?;
        change.commit(&stale, WHAT)?;
        Ok(self.saved.len())
    }
}

impl Drop for ExampleWriter {
    /// A run that failed leaves the folder as it was.
    fn drop(&mut self) {
        if let Some(c) = self.change.take() {
            let _ = c.abandon();
        }
    }
}

fn index_name(stem: &str) -> String {
    format!("{stem}-index.json")
}

/// Whether `name` is one of this attack's images (`STEM-NNNNNN.png`, more digits past 999,999).
fn is_ours(stem: &str, name: &str) -> bool {
    name.strip_prefix(&format!("{stem}-"))
        .and_then(|r| r.strip_suffix(".png"))
        .is_some_and(|n| n.len() >= 6 && n.bytes().all(|b| b.is_ascii_digit()))
}

impl AdversarialSink for ExampleWriter {
    /// Writes the adversarial images `adv` of `items` (c = 1 or 3).
    fn add(&mut self, items: &[usize], labels: &[u32], clean: &Tensor<4>, adv: &Tensor<4>) -> Result<()> {
        let [b, c, h, w] = adv.dims();
        ensure!(
            c == 1 || c == 3,
            "⟨save_examples⟩: images with {c} channels cannot be written as PNG"
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
            self.change()?.stage(&file, &png)?;
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
