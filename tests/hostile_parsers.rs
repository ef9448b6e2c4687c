//! Generated hostile input for every reader of user files: the list files of CUB, SOP and
//! In-Shop, and the IDX, MATLAB 5 and safetensors parsers, each fed seeded mutations of a valid
//! file (bytes flipped, cut, repeated, numbers and paths swapped for hostile ones). Every run
//! ends in a value or an error, never a panic; a list that loads names only files inside its
//! data folder; a parser never holds more than a bounded multiple of its input (issue 28).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rdml::data::{DataConfig, DatasetKind, Source};
use std::path::{Path, PathBuf};

const CASES: usize = 300;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rdml-hostile-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// One seeded mutation of `good`: bytes flipped, a cut, a repeated slice, or a hostile token
/// (a huge or negative number, a path that climbs out, an absolute path) spliced in.
fn mutate(good: &[u8], rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut b = good.to_vec();
    for _ in 0..rng.random_range(1..4) {
        if b.is_empty() {
            b.push(0);
        }
        let at = rng.random_range(0..b.len());
        match rng.random_range(0..5) {
            0 => b[at] ^= 1 << rng.random_range(0..8),
            1 => b.truncate(at),
            2 => {
                let end = (at + rng.random_range(1..64)).min(b.len());
                let slice = b[at..end].to_vec();
                b.splice(at..at, slice);
            }
            3 => b[at] = [0u8, 0xff, b' ', b'\n', b'.', b'/'][rng.random_range(0..6)],
            _ => {
                let tokens: [&[u8]; 7] = [
                    b"4294967299",
                    b"-1",
                    b"99999999999999999999",
                    b"../../../../etc/passwd",
                    b"/etc/passwd",
                    b"\xff\xfe",
                    b"1e309",
                ];
                b.splice(at..at, tokens[rng.random_range(0..tokens.len())].iter().copied());
            }
        }
    }
    b
}

/// Runs `f` on every mutation of `good`; a panic fails with the case's seed.
fn each_mutation(name: &str, good: &[u8], mut f: impl FnMut(&[u8])) {
    for seed in 0..CASES as u64 {
        let bytes = mutate(good, &mut ChaCha8Rng::seed_from_u64(seed));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&bytes)));
        assert!(
            r.is_ok(),
            "{name}: seed {seed} panicked on {:?}",
            String::from_utf8_lossy(&bytes)
        );
    }
}

fn cfg(kind: DatasetKind, root: &Path) -> DataConfig {
    let mut c: DataConfig = toml::from_str("dataset = \"folder\"").unwrap();
    c.dataset = kind;
    c.root = Some(root.to_path_buf());
    c.resize = 16;
    c.crop = 12;
    c
}

/// Every file a loaded split names lies under `root`, lexically (no `..`, no other root).
fn inside(splits: &rdml::data::Splits, root: &Path) {
    let mut sets = vec![&splits.train, &splits.test.query];
    sets.extend(splits.test.gallery.as_ref());
    for s in sets {
        if let Source::Files { paths, .. } = &*s.source {
            for p in paths {
                assert!(p.starts_with(root), "{} outside {}", p.display(), root.display());
                assert!(
                    p.components().all(|c| !matches!(c, std::path::Component::ParentDir)),
                    "{}",
                    p.display()
                );
            }
        }
    }
}

