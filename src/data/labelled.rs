//! The rules of labelled arrays a caller gives (queries, and a gallery to rank them among), for
//! embeddings (`rdml.metrics`) and images (`rdml.robustness`, `rdml.attack`) alike:
//! - labels of any integers become dense class ids, equal where the given labels are equal, the
//!   same in the queries and the gallery ([`DenseIds`]);
//! - a query's own item in the gallery (the same values and label, found by content, in any order
//!   or subset) would rank first at distance 0 and make Recall@1 perfect by construction: it is
//!   left out of that query's list, as pytorch-metric-learning's `ref_includes_query` and
//!   robrank's leave-one-out do ([`own_copies`], [`Overlap`]).

use std::collections::HashMap;

/// Dense class ids, shared by every array read through the same map.
#[derive(Debug, Default)]
pub struct DenseIds(HashMap<i64, u32>);

impl DenseIds {
    /// The ids of `labels`, in order: the first label seen is 0, the next new one 1, ….
    pub fn ids(&mut self, labels: &[i64]) -> Vec<u32> {
        labels
            .iter()
            .map(|l| {
                let next = self.0.len() as u32;
                *self.0.entry(*l).or_insert(next)
            })
            .collect()
    }
}

/// How a gallery relates to the queries.
#[derive(Debug, Clone, PartialEq)]
pub enum Overlap {
    /// No query's item is in the gallery.
    Apart,
    /// The gallery is the queries, in any order: the queries ranked among themselves
    /// (leave-one-out) are the same lists.
    Queries,
    /// Some gallery rows are queries' own items: `own[i]` is query `i`'s, left out of its list.
    Some { own: Vec<Option<usize>>, found: usize },
}

impl Overlap {
    /// What a caller is told when its gallery holds queries' own items (`None`: nothing to say).
    pub fn note(&self) -> Option<String> {
        match self {
            Overlap::Apart => None,
            Overlap::Queries => Some(
                "the gallery is the queries themselves (found by content): each query is ranked among the \
                 others, its own copy left out (pytorch-metric-learning's ref_includes_query); leave the gallery \
                 out to say so"
                    .into(),
            ),
            Overlap::Some { found, own } => Some(format!(
                "the gallery holds {found} of the {} queries' own items (found by content): each is left out of \
                 its own query's list, as a query's own copy would otherwise rank first by construction",
                own.len()
            )),
        }
    }

    /// Each query's own row in the gallery (all `None` when apart).
    pub fn own(&self, queries: usize) -> Vec<Option<usize>> {
        match self {
            Overlap::Some { own, .. } => own.clone(),
            _ => vec![None; queries],
        }
    }
}

/// What a gallery holds of the queries' own items: how they relate ([`Overlap`], its rows counted
/// in the gallery without `copies`), and the rows that are further copies of an item a query
/// already found (a query's own image ranks first at distance 0 however often it is there), to
/// leave out of the gallery.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub overlap: Overlap,
    pub copies: Vec<usize>,
}

impl Found {
    /// Nothing of the queries in the gallery (or no gallery).
    pub fn apart() -> Self {
        Self {
            overlap: Overlap::Apart,
            copies: vec![],
        }
    }

    /// What a caller is told (`None`: nothing to say).
    pub fn note(&self) -> Option<String> {
        let copies = (!self.copies.is_empty()).then(|| {
            format!(
                "the gallery holds {} further copies of queries' own items, left out of it (a query's own image \
                 ranks first at distance 0 however often it is there)",
                self.copies.len()
            )
        });
        match (self.overlap.note(), copies) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        }
    }

    /// The gallery's rows that stay (all but the copies), in order, of `rows`.
    pub fn kept(&self, rows: usize) -> Vec<usize> {
        let drop: std::collections::HashSet<usize> = self.copies.iter().copied().collect();
        (0..rows).filter(|j| !drop.contains(j)).collect()
    }
}

/// The gallery rows that are queries' own items: rows of `width` values, equal bit for bit (so
/// `-0.0` and `0.0` differ, and a NaN row matches its own copy) and with an equal label. Each
/// gallery row is one query's at most. With `copies` (the rows are images: equal pixels are one
/// image), a second copy of an item a query found is one of [`Found::copies`]; without (the rows
/// are embeddings, which hash codes or a collapsed model make equal for other items), it stays an
/// item of its own.
pub fn own_copies<L: std::hash::Hash + Eq>(
    queries: (&[f32], &[L]),
    gallery: (&[f32], &[L]),
    width: usize,
    copies: bool,
) -> Found {
    let (q, ql) = queries;
    let (g, gl) = gallery;
    let width = width.max(1);
    let row = |a: &[f32], i: usize| -> Vec<u32> { a[i * width..(i + 1) * width].iter().map(|v| v.to_bits()).collect() };
    let same = |i: usize, j: usize| ql[i] == gl[j] && row(q, i) == row(g, j);
    matched(
        (ql.len(), &|i| content_key(&q[i * width..(i + 1) * width], &ql[i])),
        (gl.len(), &|j| content_key(&g[j * width..(j + 1) * width], &gl[j])),
        &same,
        copies,
    )
}

/// A 128-bit digest of an item's content (its values bit for bit) and label: what
/// [`own_copies_keyed`] matches items of a data set by, the images decoded as the model sees them.
pub fn content_key<L: std::hash::Hash>(values: &[f32], label: &L) -> u128 {
    use std::hash::{Hash, Hasher};
    // The values' bits hashed as one slice, not a hasher call per value (the slow part).
    let bits: Vec<u8> = values.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
    let half = |salt: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        salt.hash(&mut h);
        label.hash(&mut h);
        h.write(&bits);
        h.finish()
    };
    (u128::from(half(0)) << 64) | u128::from(half(1))
}

