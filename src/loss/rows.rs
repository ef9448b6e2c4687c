//! Row indices into a batch, as a miner chose them: on the host (the CPU's miners, which draw
//! from the run's seeded stream as robrank's do) or on the device (a GPU's miners, so that the
//! step does not wait to read the embeddings back). Losses and defenses use both alike; only
//! what indexes host data reads device rows back, and that read is counted.

use anyhow::Result;
use burn::tensor::{Device, Int, Tensor};
use std::borrow::Cow;

#[derive(Debug, Clone)]
pub enum Rows {
    Host(Vec<usize>),
    /// Boxed: a tensor handle is ten times a vector's size.
    Device(Box<Tensor<1, Int>>),
}

impl Default for Rows {
    fn default() -> Self {
        Rows::Host(vec![])
    }
}

impl From<Vec<usize>> for Rows {
    fn from(v: Vec<usize>) -> Self {
        Rows::Host(v)
    }
}

impl Rows {
    pub fn device(t: Tensor<1, Int>) -> Self {
        Rows::Device(Box::new(t))
    }

    pub fn len(&self) -> usize {
        match self {
            Rows::Host(v) => v.len(),
            Rows::Device(t) => t.dims()[0],
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The indices as a tensor on `device` (host rows are uploaded, device rows moved if needed).
    pub fn tensor(&self, device: &Device) -> Tensor<1, Int> {
        match self {
            Rows::Host(v) => crate::host::index_tensor(v, device),
            Rows::Device(t) => (**t).clone().to_device(device),
        }
    }

    /// The indices on the host: device rows are read back (one counted read).
    pub fn host(&self) -> Result<Cow<'_, [usize]>> {
        match self {
            Rows::Host(v) => Ok(Cow::Borrowed(v)),
            Rows::Device(t) => Ok(Cow::Owned(crate::host::read_index(t)?)),
        }
    }

    /// The same rows `by` further down (rows of a batch stacked after `by` others).
    pub fn shifted(&self, by: usize) -> Rows {
        match self {
            Rows::Host(v) => Rows::Host(v.iter().map(|&i| i + by).collect()),
            Rows::Device(t) => Rows::device((**t).clone().add_scalar(by as i64)),
        }
    }

    /// `parts` one after the other: on the host when all are, else one tensor on the device of
    /// the first part that is on one.
    pub fn concat(parts: &[&Rows]) -> Rows {
        let host: Option<Vec<usize>> = parts
            .iter()
            .map(|r| match r {
                Rows::Host(v) => Some(v.as_slice()),
                Rows::Device(_) => None,
            })
            .collect::<Option<Vec<_>>>()
            .map(|v| v.concat());
        let device = parts.iter().find_map(|r| match r {
            Rows::Device(t) => Some(t.device()),
            Rows::Host(_) => None,
        });
        match (host, device) {
            (Some(v), _) => Rows::Host(v),
            (None, None) => Rows::Host(vec![]),
            (None, Some(device)) => Rows::device(Tensor::cat(
                parts
                    .iter()
                    .filter(|r| !r.is_empty())
                    .map(|r| r.tensor(&device))
                    .collect(),
                0,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_device_rows_index_alike() {
        let dev = crate::default_device();
        let h = Rows::Host(vec![2, 0]);
        let d = Rows::device(crate::host::index_tensor(&[1, 3], &dev));
        let r0 = crate::host::reads();
        let both = Rows::concat(&[&h, &d.shifted(10)]);
        assert!(matches!(both, Rows::Device(_)));
        assert_eq!(crate::host::reads(), r0, "concatenating read the device");
        assert_eq!(*both.host().unwrap(), [2, 0, 11, 13]);
        assert_eq!(crate::host::reads(), r0 + 1);
        let host_only = Rows::concat(&[&h, &h.shifted(1)]);
        assert!(matches!(&host_only, Rows::Host(v) if v == &[2, 0, 3, 1]));
        assert_eq!(Rows::concat(&[]).len(), 0);
    }
}
