//! Models: shapes, normalisation, batch-norm sets, weight-file errors.

use burn::module::Module;
use burn::tensor::{Device, Distribution, Tensor, TensorData};
use rdml::model::multi_bn::MultiBatchNorm;
use rdml::model::{Arch, EmbeddingNet, ModelConfig};

/// A tensor's values on the host (the test fails if the read does).
fn read(t: &burn::tensor::Tensor<2>) -> Vec<f32> {
    rdml::host::read(t).unwrap()
}

fn cfg(arch: Arch) -> ModelConfig {
    toml::from_str(&format!(
        "arch = \"{}\"\nembedding_dim = 8",
        match arch {
            Arch::C2f2 => "c2f2",
            Arch::Resnet18 => "resnet18",
            Arch::Resnet50 => "resnet50",
        }
    ))
    .unwrap()
}

#[test]
fn embeddings_have_unit_norm_and_the_right_shape() {
    let dev = Device::default();
    for (arch, shape) in [(Arch::C2f2, [1, 28, 28]), (Arch::Resnet18, [3, 32, 32])] {
        let net = EmbeddingNet::new(&cfg(arch), shape, &dev).unwrap();
        let x = Tensor::<4>::random([3, shape[0], shape[1], shape[2]], Distribution::Uniform(0.0, 1.0), &dev);
        let e = read(&net.valid().forward(x));
        assert_eq!(e.len(), 3 * 8);
        for row in e.chunks(8) {
            let n: f32 = row.iter().map(|v| v * v).sum::<f32>().sqrt();
            assert!((n - 1.0).abs() < 1e-5, "{arch:?}: norm {n}");
        }
    }
}

#[test]
fn batch_norm_sets_are_separate_and_follow_pytorch_running_variance() {
    let dev = Device::default().autodiff();
    let bn = MultiBatchNorm::new(1, 2, false, &dev);
    // Batch of 4 values of one channel: mean 2.5, biased var 1.25, unbiased 5/3.
    let x = Tensor::<4>::from_data(TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [4, 1, 1, 1]), &dev);
    let _ = bn.forward(x, 1);
    let rv = |s: usize| {
        bn.sets[s]
            .running_var
            .value_sync()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap()[0]
    };
    let rm = |s: usize| {
        bn.sets[s]
            .running_mean
            .value_sync()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap()[0]
    };
    assert!((rm(1) - 0.25).abs() < 1e-6, "{}", rm(1));
    assert!((rv(1) - (0.9 + 0.1 * 5.0 / 3.0)).abs() < 1e-6, "{}", rv(1));
    assert_eq!((rm(0), rv(0)), (0.0, 1.0), "set 0 must be untouched");
    // Frozen: running statistics, no update.
    let frozen = MultiBatchNorm::new(1, 1, true, &dev);
    let x = Tensor::<4>::from_data(TensorData::new(vec![1.0f32, 3.0], [2, 1, 1, 1]), &dev);
    let y = frozen.forward(x, 0).into_data().try_to_vec::<f32>().unwrap();
    assert!((y[0] - 1.0 / (1.0f32 + 1e-5).sqrt()).abs() < 1e-5);
    assert_eq!(
        frozen.sets[0]
            .running_mean
            .value_sync()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap()[0],
        0.0
    );
}

#[test]
fn wrong_weight_files_are_refused_with_names() {
    let dev = Device::default();
    let dir = std::env::temp_dir().join(format!("rdml-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c2f2 = EmbeddingNet::new(&cfg(Arch::C2f2), [1, 28, 28], &dev).unwrap();
    let f = dir.join("c2f2.safetensors");
    c2f2.save(&f).unwrap();
    let mut r = cfg(Arch::Resnet18);
    r.pretrained = Some(f.clone());
    let err = format!("{:#}", EmbeddingNet::new(&r, [3, 32, 32], &dev).unwrap_err());
    assert!(err.contains("c2f2.safetensors") && err.contains("missing"), "{err}");
    r.pretrained = Some(dir.join("nope.pth"));
    let err = format!("{:#}", EmbeddingNet::new(&r, [3, 32, 32], &dev).unwrap_err());
    assert!(err.contains("nope.pth") && err.contains("not a file"), "{err}");
    // Our own save/load round-trips exactly, and a model of another shape is refused.
    let back = EmbeddingNet::new(&cfg(Arch::C2f2), [1, 28, 28], &dev)
        .unwrap()
        .load(&f)
        .unwrap();
    let x = Tensor::<4>::random([2, 1, 28, 28], Distribution::Uniform(0.0, 1.0), &dev);
    assert_eq!(read(&back.forward(x.clone())), read(&c2f2.forward(x)));
    let mut wide = cfg(Arch::C2f2);
    wide.embedding_dim = 9;
    assert!(EmbeddingNet::new(&wide, [1, 28, 28], &dev).unwrap().load(&f).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
