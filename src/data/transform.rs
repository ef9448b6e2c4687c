//! Image files to tensors: decode (JPEG/PNG), gray → RGB, resize to `resize × resize`, then a
//! random crop with horizontal flip (training) or a centre crop (test), as robrank's
//! `Resize(256,256) → RandomCrop/CenterCrop(224)`.

use anyhow::{Context, Result};
use image::imageops::FilterType;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::path::Path;

/// Decodes `path` and writes a `3 × crop × crop` image in [0, 1] into `out`.
pub fn load_file(path: &Path, resize: usize, crop: usize, rng: Option<&mut ChaCha8Rng>, out: &mut [f32]) -> Result<()> {
    let img = image::ImageReader::open(path)
        .with_context(|| format!("cannot open image {}", path.display()))?
        .with_guessed_format()
        .with_context(|| format!("cannot read image {}", path.display()))?
        .decode()
        .with_context(|| format!("{}: corrupt or unsupported image", path.display()))?
        .to_rgb8();
    let img = image::imageops::resize(&img, resize as u32, resize as u32, FilterType::Triangle);
    let (x0, y0, flip) = match rng {
        Some(rng) => (
            rng.random_range(0..=resize - crop),
            rng.random_range(0..=resize - crop),
            rng.random_bool(0.5),
        ),
        None => ((resize - crop) / 2, (resize - crop) / 2, false),
    };
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
    Ok(())
}
