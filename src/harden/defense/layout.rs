//! A triplet defense's batch out of SPC-2's pair layout, said once a session.

use super::DefenseSession;

impl DefenseSession {
    /// Says, once, a batch of a triplet-perturbing defense whose loss mines SPC-2's pairs but that
    /// is not laid out in them: every row then becomes an anchor with a random positive, about
    /// twice the rows the attack moves.
    pub(super) fn say_layout(&self, labels: &[u32], given: bool) {
        let pairs = self.loss.mining().anchors == crate::loss::miner::Anchors::Pairs;
        if self.layout_said.get() || given || !pairs || crate::loss::miner::is_spc2(labels) {
            return;
        }
        self.layout_said.set(true);
        crate::notes::warn(format!(
            "labels: the batch is not laid out as same-class pairs (rows 2i and 2i + 1 of one class, the layout of \
             rdml's spc2 sampler), so defense {} makes every row an anchor with a random positive of its class, \
             about twice the rows of a paired batch for the attack to move; order the batch in pairs (PML's \
             MPerClassSampler with m = 2 does) to mine robrank's pairs",
            self.defense.name()
        ));
    }
}
