//! Triplets a caller mined (a reference code's batch, replayed through a defense).

use anyhow::Result;

/// A batch's triplets as the caller mined them (`triplets=`: a reference code's batch, replayed):
/// rows of the batch, one anchor, positive and negative per triplet. A request gives them as
/// three lists, `[anchors, positives, negatives]`.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(try_from = "Vec<Vec<usize>>")]
pub struct GivenTriplets {
    pub anchor: Vec<usize>,
    pub positive: Vec<usize>,
    pub negative: Vec<usize>,
}

impl TryFrom<Vec<Vec<usize>>> for GivenTriplets {
    type Error = String;

    fn try_from(mut lists: Vec<Vec<usize>>) -> Result<Self, String> {
        if lists.len() != 3 {
            return Err(format!(
                "{} sequences; expected (anchors, positives, negatives)",
                lists.len()
            ));
        }
        let (negative, positive, anchor) = (lists.remove(2), lists.remove(1), lists.remove(0));
        Ok(Self {
            anchor,
            positive,
            negative,
        })
    }
}

impl GivenTriplets {
    /// The triplets, checked against the batch's labels: rows inside the batch, the positive of
    /// the anchor's class (the anchor itself allowed, as robrank's softhard miner may draw it),
    /// the negative of another. The one rule for a caller's triplets, a defense's (`triplets=`)
    /// and a loss's (`indices_tuple=`), named as `field`.
    pub(super) fn checked(self, labels: &[u32], field: &str) -> Result<crate::loss::miner::Triplets> {
        let (t, n) = (self.anchor.len(), labels.len());
        crate::ensure_input!(
            t > 0 && self.positive.len() == t && self.negative.len() == t,
            "{field}: {t} anchors, {} positives and {} negatives; expected the same number (at least one) of each",
            self.positive.len(),
            self.negative.len()
        );
        for k in 0..t {
            let (a, p, m) = (self.anchor[k], self.positive[k], self.negative[k]);
            crate::ensure_input!(
                a < n && p < n && m < n,
                "{field}: triplet {k} ({a}, {p}, {m}) names a row outside the batch of {n}"
            );
            crate::ensure_input!(
                labels[p] == labels[a] && labels[m] != labels[a],
                "{field}: triplet {k} ({a}, {p}, {m}): expected a positive of the anchor's label and a negative of another"
            );
        }
        Ok(crate::loss::miner::Triplets {
            anchor: self.anchor,
            positive: self.positive.into(),
            negative: self.negative.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::GivenTriplets;

    #[test]
    fn three_lists_read_as_anchors_positives_negatives_and_two_are_told() {
        let t: GivenTriplets = serde_json::from_str("[[0, 2], [1, 3], [4, 5]]").unwrap();
        assert_eq!((t.anchor, t.positive, t.negative), (vec![0, 2], vec![1, 3], vec![4, 5]));
        let said = serde_json::from_str::<GivenTriplets>("[[0], [1]]")
            .unwrap_err()
            .to_string();
        assert!(
            said.starts_with("2 sequences; expected (anchors, positives, negatives)"),
            "{said}"
        );
    }
}