#[test]
fn list_files_never_panic_or_name_a_file_outside_their_folder() {
    let lists: [(DatasetKind, &str, &str); 3] = [
        (
            DatasetKind::Cub,
            "images.txt",
            "1 001.A/x.png\n2 001.A/y.png\n3 150.B/z.png\n4 150.B/w.png\n",
        ),
        (
            DatasetKind::Sop,
            "Ebay_train.txt",
            "image_id class_id super_class_id path\n1 1 1 bike_final/a.JPG\n2 1 1 bike_final/b.JPG\n3 2 1 bike_final/c.JPG\n",
        ),
        (
            DatasetKind::Inshop,
            "Eval/list_eval_partition.txt",
            "4\nimage_name item_id evaluation_status\nimg/a.jpg id_00000001 train\nimg/b.jpg id_00000001 train\nimg/c.jpg id_00000002 query\nimg/d.jpg id_00000002 gallery\n",
        ),
    ];
    for (kind, file, good) in lists {
        let root = tmp(&format!("{kind:?}"));
        let list = root.join(file);
        std::fs::create_dir_all(list.parent().unwrap()).unwrap();
        if kind == DatasetKind::Sop {
            std::fs::write(
                root.join("Ebay_test.txt"),
                "image_id class_id super_class_id path\n9 3 1 bike_final/t.JPG\n",
            )
            .unwrap();
        }
        let c = cfg(kind, &root);
        std::fs::write(&list, good).unwrap();
        inside(&c.load(0).unwrap(), &root);
        each_mutation(file, good.as_bytes(), |bytes| {
            std::fs::write(&list, bytes).unwrap();
            if let Ok(s) = c.load(0) {
                inside(&s, &root);
            }
        });
        let _ = std::fs::remove_dir_all(root);
    }
}

#[test]
fn binary_parsers_never_panic_and_stay_bounded() {
    // IDX: a 3-image 4×4 file and its labels.
    let mut images = vec![0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 4];
    images.extend((0..48).map(|i| i as u8));
    let labels = [0u8, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9];
    rdml::data::idx::parse_images(&images, "images").unwrap();
    rdml::data::idx::parse_labels(&labels, "labels").unwrap();
    each_mutation("idx images", &images, |b| {
        if let Ok(i) = rdml::data::idx::parse_images(b, "images") {
            // Pixels are the file's own bytes: never more than it holds.
            assert!(
                i.pixels.len() <= b.len(),
                "{} pixels from {} bytes",
                i.pixels.len(),
                b.len()
            );
        }
    });
    each_mutation("idx labels", &labels, |b| {
        if let Ok(l) = rdml::data::idx::parse_labels(b, "labels") {
            assert!(l.len() <= b.len());
        }
    });
    // MATLAB 5: the Cars196 fixture.
    let mat = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cars_annos.mat")).unwrap();
    rdml::data::mat::parse(&mat, "cars_annos.mat").unwrap();
    each_mutation("mat", &mat, |b| {
        let _ = rdml::data::mat::parse(b, "cars_annos.mat");
    });
    // safetensors: a two-tensor file.
    let a = [1.0f32, 2.0, 3.0, 4.0];
    let bytes_a: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
    let views = vec![
        (
            "a".to_string(),
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2, 2], &bytes_a).unwrap(),
        ),
        (
            "b".to_string(),
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4], &bytes_a).unwrap(),
        ),
    ];
    let st = safetensors::serialize(views, None).unwrap();
    rdml::model::weights_file::check(&st).unwrap();
    each_mutation("safetensors", &st, |b| {
        let _ = rdml::model::weights_file::check(b);
    });
}

/// A MAT struct or cell whose dimensions declare more items than its bytes could hold is a
/// damaged file, said as one: never a reservation of 2^62 items (a capacity-overflow panic).
#[test]
fn a_mat_struct_declaring_more_items_than_its_bytes_is_refused() {
    fn element(ty: u32, payload: &[u8]) -> Vec<u8> {
        let mut e = [ty.to_le_bytes(), (payload.len() as u32).to_le_bytes()].concat();
        e.extend(payload);
        e.resize(e.len().div_ceil(8) * 8, 0);
        e
    }
    for class in [1u32, 2] {
        let side = (i32::MAX as u32).to_le_bytes();
        let mut payload = element(6, &[class.to_le_bytes(), [0; 4]].concat());
        payload.extend(element(5, &[side, side].concat()));
        payload.extend(element(1, b"annotations"));
        payload.extend([5, 0, 4, 0, 32, 0, 0, 0]); // field-name length 32, a small element
        payload.extend(element(1, &[b'x'; 32]));
        let mut file = b"MATLAB 5.0 MAT-file".to_vec();
        file.resize(124, b' ');
        file.extend([0, 1, b'I', b'M']);
        file.extend(element(14, &payload));
        let e = format!("{:#}", rdml::data::mat::parse(&file, "cars_annos.mat").unwrap_err());
        assert!(e.contains("declares 4611686014132420609 items"), "class {class}: {e}");
    }
}
