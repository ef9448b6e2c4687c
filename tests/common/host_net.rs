//! An rdml network behind the host-array interface a binding implements ([`HostModel`]): what a
//! PyTorch module is to the library, for the tests of the oracle and of the loop sessions.
#![allow(dead_code)]

use anyhow::Result;
use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use rdml::attack::oracle::{Embedded, External, HostModel};
use rdml::model::EmbeddingNet;
use std::sync::Mutex;

/// An rdml network behind the host-array interface: what a PyTorch module is to the library.
pub struct HostNet {
    pub net: EmbeddingNet,
    pub kept: Mutex<Option<(Tensor<4>, Tensor<2>)>>,
    /// Changes its answers: 0 as it is, 1 a NaN, 2 a wrong shape, 3 a gradient of the wrong size,
    /// 4 a shape `[b, 2^63]` with no values (a size check that wraps would take it), 5 answers
    /// that move with every call (dropout left on, noise).
    pub fault: usize,
    pub calls: std::sync::atomic::AtomicUsize,
}

impl HostModel for HostNet {
    fn embed(&self, images: &[f32], shape: [usize; 4], keep: bool) -> Result<Embedded> {
        let dev = rdml::default_device();
        let x = Tensor::<4>::from_data(TensorData::new(images.to_vec(), shape), &dev);
        let x = if keep { x.autodiff().require_grad() } else { x };
        let e = self.net.forward(x.clone());
        let [b, d] = e.dims();
        let mut values = rdml::host::read(&e)?;
        if self.fault == 1 {
            values[d + 1] = f32::NAN;
        }
        if self.fault == 5 {
            let call = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            values.iter_mut().for_each(|v| *v += 0.05 * call as f32);
        }
        if keep {
            *self.kept.lock().unwrap() = Some((x, e));
        }
        let shape = match self.fault {
            2 => vec![b, d / 2, 2],
            4 => {
                values.clear();
                vec![b, 1 << 63]
            }
            _ => vec![b, d],
        };
        Ok(Embedded {
            values,
            shape,
            has_gradient: true,
        })
    }

    fn pull_back(&self, grad: &[f32]) -> Result<Vec<f32>> {
        let (x, e) = self.kept.lock().unwrap().take().expect("an embedding kept");
        let g = Tensor::<2>::from_data(TensorData::new(grad.to_vec(), e.dims()), &e.device());
        let grads = (e * g).sum().backward();
        let mut v = rdml::host::read(&x.grad(&grads).unwrap().flatten::<2>(1, 3))?;
        if self.fault == 3 {
            v.pop();
        }
        Ok(v)
    }

    fn differentiable(&self) -> bool {
        true
    }
}

pub fn host_net(net: &EmbeddingNet, fault: usize) -> External {
    External::new(boxed(net, fault), &Device::default())
}

/// `net` (in evaluation mode) behind the host-array interface, with `fault`.
pub fn boxed(net: &EmbeddingNet, fault: usize) -> Box<dyn HostModel> {
    Box::new(HostNet {
        net: net.valid(),
        kept: Mutex::new(None),
        fault,
        calls: Default::default(),
    })
}