/// [`own_copies`] for items known by their [`content_key`] alone (a data set's images, keyed as
/// they are decoded for embedding, so no second copy of them is kept).
pub fn own_copies_keyed(queries: &[u128], gallery: &[u128]) -> Found {
    matched(
        (queries.len(), &|i| queries[i]),
        (gallery.len(), &|j| gallery[j]),
        &|i, j| queries[i] == gallery[j],
        true,
    )
}

type Keys<'a> = (usize, &'a dyn Fn(usize) -> u128);

/// Each query's own gallery row (one of equal key for which `same` holds, each row taken once),
/// then the further rows equal to a query's own: the copies.
fn matched((nq, kq): Keys, (ng, kg): Keys, same: &dyn Fn(usize, usize) -> bool, with_copies: bool) -> Found {
    let mut rows: HashMap<u128, Vec<usize>> = HashMap::new();
    for j in 0..ng {
        rows.entry(kg(j)).or_default().push(j);
    }
    let mut taken = vec![false; ng];
    let first: Vec<Option<usize>> = (0..nq)
        .map(|i| {
            let j = rows.get(&kq(i))?.iter().copied().find(|&j| !taken[j] && same(i, j))?;
            taken[j] = true;
            Some(j)
        })
        .collect();
    let mut copies = vec![];
    for (i, _) in first.iter().enumerate().filter(|(_, f)| with_copies && f.is_some()) {
        for &j in rows.get(&kq(i)).into_iter().flatten() {
            if !taken[j] && same(i, j) {
                taken[j] = true;
                copies.push(j);
            }
        }
    }
    copies.sort_unstable();
    let found = Found {
        overlap: Overlap::Apart,
        copies,
    };
    // Each own row's place in the gallery without the copies.
    let mut place = vec![0usize; ng];
    for (new, old) in found.kept(ng).into_iter().enumerate() {
        place[old] = new;
    }
    let own: Vec<Option<usize>> = first.iter().map(|f| f.map(|j| place[j])).collect();
    let count = own.iter().flatten().count();
    let overlap = match count {
        0 => Overlap::Apart,
        f if f == nq && f == ng - found.copies.len() => Overlap::Queries,
        found => Overlap::Some { own, found },
    };
    Found { overlap, ..found }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_ids_are_shared_and_in_order_of_first_sight() {
        let mut ids = DenseIds::default();
        assert_eq!(ids.ids(&[7, -3, 7]), vec![0, 1, 0]);
        assert_eq!(ids.ids(&[-3, 9]), vec![1, 2]);
    }

    /// The queries' own items are found whatever the order and subset, by values and label; a
    /// further copy of a query's own item is left out of the gallery.
    #[test]
    fn own_items_are_found_by_content_in_any_order_or_subset() {
        let q = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0];
        let ql = [0, 1, 2];
        let permuted = [4.0, 5.0, 0.0, 1.0, 2.0, 3.0];
        let queries = |f: Found| {
            assert!(f.copies.is_empty());
            f.overlap
        };
        assert_eq!(
            queries(own_copies((&q, &ql), (&permuted, &[2, 0, 1]), 2, true)),
            Overlap::Queries
        );
        let subset = [9.0, 9.0, 2.0, 3.0];
        let o = own_copies((&q, &ql), (&subset, &[0, 1]), 2, true);
        assert_eq!(
            o.overlap,
            Overlap::Some {
                own: vec![None, Some(1), None],
                found: 1
            }
        );
        assert!(o.note().unwrap().contains("1 of the 3 queries' own items"));
        // The same values under another label are another item.
        assert_eq!(
            own_copies((&q, &ql), (&permuted, &[2, 1, 1]), 2, true).overlap.own(3),
            vec![None, Some(2), Some(0)]
        );
        assert_eq!(
            queries(own_copies((&q, &ql), (&[7.0, 7.0], &[0]), 2, true)),
            Overlap::Apart
        );
        // Each query's image twice among another item: one is its own, the other a copy, and
        // its own row is counted in the gallery without the copies.
        let twice = [0.0, 1.0, 9.0, 9.0, 0.0, 1.0, 2.0, 3.0, 2.0, 3.0];
        let f = own_copies((&q[..4], &ql[..2]), (&twice, &[0, 0, 0, 1, 1]), 2, true);
        assert_eq!(f.copies, vec![2, 4]);
        assert_eq!(f.kept(5), vec![0, 1, 3]);
        assert_eq!(f.overlap.own(2), vec![Some(0), Some(2)]);
        assert!(
            f.note()
                .unwrap()
                .contains("2 further copies of queries' own items, left out")
        );
        // The queries twice over: leave-one-out once the copies are gone.
        let doubled = [q, q].concat();
        let f = own_copies((&q, &ql), (&doubled, &[0, 1, 2, 0, 1, 2]), 2, true);
        assert_eq!((f.overlap, f.copies), (Overlap::Queries, vec![3, 4, 5]));
        // Embeddings (no copies): an equal vector is another item's as well as the query's.
        let f = own_copies((&q, &ql), (&doubled, &[0, 1, 2, 0, 1, 2]), 2, false);
        assert!(f.copies.is_empty());
        assert_eq!(f.overlap.own(3), vec![Some(0), Some(1), Some(2)]);
    }
}
