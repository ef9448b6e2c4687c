//! Fixtures shared by the attack tests.

pub mod host_net;

use burn::tensor::Device;
use rdml::config::Experiment;
use rdml::model::EmbeddingNet;

/// A seeded C2F2 with 32-d embeddings and the first 300 items of the embedded test split.
#[allow(dead_code)] // not every test binary that holds these fixtures uses each
pub fn small() -> (EmbeddingNet, rdml::data::ImageSet) {
    let exp = Experiment::load("quickstart", &["model.embedding_dim=32".into()]).unwrap();
    let splits = exp.data.load(0).unwrap();
    let dev = Device::default();
    let net = rdml::seeded(&dev, 1, || EmbeddingNet::new(&exp.model, [1, 28, 28], &dev).unwrap());
    let test = splits.test.query.subset("small", &(0..300).collect::<Vec<_>>());
    (net, test)
}
