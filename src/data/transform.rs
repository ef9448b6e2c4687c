//! Image files to tensors: decode (JPEG/PNG), gray → RGB, resize to `resize × resize`, then a
//! random crop with horizontal flip (training) or a centre crop (test), as robrank's
//! `Resize(256,256) → RandomCrop/CenterCrop(224)`; or, for training, a random-resized crop
//! (Roth et al.'s augmentation; seed 000 Appendix A with 60–100 % of the area).

use anyhow::{Context, Result};
use image::imageops::FilterType;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `data.train_crop`: how a training image is cropped.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum TrainCrop {
    /// robrank's: resize to `resize × resize`, a random `crop × crop` window, a random flip.
    #[default]
    Random,
    /// torchvision's `RandomResizedCrop(crop, scale, ratio)` on the decoded image: a window of
    /// `scale` of the area with aspect ratio in `ratio` (log-uniform), resized to `crop × crop`;
    /// then a random flip when `flip`. Seed 000 Appendix A: scale [0.6, 1.0] (Roth et al.: [0.08, 1.0]).
    RandomResized {
        #[serde(default = "seed_000_scale")]
        scale: [f32; 2],
        #[serde(default = "square_ish")]
        ratio: [f32; 2],
        #[serde(default = "crate::field::yes")]
        flip: bool,
    },
}

fn seed_000_scale() -> [f32; 2] {
    [0.6, 1.0]
}
fn square_ish() -> [f32; 2] {
    [3.0 / 4.0, 4.0 / 3.0]
}

impl TrainCrop {
    pub fn validate(&self) -> Result<()> {
        if let TrainCrop::RandomResized { scale, ratio, .. } = self {
            anyhow::ensure!(
                0.0 < scale[0] && scale[0] <= scale[1] && scale[1] <= 1.0,
                "data.train_crop.scale must be [lo, hi] with 0 < lo ≤ hi ≤ 1, got {scale:?}"
            );
            anyhow::ensure!(
                0.0 < ratio[0] && ratio[0] <= ratio[1] && ratio[1].is_finite(),
                "data.train_crop.ratio must be [lo, hi] with 0 < lo ≤ hi, got {ratio:?}"
            );
        }
        Ok(())
    }
}

/// torchvision's `RandomResizedCrop.get_params`: `(x, y, w, h)` of the window in a `width ×
/// height` image; ten tries, then the centre crop clamped to the ratio range.
pub fn resized_crop_window(
    width: u32,
    height: u32,
    scale: [f32; 2],
    ratio: [f32; 2],
    rng: &mut ChaCha8Rng,
) -> (u32, u32, u32, u32) {
    let area = (width * height) as f64;
    let (lr0, lr1) = ((ratio[0] as f64).ln(), (ratio[1] as f64).ln());
    for _ in 0..10 {
        let target = area * rng.random_range(scale[0] as f64..=scale[1] as f64);
        let aspect = if lr1 > lr0 { rng.random_range(lr0..lr1) } else { lr0 }.exp();
        let w = (target * aspect).sqrt().round() as u32;
        let h = (target / aspect).sqrt().round() as u32;
        if 0 < w && w <= width && 0 < h && h <= height {
            let x = rng.random_range(0..=width - w);
            let y = rng.random_range(0..=height - h);
            return (x, y, w, h);
        }
    }
    let in_ratio = width as f64 / height as f64;
    let (w, h) = if in_ratio < ratio[0] as f64 {
        (width, ((width as f64 / ratio[0] as f64).round() as u32).max(1))
    } else if in_ratio > ratio[1] as f64 {
        (((height as f64 * ratio[1] as f64).round() as u32).max(1), height)
    } else {
        (width, height)
    };
    ((width - w) / 2, (height - h) / 2, w, h)
}

