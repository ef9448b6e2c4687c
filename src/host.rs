//! Moving data between the host and tensors, for every module (losses, attacks, defenses,
//! evaluation): reading a tensor back is fallible (a device can fail or run out of memory), and
//! a failed read is an error, never an empty or default vector.

use anyhow::{Result, anyhow};
use burn::tensor::{Device, Int, Tensor, TensorData};

/// Host copy of a `[n, d]` tensor, row-major (detached; any device).
pub fn read(t: &Tensor<2>) -> Result<Vec<f32>> {
    t.clone()
        .detach()
        .without_autodiff()
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| anyhow!("reading a tensor back from the device: {e:?}"))
}

/// Host copy of a `[n]` tensor.
pub fn read1(t: &Tensor<1>) -> Result<Vec<f32>> {
    read(&t.clone().unsqueeze_dim::<2>(1))
}

/// An index tensor of `idx` on `device`.
pub fn index_tensor(idx: &[usize], device: &Device) -> Tensor<1, Int> {
    Tensor::<1, Int>::from_data(
        TensorData::new(idx.iter().map(|&i| i as i64).collect::<Vec<_>>(), [idx.len()]),
        device,
    )
}

/// Rows `idx` of `emb`.
pub fn gather(emb: &Tensor<2>, idx: &Tensor<1, Int>) -> Tensor<2> {
    emb.clone().select(0, idx.clone())
}
