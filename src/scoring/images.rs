//! The caller's images and labels (queries, and a gallery) as the attacks take them: checked
//! and named by the Python keywords they came as, labels made dense together.

use crate::data::{ImageSet, Source};
use anyhow::Result;
use std::sync::Arc;

/// The caller's images: `shape` = `[n, c, h, w]`, values in [0, 1], one label per image.
#[derive(Debug, Clone, Default)]
pub struct Images {
    pub images: Vec<f32>,
    pub shape: [usize; 4],
    pub labels: Vec<i64>,
}

/// A gallery as a set, with each query's own image's row in it (`None`: not there).
pub type GallerySet = (ImageSet, Vec<Option<usize>>);

impl Images {
    /// The images checked (shape, range, labels) as an in-memory test set, labels made dense.
    pub fn set(self) -> Result<ImageSet> {
        Ok(Self::sets(self, None)?.0)
    }

    /// The queries and the gallery checked as in-memory sets, their labels made dense together
    /// (a label means one class in both), with each query's own image in the gallery (found by
    /// content, [`crate::data::labelled`]) to leave out of its list; a gallery that is the queries
    /// in any order is read as the queries ranked among themselves.
    pub fn sets(queries: Images, gallery: Option<Images>) -> Result<(ImageSet, Option<GallerySet>)> {
        use crate::data::labelled::{Found, Overlap, own_copies};
        // Compared before the checks below, so only arrays whose rows the labels count.
        let rows = |i: &Images, width: usize| i.labels.len().checked_mul(width) == Some(i.images.len());
        let overlap = match (&gallery, crate::read::declared_len(&queries.shape[1..])) {
            (Some(g), Some(width)) if g.shape[1..] == queries.shape[1..] && rows(&queries, width) && rows(g, width) => {
                own_copies((&queries.images, &queries.labels), (&g.images, &g.labels), width, true)
            }
            _ => Found::apart(),
        };
        if let Some(note) = overlap.note() {
            crate::notes::warn(note);
        }
        // A query's own image more than once in the gallery: the further copies left out of it.
        let gallery = gallery.map(|g| match overlap.copies.is_empty() {
            true => g,
            false => {
                let kept = overlap.kept(g.labels.len());
                g.rows(&kept)
            }
        });
        let gallery = if overlap.overlap == Overlap::Queries {
            None
        } else {
            gallery
        };
        let own = overlap.overlap.own(queries.labels.len());
        let mut ids = crate::data::labelled::DenseIds::default();
        let at_least = if gallery.is_some() { 1 } else { 2 };
        let shape = queries.shape;
        let queries = queries.checked(&mut ids, ("images", "labels"), at_least)?;
        let gallery = match gallery {
            None => None,
            Some(g) => {
                crate::ensure_input!(
                    g.shape[1..] == shape[1..],
                    "gallery: images of shape {:?} (C × H × W); the queries' are {:?}",
                    &g.shape[1..],
                    &shape[1..]
                );
                let g = g.checked(&mut ids, ("gallery", "gallery_labels"), 2)?;
                crate::ensure_input!(
                    queries.labels.iter().any(|l| g.labels.contains(l)),
                    "gallery_labels: no query's class is in the gallery, so no query has a match to rank"
                );
                Some((g, own))
            }
        };
        Ok((queries, gallery))
    }

    /// The images (and labels) of `rows`, in order.
    fn rows(self, rows: &[usize]) -> Self {
        let per = self.labels.len().max(1);
        let width = self.images.len() / per;
        let [_, c, h, w] = self.shape;
        Self {
            images: rows
                .iter()
                .flat_map(|&j| self.images[j * width..(j + 1) * width].iter().copied())
                .collect(),
            shape: [rows.len(), c, h, w],
            labels: rows.iter().map(|&j| self.labels[j]).collect(),
        }
    }

    /// These images as a set named by the keywords `names` (images, labels), at least
    /// `at_least` of them, their labels mapped to dense ids through `ids`.
    fn checked(
        self,
        ids: &mut crate::data::labelled::DenseIds,
        (images, labels): (&str, &str),
        at_least: usize,
    ) -> Result<ImageSet> {
        let [n, c, h, w] = self.shape;
        check_images(&self.images, self.shape).map_err(|e| renamed(e, images))?;
        crate::ensure_input!(
            self.labels.len() == n,
            "{labels}: {} labels for {n} images; expected one per image",
            self.labels.len()
        );
        crate::ensure_input!(
            n >= at_least,
            "{images}: {n} image(s); an attack ranks each item among {}, so at least {at_least} are needed",
            if at_least == 1 { "the gallery" } else { "the others" }
        );
        let dense = ids.ids(&self.labels);
        let source = Source::Floats {
            data: self.images,
            channels: c,
            height: h,
            width: w,
        };
        Ok(ImageSet::new(images, Arc::new(source), (0..n).collect(), dense))
    }
}

/// An input error about `images` told of the keyword `name` instead.
fn renamed(e: anyhow::Error, name: &str) -> anyhow::Error {
    if name == "images" {
        return e;
    }
    let text = format!("{e:#}");
    crate::input_error(
        text.strip_prefix("images")
            .map_or(text.clone(), |rest| format!("{name}{rest}")),
    )
}

/// Images `[n, c, h, w]` as the attacks take them: the shape filled, values finite and in [0, 1].
pub fn check_images(images: &[f32], shape: [usize; 4]) -> Result<()> {
    crate::ensure_input!(
        shape[1..].iter().all(|&s| s > 0),
        "images: shape {shape:?}; expected N × C × H × W with C, H, W ≥ 1"
    );
    let want = shape.iter().try_fold(1usize, |a, &s| a.checked_mul(s));
    crate::ensure_input!(
        want == Some(images.len()),
        "images: {} values for the shape {shape:?}",
        images.len()
    );
    if let Some(i) = images.iter().position(|v| !(0.0..=1.0).contains(v)) {
        let per = shape[1] * shape[2] * shape[3];
        return Err(crate::input_error(format!(
            "images: value {} at image {} lies outside [0, 1]; rdml's budgets are in pixels of images in [0, 1] \
             (divide 8-bit images by 255; normalisation belongs inside the model)",
            images[i],
            i / per
        )));
    }
    Ok(())
}
