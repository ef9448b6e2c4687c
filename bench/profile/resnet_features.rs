//! Loads torchvision ResNet weights into rdml's ResNet and writes the pooled features of a batch
//! (evaluation mode), for `bench/check_resnet_import.py` to compare with PyTorch.
//! Usage: resnet_features ARCH WEIGHTS INPUT.f32 N OUTPUT.f32   (input already ImageNet-normalised)
use anyhow::{Context, Result};
use burn::module::Module;
use burn::tensor::{Tensor, TensorData};
use rdml::model::{Arch, Backbone, EmbeddingNet, ModelConfig};

fn main() -> Result<()> {
    let a: Vec<String> = std::env::args().collect();
    let arch = match a.get(1).context("ARCH")?.as_str() {
        "resnet18" => Arch::Resnet18,
        "resnet50" => Arch::Resnet50,
        o => anyhow::bail!("unknown arch {o}"),
    };
    let n: usize = a.get(4).context("N")?.parse()?;
    let cfg = ModelConfig {
        arch,
        embedding_dim: 16,
        l2_normalize: false,
        imagenet_norm: Some(false),
        input_mean: None,
        input_std: None,
        pretrained: Some(a.get(2).context("WEIGHTS")?.into()),
        frozen_bn: false,
        bn_sets: 2,
    };
    let dev = rdml::default_device();
    let net = EmbeddingNet::new(&cfg, [3, 224, 224], &dev)?.valid();
    let raw = std::fs::read(a.get(3).context("INPUT")?)?;
    let x: Vec<f32> = raw
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let x = Tensor::<4>::from_data(TensorData::new(x, [n, 3, 224, 224]), &dev);
    let mut out = Vec::new();
    for set in 0..2 {
        let f = match &net.backbone {
            Backbone::Resnet18(m) => m.features(x.clone(), set),
            Backbone::Resnet50(m) => m.features(x.clone(), set),
            Backbone::C2f2(_) => unreachable!(),
        };
        out.push(rdml::host::read(&f)?);
    }
    anyhow::ensure!(out[0] == out[1], "BN set 1 was not copied from set 0");
    std::fs::write(
        a.get(5).context("OUTPUT")?,
        out[0].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
    )?;
    Ok(())
}
