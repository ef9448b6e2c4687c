//! Moving data between the host and tensors, for every module (losses, attacks, defenses,
//! evaluation): reading a tensor back is fallible (a device can fail or run out of memory), and
//! a failed read is an error, never an empty or default vector, nor a panic: a device's failure
//! surfaces at the next read, so reads take burn's `try_into_data`.
//!
//! Every read of the library goes through here and is counted ([`reads`]): on a GPU each one
//! waits for the device to finish its queue, so the tests bound how many a training step or an
//! attack batch makes.

use anyhow::{Result, anyhow};
use burn::tensor::{Device, Int, Tensor, TensorData};
use std::cell::Cell;

thread_local! {
    static READS: Cell<u64> = const { Cell::new(0) };
}

/// How many reads back from a device this thread has made so far.
pub fn reads() -> u64 {
    READS.with(Cell::get)
}

fn count() {
    READS.with(|r| r.set(r.get() + 1));
}

/// Host copy of a `[n, d]` tensor, row-major (detached; any device).
pub fn read(t: &Tensor<2>) -> Result<Vec<f32>> {
    count();
    t.clone()
        .detach()
        .without_autodiff()
        .try_into_data()
        .map_err(|e| anyhow!("reading a tensor back from the device: {e}"))?
        .convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| anyhow!("reading a tensor back from the device: {e:?}"))
}

/// Host copy of an index tensor `[n]` (a device miner's choices).
pub fn read_index(t: &Tensor<1, Int>) -> Result<Vec<usize>> {
    count();
    let v = t
        .clone()
        .try_into_data()
        .map_err(|e| anyhow!("reading indices back from the device: {e}"))?
        .convert::<i64>()
        .try_into_vec::<i64>()
        .map_err(|e| anyhow!("reading indices back from the device: {e:?}"))?;
    v.into_iter()
        .map(|i| usize::try_from(i).map_err(|_| anyhow!("the device returned the index {i}")))
        .collect()
}

/// Host copy of a `[n]` tensor.
pub fn read1(t: &Tensor<1>) -> Result<Vec<f32>> {
    read(&t.clone().unsqueeze_dim::<2>(1))
}

/// The value of a one-element tensor (a loss).
pub fn scalar(t: &Tensor<1>) -> Result<f32> {
    match read1(t)?.as_slice() {
        [v] => Ok(*v),
        v => Err(anyhow!("expected one value from the device, got {}", v.len())),
    }
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

/// Rows `idx` of host embeddings `[n, dim]` as a `[t, dim]` tensor on `device`.
pub fn rows(host: &[f32], idx: &[usize], dim: usize, device: &burn::tensor::Device) -> Tensor<2> {
    let v: Vec<f32> = idx
        .iter()
        .flat_map(|&i| host[i * dim..(i + 1) * dim].iter().copied())
        .collect();
    Tensor::<2>::from_data(burn::tensor::TensorData::new(v, [idx.len(), dim]), device)
}