/// Decodes `path` and writes a `3 × crop × crop` image in [0, 1] into `out`; `rng` (training)
/// applies `train_crop`, its absence the centre crop of the test transform.
pub fn load_file(
    path: &Path,
    (resize, crop): (usize, usize),
    train_crop: TrainCrop,
    mut rng: Option<&mut ChaCha8Rng>,
    out: &mut [f32],
) -> Result<()> {
    let mut reader = crate::read::image(path)?;
    reader.limits(decode_limits());
    let img = reader
        .decode()
        .with_context(|| format!("{}: corrupt or unsupported image", path.display()))?
        .to_rgb8();
    if let (Some(rng), TrainCrop::RandomResized { scale, ratio, flip }) = (rng.as_deref_mut(), train_crop) {
        let (x, y, w, h) = resized_crop_window(img.width(), img.height(), scale, ratio, rng);
        let window = image::imageops::crop_imm(&img, x, y, w, h).to_image();
        let img = image::imageops::resize(&window, crop as u32, crop as u32, FilterType::Triangle);
        let flip = flip && rng.random_bool(0.5);
        write_planes(&img, 0, 0, crop, flip, out);
        return Ok(());
    }
    let img = image::imageops::resize(&img, resize as u32, resize as u32, FilterType::Triangle);
    let (x0, y0, flip) = match rng {
        Some(rng) => (
            rng.random_range(0..=resize - crop),
            rng.random_range(0..=resize - crop),
            rng.random_bool(0.5),
        ),
        None => ((resize - crop) / 2, (resize - crop) / 2, false),
    };
    write_planes(&img, x0, y0, crop, flip, out);
    Ok(())
}

/// The `crop × crop` window at `(x0, y0)` of `img`, mirrored when `flip`, as CHW floats.
fn write_planes(img: &image::RgbImage, x0: usize, y0: usize, crop: usize, flip: bool, out: &mut [f32]) {
    let plane = crop * crop;
    for y in 0..crop {
        for x in 0..crop {
            let sx = if flip { x0 + crop - 1 - x } else { x0 + x };
            let p = img.get_pixel(sx as u32, (y0 + y) as u32);
            for c in 0..3 {
                out[c * plane + y * crop + x] = p[c] as f32 / 255.0;
            }
        }
    }
}

/// The largest image side rdml decodes (the papers' images are a few hundred pixels).
pub const MAX_IMAGE_SIDE: u32 = 16_384;
/// The most memory one decoded image may take (a 8K RGB photo is 100 MB).
pub const MAX_IMAGE_BYTES: u64 = 256 << 20;

/// The image decoder's limits: a file that declares a larger image is refused before its pixels
/// are allocated.
pub fn decode_limits() -> image::Limits {
    let mut l = image::Limits::default();
    l.max_image_width = Some(MAX_IMAGE_SIDE);
    l.max_image_height = Some(MAX_IMAGE_SIDE);
    l.max_alloc = Some(MAX_IMAGE_BYTES);
    l
}

/// Whether declared dimensions fit the limits; the error names what was declared.
pub fn check_dimensions(width: u32, height: u32) -> Result<()> {
    let bytes = u64::from(width) * u64::from(height) * 4;
    anyhow::ensure!(
        width <= MAX_IMAGE_SIDE && height <= MAX_IMAGE_SIDE && bytes <= MAX_IMAGE_BYTES,
        "declares {width}×{height} pixels, beyond rdml's limit ({MAX_IMAGE_SIDE} per side and {} MiB decoded)",
        MAX_IMAGE_BYTES >> 20
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// Seed 000 Appendix A: windows of 60–100 % of the area, aspect in [3/4, 4/3], inside the image.
    #[test]
    fn random_resized_windows_cover_60_to_100_percent_of_the_area() {
        let rng = &mut ChaCha8Rng::seed_from_u64(0);
        let (width, height) = (400u32, 300u32);
        let mut fractions = vec![];
        for _ in 0..2000 {
            let (x, y, w, h) = resized_crop_window(width, height, [0.6, 1.0], [0.75, 4.0 / 3.0], rng);
            assert!(x + w <= width && y + h <= height);
            let f = (w * h) as f64 / (width * height) as f64;
            let r = w as f64 / h as f64;
            // Rounding to whole pixels moves the area and the ratio by under 1 %.
            assert!((0.59..=1.0).contains(&f), "area fraction {f}");
            assert!((0.74..=1.35).contains(&r), "aspect {r}");
            fractions.push(f);
        }
        let mean = fractions.iter().sum::<f64>() / fractions.len() as f64;
        let small = fractions.iter().filter(|&&f| f < 0.7).count();
        // Uniform in [0.6, 1] before the windows too wide or tall are redrawn.
        assert!(
            (0.72..0.82).contains(&mean) && small > 300,
            "mean {mean}, {small} under 0.7"
        );
        // A 2:1 image whose windows never fit falls back to the centre crop at ratio 4/3.
        let (x, y, w, h) = resized_crop_window(200, 100, [1.0, 1.0], [0.75, 4.0 / 3.0], rng);
        assert_eq!((x, y, w, h), (33, 0, 133, 100));
        assert!(
            TrainCrop::RandomResized {
                scale: [0.0, 1.0],
                ratio: [0.75, 1.3],
                flip: true
            }
            .validate()
            .is_err()
        );
    }
}
