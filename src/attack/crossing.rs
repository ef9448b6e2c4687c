//! What crosses between rdml and a model held outside it (a PyTorch module on its own device):
//! the budget of a run the model side holds, smoothing's noisy copies drawn there, and the count
//! of what crossed, which every result of such a model reports as its `route`.

use super::budget::Norm;

/// A batch of randomized smoothing's noisy copies, drawn on the model's side: each query (a
/// stream: its item) sent once with its pixels and kept there until dropped, and each row a
/// query's copy number. Copy `j` of a stream is the same noise whatever the batch it falls in
/// (the model side draws it from a generator seeded by `seed`, the stream and `j`'s block), so a
/// certificate does not depend on the batch size.
pub struct NoisyBatch<'a> {
    /// Queries first seen in this batch: their streams and pixels (`c × h × w` values).
    pub new: &'a [(u64, Vec<f32>)],
    /// Streams the model side may forget (none of their copies is left).
    pub drop: &'a [u64],
    /// `(stream, copy)` per row, in order.
    pub rows: &'a [(u64, u64)],
    pub shape: [usize; 3],
    pub sigma: f32,
    pub seed: u64,
}

/// The budget of a run a [`HostModel`] holds: its norm, ε and step, and whether each step is
/// projected onto the ε-ball (the pixels' bounds, [0, 1], always hold).
#[derive(Debug, Clone, Copy)]
pub struct HeldBudget {
    pub norm: Norm,
    pub eps: f32,
    pub step: f32,
    pub project: bool,
}

/// What crossed between rdml and a [`HostModel`]: bytes each way and the calls (each a wait for
/// the model side), split into a held run's start and end and its steps.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Crossed {
    /// Bytes and calls outside held steps: embeddings asked, held runs' starts and ends.
    pub bytes: u64,
    pub calls: u64,
    /// Bytes and calls of held runs' steps (embeddings back, their gradient out).
    pub step_bytes: u64,
    pub steps: u64,
    /// The most bytes one held step moved.
    pub most_step_bytes: u64,
    /// Passes through the model: forwards, and backwards to the images.
    pub forwards: u64,
    pub backwards: u64,
}

impl Crossed {
    /// Both models' crossings (a transfer attack's surrogate and target).
    pub fn plus(self, o: Crossed) -> Crossed {
        Crossed {
            bytes: self.bytes + o.bytes,
            calls: self.calls + o.calls,
            step_bytes: self.step_bytes + o.step_bytes,
            steps: self.steps + o.steps,
            most_step_bytes: self.most_step_bytes.max(o.most_step_bytes),
            forwards: self.forwards + o.forwards,
            backwards: self.backwards + o.backwards,
        }
    }
}

/// What crossed on every rank of `ranks` (`this` rank's among them), summed: a split job's route
/// is the whole job's, the same on every rank.
pub fn across(ranks: &crate::ranks::Ranks, this: Option<Crossed>) -> anyhow::Result<Option<Crossed>> {
    if !ranks.split() {
        return Ok(this);
    }
    Ok(ranks
        .gather(&this)?
        .into_iter()
        .reduce(|a, b| match (a, b) {
            (Some(a), Some(b)) => Some(a.plus(b)),
            (a, b) => a.or(b),
        })
        .flatten())
}
