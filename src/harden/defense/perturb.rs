//! The inner maximisation alone (`x_adv, rows = defense.perturb(model, x, y)`): the perturbed
//! rows and their roles go back to the caller, whose own forward and loss (a CE head beside the
//! embedding, a PML loss over `indices_tuple`) train on them. What a defense's own outer loss adds
//! beside them (HM's ICS rows, formulation 3's shifted batch) is its loss's, not returned; a
//! defense that trains several distributions through their own batch-norm sets (MDProp,
//! AdvProp-D) is refused. The defense's state moves as in
//! its own step: the step is counted, and a memory that remembers each step's adversarial loss
//! (HM's LGA) waits for it ([`DefenseSession::finish_perturbed`]) before the next step.

use super::{DefenseSession, GivenTriplets, HostModel, Images};
use crate::attack::oracle::Crossed;
use anyhow::Result;
use serde::Serialize;

/// The perturbed rows of one batch and their roles.
#[derive(Serialize)]
pub struct Perturbation {
    /// The perturbed images (row-major float32) and their shape: the stacked `[a; p; n]` of a
    /// triplet defense's triplets, or the batch itself (EST, MDProp's generated rows).
    #[serde(skip)]
    pub images: Vec<f32>,
    pub shape: [usize; 4],
    /// The batch rows each perturbed row came from, and its label.
    pub source: Vec<usize>,
    pub labels: Vec<u32>,
    /// Triplets over the perturbed rows (anchors, positives, negatives), where the defense
    /// perturbs triplets.
    pub triplets: Option<[Vec<usize>; 3]>,
    pub route: Crossed,
    pub steps_done: u64,
    /// Whether the defense's memory waits for the step's adversarial loss.
    pub awaiting_loss: bool,
}

impl DefenseSession {
    /// The inner maximisation on `images` by `models`, its perturbed rows returned; the step
    /// ends here unless the memory reads its adversarial loss.
    pub fn perturb(
        &mut self,
        images: Images,
        items: Option<Vec<usize>>,
        triplets: Option<GivenTriplets>,
        models: Vec<Box<dyn HostModel>>,
    ) -> Result<Perturbation> {
        // Before any work: a refused call leaves the defense's stream where it was.
        crate::ensure_input!(
            self.bn_sets() == 1,
            "perturb: defense {} trains {} distributions through their own batch-norm sets, which perturb's \
             rows cannot say; use defense(model, images, labels)",
            self.defense.name(),
            self.bn_sets()
        );
        let (plan, labels, route) = self.plan_of(images, items, triplets, models)?;
        let adv = &plan.perturbed.adversarial;
        let shape = adv.dims();
        let [b, c, h, w] = shape;
        let values = crate::host::read(&adv.clone().reshape([b, c * h * w]))?;
        let (source, roles) = match &plan.perturbed.triplets {
            Some(t) => {
                let (a, p, n) = (
                    t.anchor.clone(),
                    t.positive.host()?.into_owned(),
                    t.negative.host()?.into_owned(),
                );
                let k = a.len();
                let source: Vec<usize> = a.iter().chain(&p).chain(&n).copied().collect();
                let roles = [(0..k).collect(), (k..2 * k).collect(), (2 * k..3 * k).collect()];
                (source, Some(roles))
            }
            None => ((0..labels.len()).collect(), None),
        };
        crate::ensure_input!(
            source.len() == b,
            "defense {}: {} perturbed rows for {} sources",
            self.defense.name(),
            b,
            source.len()
        );
        let row_labels = source.iter().map(|&i| labels[i]).collect();
        self.pending = Some((plan, labels));
        let awaiting_loss = self.memory.reads_loss();
        let steps_done = if awaiting_loss {
            self.awaiting_loss = true;
            self.state.steps_done
        } else {
            self.end_step(None)?
        };
        Ok(Perturbation {
            images: values,
            shape,
            source,
            labels: row_labels,
            triplets: roles,
            route,
            steps_done,
            awaiting_loss,
        })
    }

    /// Ends a perturbed step whose memory waits for its adversarial loss (HM's LGA).
    pub fn finish_perturbed(&mut self, adversarial_loss: f32) -> Result<u64> {
        crate::ensure_input!(
            self.awaiting_loss,
            "finish: no perturbed step waits for its loss (defense {} remembers no adversarial loss, so perturb \
             ended its step)",
            self.defense.name()
        );
        crate::ensure_input!(
            adversarial_loss.is_finite(),
            "adversarial_loss: {adversarial_loss}; the loss must be a number"
        );
        self.awaiting_loss = false;
        self.end_step(Some(adversarial_loss))
    }

    /// Refuses a new step while a perturbed one waits for its loss.
    pub(super) fn not_awaiting(&self) -> Result<()> {
        crate::ensure_input!(
            !self.awaiting_loss,
            "defense {}: the last perturb's step waits for its adversarial loss (the defense remembers it): \
             call finish(loss) with it first",
            self.defense.name()
        );
        Ok(())
    }
}
