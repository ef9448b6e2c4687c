//! The worked example of a data set (issue 39): this file and one line of the registry in
//! `data/mod.rs` (`"example-stripes" => ExampleStripes(example::Stripes)`, under `#[cfg(test)]`)
//! make `data.dataset = "example-stripes"` a data set every command reads. Four classes of 1×8×8
//! images, each class a horizontal stripe at its own row, with seeded noise.

use super::dataset::Dataset;
use super::request::DataRequest;
use super::set::{EvalSet, ImageSet, Source, Splits};
use anyhow::Result;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

pub struct Stripes;

/// `n` images of each of 4 classes; item `i` is of class `i % 4`.
fn stripes(name: &str, n: usize, rng: &mut ChaCha8Rng) -> ImageSet {
    let mut data = Vec::with_capacity(4 * n * 64);
    for i in 0..4 * n {
        let row = 2 * (i % 4);
        data.extend((0..64).map(|p| if p / 8 == row { 0.9 } else { 0.1 } + rng.random::<f32>() * 0.05));
    }
    let source = Source::Floats {
        data,
        channels: 1,
        height: 8,
        width: 8,
    };
    ImageSet::new(
        name,
        Arc::new(source),
        (0..4 * n).collect(),
        (0..4 * n).map(|i| (i % 4) as u32).collect(),
    )
}

impl Dataset for Stripes {
    fn load(&self, r: &DataRequest) -> Result<Splits> {
        let mut rng = ChaCha8Rng::seed_from_u64(r.seed);
        let train = stripes("stripes/train", 8, &mut rng);
        let query = stripes("stripes/test", 4, &mut rng);
        Ok(Splits {
            train,
            test: EvalSet { query, gallery: None },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{DataConfig, DatasetKind};

    #[test]
    fn a_data_set_is_its_file_and_one_registry_line() {
        let cfg: DataConfig = toml::from_str("dataset = \"example-stripes\"\nresize = 8\ncrop = 8").unwrap();
        assert_eq!(cfg.dataset, DatasetKind::ExampleStripes);
        assert!(DatasetKind::all().contains(&DatasetKind::ExampleStripes));
        let s = cfg.load(3).unwrap();
        assert_eq!((s.train.len(), s.test.query.len()), (32, 16));
        assert_eq!(s.test.query.labels[..5], [0, 1, 2, 3, 0]);
        // The test side alone is the whole load's (the default of `Dataset::load_test`).
        assert_eq!(cfg.load_test(3).unwrap().query.labels, s.test.query.labels);
        // In memory, not image files: `data.train_crop` is refused for it, naming it.
        let bad: Result<DataConfig, _> = toml::from_str(
            "dataset = \"example-stripes\"\nresize = 8\ncrop = 8\ntrain_crop = { kind = \"random-resized\", scale = [0.6, 1.0] }",
        );
        let e = bad.unwrap().validate().unwrap_err().to_string();
        assert!(
            e.contains("data.dataset = \"example-stripes\"") && e.contains("(cub, cars, sop, inshop, folder)"),
            "{e}"
        );
    }
}
