//! Batch samplers. Both emit batches whose items come in class groups `[c1 × M, c2 × M, …]`, so
//! that with M = 2 the anchor of a pair is at an even position and its positive follows it.

use anyhow::{Result, ensure};
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum SamplerConfig {
    /// robrank's "SPC-2": every training item once per epoch as an anchor (shuffled, `pairs` per
    /// batch, last batch kept), each followed by a random other item of its class.
    Spc2 { pairs: usize },
    /// Roth et al.'s class-balanced batches: `classes` distinct classes × `per_class` items;
    /// `len(train) / (classes·per_class)` batches per epoch.
    ClassBalanced { classes: usize, per_class: usize },
}

impl SamplerConfig {
    pub fn batch_size(&self) -> usize {
        match self {
            SamplerConfig::Spc2 { pairs } => pairs.saturating_mul(2),
            SamplerConfig::ClassBalanced { classes, per_class } => classes.saturating_mul(*per_class),
        }
    }
    pub fn per_class(&self) -> usize {
        match self {
            SamplerConfig::Spc2 { .. } => 2,
            SamplerConfig::ClassBalanced { per_class, .. } => *per_class,
        }
    }
    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.batch_size() <= MAX_BATCH,
            "train.sampler: a batch of {} images exceeds rdml's cap of {MAX_BATCH} (the papers use 112–256)",
            self.batch_size()
        );
        match self {
            SamplerConfig::Spc2 { pairs } => {
                ensure!(*pairs >= 2, "train.sampler.pairs must be ≥ 2")
            }
            SamplerConfig::ClassBalanced { classes, per_class } => {
                ensure!(*classes >= 2, "train.sampler.classes must be ≥ 2");
                ensure!(*per_class >= 2, "train.sampler.per_class must be ≥ 2");
            }
        }
        Ok(())
    }
}

/// The largest training batch accepted, in images: beyond it a batch of 28×28 images already
/// needs gigabytes of activations, and one of 224×224 images far more than any GPU holds.
pub const MAX_BATCH: usize = 4096;

/// The seed of epoch `epoch`'s sampling stream: a fixed function of (seed, epoch), so a resumed
/// run draws the same batches as an uninterrupted one.
pub fn epoch_rng(seed: u64, epoch: usize, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng.set_word_pos((epoch as u128) << 40);
    rng
}

/// The batches of one epoch, as positions into the training set.
pub fn epoch_batches(cfg: &SamplerConfig, labels: &[u32], seed: u64, epoch: usize) -> Result<Vec<Vec<usize>>> {
    let mut by_class: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (p, &l) in labels.iter().enumerate() {
        by_class.entry(l).or_default().push(p);
    }
    let usable: Vec<&Vec<usize>> = by_class.values().filter(|v| v.len() >= 2).collect();
    ensure!(
        usable.len() >= 2,
        "the training set needs at least two classes with two or more items each"
    );
    let mut rng = epoch_rng(seed, epoch, 1);
    match *cfg {
        SamplerConfig::Spc2 { pairs } => {
            let mut order: Vec<usize> = (0..labels.len()).filter(|&p| by_class[&labels[p]].len() >= 2).collect();
            order.shuffle(&mut rng);
            two_classes_a_chunk(&mut order, pairs, labels);
            let mut chunks: Vec<&[usize]> = order.chunks(pairs).collect();
            // A short last chunk whose anchors share one class would be a batch without a single
            // negative (no triplet, a NaN loss): its anchors join the batch before it instead.
            if let [.., before, last] = chunks[..]
                && last.iter().all(|&a| labels[a] == labels[last[0]])
            {
                let merged = &order[order.len() - before.len() - last.len()..];
                chunks.truncate(chunks.len() - 2);
                chunks.push(merged);
            }
            Ok(chunks
                .into_iter()
                .map(|chunk| {
                    let mut b = Vec::with_capacity(2 * chunk.len());
                    for &a in chunk {
                        let same = &by_class[&labels[a]];
                        let mut p = a;
                        while p == a {
                            p = same[rng.random_range(0..same.len())];
                        }
                        b.push(a);
                        b.push(p);
                    }
                    b
                })
                .collect())
        }
        SamplerConfig::ClassBalanced { classes, per_class } => {
            ensure!(
                usable.len() >= classes,
                "train.sampler.classes = {classes} but the training set has only {} classes with ≥ 2 items",
                usable.len()
            );
            let n_batches = (labels.len() / (classes * per_class)).max(1);
            let mut out = Vec::with_capacity(n_batches);
            for _ in 0..n_batches {
                let chosen: Vec<&&Vec<usize>> = usable.choose_multiple(&mut rng, classes).collect();
                let mut b = Vec::with_capacity(classes * per_class);
                for items in chosen {
                    if items.len() >= per_class {
                        b.extend(items.choose_multiple(&mut rng, per_class).copied());
                    } else {
                        b.extend((0..per_class).map(|_| items[rng.random_range(0..items.len())]));
                    }
                }
                out.push(b);
            }
            Ok(out)
        }
    }
}

