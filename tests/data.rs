//! Loaders on small fixtures written in each data set's on-disk format, and their errors.

use rdml::data::{DataConfig, DatasetKind, loader};
use std::path::{Path, PathBuf};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rdml-data-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn png(path: &Path, value: u8, gray: bool) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    if gray {
        image::GrayImage::from_pixel(40, 30, image::Luma([value]))
            .save(path)
            .unwrap();
    } else {
        image::RgbImage::from_pixel(40, 30, image::Rgb([value, 0, 255]))
            .save(path)
            .unwrap();
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

#[test]
fn folder_tree_split_transform_and_corrupt_image() {
    let root = tmp("folder");
    for (c, v) in [("a", 10u8), ("b", 20), ("c", 30), ("d", 40)] {
        for i in 0..3 {
            png(&root.join(c).join(format!("{i}.png")), v, c == "a");
        }
    }
    let s = cfg(DatasetKind::Folder, &root).load(0).unwrap();
    assert_eq!(s.train.len(), 6); // classes a, b
    assert_eq!(s.test.query.len(), 6); // classes c, d
    assert_eq!(s.train.item_shape(), [3, 12, 12]);
    let b = loader::load_batch(&s.train, &[0, 3], Some(1)).unwrap();
    // Gray → RGB: all three channels of class a hold 10/255; class b is (20, 0, 255).
    let plane = 144;
    assert!((b.images[0] - 10.0 / 255.0).abs() < 1e-6 && (b.images[2 * plane] - 10.0 / 255.0).abs() < 1e-6);
    let o = 3 * plane;
    assert!((b.images[o] - 20.0 / 255.0).abs() < 1e-6 && b.images[o + plane] == 0.0 && b.images[o + 2 * plane] == 1.0);
    // A corrupt JPEG is an error that names the file.
    std::fs::write(root.join("c").join("9.jpg"), b"\xff\xd8\xff\xe0 not really a jpeg").unwrap();
    let s = cfg(DatasetKind::Folder, &root).load(0).unwrap();
    let pos = s.test.query.indices.iter().position(|&i| matches!(&*s.test.query.source, rdml::data::Source::Files { paths, .. } if paths[i].ends_with("9.jpg"))).unwrap();
    let err = format!("{:#}", loader::load_batch(&s.test.query, &[pos], None).unwrap_err());
    assert!(err.contains("9.jpg") && err.contains("corrupt"), "{err}");
    // A FIFO named like an image (issue 52: `rdml train` waited on it forever): refused by its
    // type, by the header check and by the loader, within a bound (a regression fails, not hangs).
    #[cfg(unix)]
    {
        std::fs::remove_file(root.join("c").join("9.jpg")).unwrap();
        let pipe = root.join("c").join("pipe.png");
        let c = std::ffi::CString::new(pipe.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let r = root.clone();
        std::thread::spawn(move || {
            let s = cfg(DatasetKind::Folder, &r).load(0).unwrap();
            let checked = rdml::data::check::files(&s.test.query).map_err(|e| format!("{e:#}"));
            let pos = s.test.query.indices.iter().position(|&i| matches!(&*s.test.query.source, rdml::data::Source::Files { paths, .. } if paths[i].ends_with("pipe.png"))).unwrap();
            let loaded = loader::load_batch(&s.test.query, &[pos], None)
                .map(|_| ())
                .map_err(|e| format!("{e:#}"));
            tx.send((checked, loaded)).unwrap();
        });
        let (checked, loaded) = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("a FIFO read must not wait");
        for err in [checked.unwrap_err(), loaded.unwrap_err()] {
            assert!(err.contains("pipe.png is a named pipe (FIFO), not a file"), "{err}");
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn cub_sop_inshop_lists_and_their_errors() {
    let root = tmp("cub");
    png(&root.join("images/001.A/x.png"), 1, false);
    png(&root.join("images/150.B/y.png"), 2, false);
    std::fs::write(root.join("images.txt"), "1 001.A/x.png\n2 150.B/y.png\n").unwrap();
    let s = cfg(DatasetKind::Cub, &root).load(0).unwrap();
    assert_eq!(
        (s.train.labels.clone(), s.test.query.labels.clone()),
        (vec![0], vec![149])
    );
    std::fs::write(root.join("images.txt"), "1 001.A/x.png\n2 abc.B/y.png\n").unwrap();
    let err = format!("{:#}", cfg(DatasetKind::Cub, &root).load(0).unwrap_err());
    assert!(err.contains("images.txt:2") && err.contains("abc"), "{err}");

    let sop = tmp("sop");
    std::fs::write(
        sop.join("Ebay_train.txt"),
        "image_id class_id super_class_id path\n1 1 1 bike_final/a.JPG\n2 1 1 bike_final/b.JPG\n",
    )
    .unwrap();
    std::fs::write(
        sop.join("Ebay_test.txt"),
        "image_id class_id super_class_id path\n59552 11319 1 bike_final/c.JPG\n",
    )
    .unwrap();
    let s = cfg(DatasetKind::Sop, &sop).load(0).unwrap();
    assert_eq!((s.train.len(), s.test.query.labels[0]), (2, 11318));
    std::fs::write(sop.join("Ebay_test.txt"), "header\n1 2 3\n").unwrap();
    let err = format!("{:#}", cfg(DatasetKind::Sop, &sop).load(0).unwrap_err());
    assert!(err.contains("Ebay_test.txt:2"), "{err}");

    let shop = tmp("inshop");
    std::fs::create_dir_all(shop.join("Eval")).unwrap();
    std::fs::write(
        shop.join("Eval/list_eval_partition.txt"),
        "3\nimage_name item_id evaluation_status\nimg/a.jpg id_00000001 train\nimg/b.jpg id_00000002 query\nimg/c.jpg id_00000002 gallery\n",
    )
    .unwrap();
    let s = cfg(DatasetKind::Inshop, &shop).load(0).unwrap();
    assert_eq!(s.test.gallery.as_ref().unwrap().labels, vec![2]);
    std::fs::write(
        shop.join("Eval/list_eval_partition.txt"),
        "1\nh\nimg/a.jpg id_1 validation\n",
    )
    .unwrap();
    let err = format!("{:#}", cfg(DatasetKind::Inshop, &shop).load(0).unwrap_err());
    assert!(
        err.contains("list_eval_partition.txt:3") && err.contains("validation"),
        "{err}"
    );
    for d in [root, sop, shop] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Paths read from list files stay inside the data folder: `..` components and absolute paths
/// are refused with the file, line and value named (issue 28, family 4).
#[test]
fn list_file_paths_never_leave_the_data_folder() {
    let root = tmp("escape-cub");
    let refused = |kind: DatasetKind, root: &Path, at: &str, value: &str| {
        let err = format!("{:#}", cfg(kind, root).load(0).unwrap_err());
        assert!(
            err.contains(at) && err.contains(value) && err.contains("leaves the data folder"),
            "{err}"
        );
    };
    for bad in [
        "102.C102/../../../../secret/s0.png",
        "/etc/passwd",
        "001.A/./../../x.png",
    ] {
        std::fs::write(root.join("images.txt"), format!("1 001.A/x.png\n2 {bad}\n")).unwrap();
        refused(DatasetKind::Cub, &root, "images.txt:2", bad);
    }
    let sop = tmp("escape-sop");
    let head = "image_id class_id super_class_id path\n";
    std::fs::write(sop.join("Ebay_train.txt"), format!("{head}1 1 1 ../../outside.JPG\n")).unwrap();
    std::fs::write(sop.join("Ebay_test.txt"), format!("{head}2 2 1 bike_final/c.JPG\n")).unwrap();
    refused(DatasetKind::Sop, &sop, "Ebay_train.txt:2", "../../outside.JPG");
    let shop = tmp("escape-inshop");
    std::fs::create_dir_all(shop.join("Eval")).unwrap();
    std::fs::write(
        shop.join("Eval/list_eval_partition.txt"),
        "1\nimage_name item_id evaluation_status\n/img/a.jpg id_00000001 train\n",
    )
    .unwrap();
    refused(DatasetKind::Inshop, &shop, "list_eval_partition.txt:3", "/img/a.jpg");
    for d in [root, sop, shop] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn missing_files_are_named() {
    let root = tmp("missing");
    let err = format!("{:#}", cfg(DatasetKind::FashionMnist, &root).load(0).unwrap_err());
    assert!(err.contains("train-images-idx3-ubyte"), "{err}");
    let err = format!(
        "{:#}",
        cfg(DatasetKind::FashionMnist, &root.join("nope")).load(0).unwrap_err()
    );
    assert!(err.contains("nope: no such folder"), "{err}");
    let err = format!("{:#}", cfg(DatasetKind::Cars, &root).load(0).unwrap_err());
    assert!(err.contains("cars_annos.mat"), "{err}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn cars_annos_mat_fixture() {
    // tests/fixtures/cars_annos.mat: written by scipy.io.savemat(do_compression=True) with the
    // field layout of the real file, numeric fields stored as uint8/uint16.
    let root = tmp("cars");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cars_annos.mat"),
        root.join("cars_annos.mat"),
    )
    .unwrap();
    let a = rdml::data::cars::read_annotations(&root.join("cars_annos.mat")).unwrap();
    assert_eq!(a.len(), 6);
    assert_eq!(a[3], ("car_ims/000004.jpg".to_string(), 99));
    let s = cfg(DatasetKind::Cars, &root).load(0).unwrap();
    assert_eq!(s.train.labels, vec![0, 0, 97]);
    assert_eq!(s.test.query.labels, vec![98, 195, 149]);
    let _ = std::fs::remove_dir_all(&root);
}

/// `data.train_crop = { kind = "random-resized" }` reaches the training images only; the test
/// side keeps the centre crop; a non-file data set refuses it.
#[test]
fn random_resized_crop_changes_training_images_only() {
    let root = tmp("rrc");
    for c in ["a", "b", "c", "d"] {
        let p = root.join(c).join("0.png");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        image::RgbImage::from_fn(40, 30, |x, y| image::Rgb([(x * 6) as u8, (y * 8) as u8, 0]))
            .save(&p)
            .unwrap();
    }
    let robrank = cfg(DatasetKind::Folder, &root);
    let mut rrc = cfg(DatasetKind::Folder, &root);
    rrc.train_crop = toml::from_str("kind = \"random-resized\"").unwrap();
    let (a, b) = (robrank.load(0).unwrap(), rrc.load(0).unwrap());
    let train = |s: &rdml::data::Splits| loader::load_batch(&s.train, &[0, 1], Some(7)).unwrap().images;
    let test = |s: &rdml::data::Splits| loader::load_batch(&s.test.query, &[0, 1], None).unwrap().images;
    assert_ne!(train(&a), train(&b));
    assert_eq!(test(&a), test(&b));
    assert_eq!(
        train(&b),
        train(&rrc.load(0).unwrap()),
        "seeded: the same crop every run"
    );
    let mut fashion: DataConfig = toml::from_str("dataset = \"fashion-mnist-embedded\"").unwrap();
    fashion.train_crop = rrc.train_crop;
    let err = format!("{:#}", fashion.load(0).err().unwrap());
    assert!(err.contains("data.train_crop"), "{err}");
    let _ = std::fs::remove_dir_all(&root);
}

/// Numbers that would wrap at the type they are read into, and repeated metric names, are
/// refused with the file, line or key named (issue 28, family 6).
#[test]
fn values_that_would_wrap_or_repeat_are_refused() {
    let sop = tmp("wrap-sop");
    let head = "image_id class_id super_class_id path\n";
    std::fs::write(sop.join("Ebay_train.txt"), format!("{head}1 4294967299 1 a/x.JPG\n")).unwrap();
    std::fs::write(sop.join("Ebay_test.txt"), format!("{head}2 3 1 a/y.JPG\n")).unwrap();
    let err = format!("{:#}", cfg(DatasetKind::Sop, &sop).load(0).unwrap_err());
    assert!(
        err.contains("Ebay_train.txt:2: class_id 4294967299 is out of range"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(sop);
    let err = format!(
        "{:#}",
        rdml::config::Experiment::load("quickstart", &["eval.recall_ks=[1, 1, 2]".into()]).unwrap_err()
    );
    assert!(err.contains("eval.recall_ks lists k = 1 twice"), "{err}");
    // A key set twice: the last value, with a word.
    let twice: Vec<String> = vec!["seed=1".into(), "seed = 2".into(), "eval.nmi=false".into()];
    assert_eq!(rdml::config::Experiment::load("quickstart", &twice).unwrap().seed, 2);
    assert_eq!(
        rdml::config::repeated_overrides(&twice),
        vec!["seed is set more than once (1 then 2): 2, the last, is used".to_string()]
    );
    rdml::config::Experiment::load("quickstart", &["seed=1".into(), "seed=1".into()]).unwrap();
    // A command's own option is named as the caller gave it, never as a `--set` they did not
    // write (issue 51: Python showed `epochs=1` as `set= train.epochs=1`).
    let o = rdml::config::command_overrides(&["train.epochs=3".into(), "loss.margin=\"x\"".into()], Some(1), Some(2));
    assert_eq!(
        rdml::config::repeated_overrides(&o),
        vec![
            "train.epochs is given more than once (⟨set⟩ train.epochs=3, then ⟨epochs⟩ 1): the last is used"
                .to_string()
        ]
    );
    let e = format!("{:#}", rdml::config::Experiment::load("quickstart", &o).unwrap_err());
    let words = |w| rdml::field::render(&e, w);
    assert!(
        words(rdml::field::Words::CommandLine)
            .contains("with --set train.epochs=3 --set loss.margin=\"x\" --epochs 1 --max-batches 2:"),
        "{e}"
    );
    assert!(
        words(rdml::field::Words::Python).contains("epochs=1 max_batches=2:"),
        "{}",
        words(rdml::field::Words::Python)
    );
    let exp =
        rdml::config::Experiment::load("quickstart", &rdml::config::command_overrides(&[], Some(1), Some(2))).unwrap();
    assert_eq!((exp.train.epochs, exp.train.max_batches), (1, Some(2)));
}

/// A PNG whose header declares `w`×`h` pixels over a few bytes of data (a decompression bomb).
fn bomb(path: &Path, w: u32, h: u32) {
    let chunk = |t: &[u8], d: &[u8]| {
        let mut c = (d.len() as u32).to_be_bytes().to_vec();
        c.extend(t);
        c.extend(d);
        c.extend(crc32fast::hash(&[t, d].concat()).to_be_bytes());
        c
    };
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend(h.to_be_bytes());
    ihdr.extend([8, 0, 0, 0, 0]);
    let mut z = flate2::write::ZlibEncoder::new(vec![], flate2::Compression::best());
    std::io::Write::write_all(&mut z, &vec![0u8; 1 << 16]).unwrap();
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend(chunk(b"IHDR", &ihdr));
    png.extend(chunk(b"IDAT", &z.finish().unwrap()));
    png.extend(chunk(b"IEND", b""));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, png).unwrap();
}

/// Declared image sizes and resize targets have limits, exceeded with an error naming the file
/// or key, before any pixel is allocated (issue 28, family 5).
#[test]
fn image_sizes_have_limits() {
    let root = tmp("bomb");
    for c in ["a", "b", "c", "d"] {
        png(&root.join(format!("{c}/1.png")), 1, false);
        png(&root.join(format!("{c}/2.png")), 2, false);
    }
    bomb(&root.join("a/3.png"), 20000, 20000);
    let s = cfg(DatasetKind::Folder, &root).load(0).unwrap();
    let err = format!("{:#}", rdml::data::check::files(&s.train).unwrap_err());
    assert!(
        err.contains("a/3.png") && err.contains("declares 20000×20000 pixels, beyond rdml's limit"),
        "{err}"
    );
    // Decoding it (what a batch does) is refused by the decoder's limits, not allocated.
    let pos = s
        .train
        .indices
        .iter()
        .position(
            |&i| matches!(&*s.train.source, rdml::data::Source::Files { paths, .. } if paths[i].ends_with("a/3.png")),
        )
        .unwrap();
    let err = format!("{:#}", loader::load_batch(&s.train, &[pos], None).unwrap_err());
    assert!(err.contains("a/3.png"), "{err}");
    let mut big = cfg(DatasetKind::Folder, &root);
    big.resize = 100_000;
    let err = big.validate().unwrap_err().to_string();
    assert!(
        err.contains("data.resize = 100000 exceeds rdml's limit of 4096"),
        "{err}"
    );
    let err = format!(
        "{:#}",
        rdml::config::Experiment::load("quickstart", &["data.crop=4096".into(), "data.resize=4096".into()])
            .unwrap_err()
    );
    assert!(err.contains("GiB of input alone"), "{err}");
    let err = format!(
        "{:#}",
        rdml::config::Experiment::load(
            "synthetic-two-gaussians",
            &["data.synthetic.train=1000000000000".into()]
        )
        .unwrap_err()
    );
    assert!(
        err.contains("data.synthetic: 1000000000000 train") && err.contains("beyond rdml's limit"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(root);
}

/// Cars196's `relative_im_path` stays inside the data folder too: the fixture with its first
/// paths rewritten to climb out is refused, naming the annotation (issue 28, family 4).
#[test]
fn cars_paths_never_leave_the_data_folder() {
    use std::io::{Read, Write};
    let good = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cars_annos.mat")).unwrap();
    // The first element is compressed (miCOMPRESSED = 15): inflate it, rewrite, deflate.
    let size = u32::from_le_bytes(good[132..136].try_into().unwrap()) as usize;
    assert_eq!(u32::from_le_bytes(good[128..132].try_into().unwrap()), 15);
    let mut plain = vec![];
    flate2::read::ZlibDecoder::new(&good[136..136 + size])
        .read_to_end(&mut plain)
        .unwrap();
    let at = plain.windows(8).position(|w| w == b"car_ims/").unwrap();
    plain[at..at + 8].copy_from_slice(b"../ims/x");
    let mut z = flate2::write::ZlibEncoder::new(vec![], flate2::Compression::default());
    z.write_all(&plain).unwrap();
    let packed = z.finish().unwrap();
    let mut bad = good[..128].to_vec();
    bad.extend(15u32.to_le_bytes());
    bad.extend((packed.len() as u32).to_le_bytes());
    bad.extend(&packed);
    bad.extend(&good[136 + size..]);
    let root = tmp("escape-cars");
    std::fs::write(root.join("cars_annos.mat"), bad).unwrap();
    let err = format!("{:#}", cfg(DatasetKind::Cars, &root).load(0).unwrap_err());
    assert!(
        err.contains("relative_im_path") && err.contains("leaves the data folder"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(root);
}