/// Makes every full chunk of `pairs` anchors hold two classes at least (a batch of one class
/// has no negative: no triplet, a NaN loss, whatever the learning rate): an anchor of a chunk of
/// one class trades places with one of another class in a chunk that keeps two classes. The
/// epoch still covers every anchor once; orders with no such chunk are left as they are.
fn two_classes_a_chunk(order: &mut [usize], pairs: usize, labels: &[u32]) {
    let chunks = order.len() / pairs.max(1);
    if pairs < 2 {
        return;
    }
    let classes = |o: &[usize], c: usize| -> Vec<u32> {
        let mut l: Vec<u32> = o[c * pairs..(c + 1) * pairs].iter().map(|&a| labels[a]).collect();
        l.sort_unstable();
        l.dedup();
        l
    };
    for c in 0..chunks {
        let one = classes(order, c);
        if one.len() > 1 {
            continue;
        }
        let swap = (0..order.len()).find(|&j| {
            let d = j / pairs;
            d != c && labels[order[j]] != one[0] && {
                // The chunk that gives an anchor keeps a class besides the one it receives.
                let end = ((d + 1) * pairs).min(order.len());
                (d * pairs..end).any(|k| k != j && labels[order[k]] != one[0])
            }
        });
        if let Some(j) = swap {
            order.swap(c * pairs, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spc2_pairs_share_a_class_and_cover_the_epoch() {
        let labels: Vec<u32> = (0..50).map(|i| i % 5).collect();
        let b = epoch_batches(&SamplerConfig::Spc2 { pairs: 8 }, &labels, 3, 0).unwrap();
        assert_eq!(b.len(), 7); // ceil(50 / 8)
        let mut anchors: Vec<usize> = b.iter().flat_map(|x| x.iter().step_by(2).copied()).collect();
        for x in &b {
            for pair in x.chunks(2) {
                assert_eq!(labels[pair[0]], labels[pair[1]]);
                assert_ne!(pair[0], pair[1]);
            }
        }
        anchors.sort();
        assert_eq!(anchors, (0..50).collect::<Vec<_>>());
        assert_eq!(
            b,
            epoch_batches(&SamplerConfig::Spc2 { pairs: 8 }, &labels, 3, 0).unwrap()
        );
        assert_ne!(
            b,
            epoch_batches(&SamplerConfig::Spc2 { pairs: 8 }, &labels, 3, 1).unwrap()
        );
    }

    /// Issue 28: one class of 6 items beside three of 12, 8 pairs a batch: the 2-anchor tail was
    /// sometimes one class, a batch without negatives, and the loss became NaN. Every batch
    /// now has two classes, and every anchor still comes once.
    #[test]
    fn spc2_never_makes_a_batch_of_one_class() {
        let labels: Vec<u32> = (0..42u32).map(|i| if i < 6 { 0 } else { 1 + (i - 6) % 3 }).collect();
        let mut merged = 0;
        for epoch in 0..200 {
            let b = epoch_batches(&SamplerConfig::Spc2 { pairs: 8 }, &labels, 0, epoch).unwrap();
            for x in &b {
                assert!(
                    x.iter().any(|&i| labels[i] != labels[x[0]]),
                    "epoch {epoch}: one class in {x:?}"
                );
            }
            let mut anchors: Vec<usize> = b.iter().flat_map(|x| x.iter().step_by(2).copied()).collect();
            anchors.sort();
            assert_eq!(anchors, (0..42).collect::<Vec<_>>());
            merged += usize::from(b.len() == 5);
        }
        assert!(merged > 0, "some epoch had a one-class tail to merge");
        // Issue 52: `train.sampler.pairs = 2` made a full batch of one class about every fifth
        // batch (5 classes) and the loss NaN; no full batch is of one class at any size now.
        let five: Vec<u32> = (0..200).map(|i| i % 5).collect();
        for pairs in [2, 3] {
            for epoch in 0..50 {
                let b = epoch_batches(&SamplerConfig::Spc2 { pairs }, &five, 7, epoch).unwrap();
                assert!(
                    b.iter().all(|x| x.iter().any(|&i| five[i] != five[x[0]])),
                    "pairs {pairs}"
                );
                let mut anchors: Vec<usize> = b.iter().flat_map(|x| x.iter().step_by(2).copied()).collect();
                anchors.sort();
                assert_eq!(anchors, (0..200).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn class_balanced_groups() {
        let labels: Vec<u32> = (0..120).map(|i| i % 12).collect();
        let cfg = SamplerConfig::ClassBalanced {
            classes: 4,
            per_class: 3,
        };
        let b = epoch_batches(&cfg, &labels, 0, 0).unwrap();
        assert_eq!(b.len(), 10);
        for x in &b {
            let classes: Vec<u32> = x.chunks(3).map(|g| labels[g[0]]).collect();
            for (g, &c) in x.chunks(3).zip(&classes) {
                assert!(g.iter().all(|&p| labels[p] == c));
            }
            let mut d = classes.clone();
            d.sort();
            d.dedup();
            assert_eq!(d.len(), 4);
        }
    }
}
