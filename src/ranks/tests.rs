//! The ranks as threads of one process: shares, exchanges, failures told, agreement.

use super::*;
use std::sync::{Barrier, Mutex};

/// Two barriers around the slots every rank's message is put in.
type Slots = (Barrier, Mutex<Vec<Vec<u8>>>, Barrier);

/// Ranks as threads of one process, exchanging through shared slots.
pub struct Threads {
    rank: usize,
    size: usize,
    shared: Arc<Slots>,
}

impl Threads {
    pub fn group(n: usize) -> Vec<Arc<dyn Group>> {
        let shared = Arc::new((Barrier::new(n), Mutex::new(vec![vec![]; n]), Barrier::new(n)));
        (0..n)
            .map(|rank| {
                Arc::new(Threads {
                    rank,
                    size: n,
                    shared: shared.clone(),
                }) as Arc<dyn Group>
            })
            .collect()
    }
}

impl Group for Threads {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn all_gather(&self, bytes: &[u8], _wait: Option<Duration>) -> Result<Vec<Vec<u8>>> {
        self.shared.1.lock().unwrap()[self.rank] = bytes.to_vec();
        self.shared.0.wait();
        let all = self.shared.1.lock().unwrap().clone();
        self.shared.2.wait();
        Ok(all)
    }
}

/// Runs `f` on every rank of a group of `n` threads; their results in rank order.
pub fn on_ranks<T: Send>(n: usize, f: impl Fn(Ranks) -> T + Sync) -> Vec<T> {
    let groups = Threads::group(n);
    std::thread::scope(|s| {
        let hs: Vec<_> = groups
            .into_iter()
            .map(|g| {
                let f = &f;
                s.spawn(move || f(Ranks::over(g, None)))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn shares_cover_the_units_in_rank_order() {
    let shares = on_ranks(3, |r| r.share(10));
    assert_eq!(shares, vec![0..3, 3..6, 6..10]);
    assert_eq!(on_ranks(2, |r| r.share(1)), vec![0..0, 0..1]);
}

#[test]
fn rows_gather_in_rank_order_and_a_rank_without_rows_has_no_say_on_the_width() {
    let got = on_ranks(3, |r| {
        let rows: Vec<f32> = match r.rank() {
            0 => vec![],
            k => vec![k as f32; 4],
        };
        r.gather_rows(&rows, if r.rank() == 0 { 0 } else { 2 }).unwrap()
    });
    for g in &got {
        assert_eq!(g, &(vec![1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0], 2));
    }
}

/// One rank failing in its work is every rank's error, naming it; the failing rank keeps its
/// own error.
#[test]
fn a_failure_on_one_rank_is_told_to_every_rank() {
    let asked = serde_json::json!({"seed": 0});
    let got = on_ranks(3, |r| {
        r.run(&asked, || {
            if r.rank() == 1 {
                anyhow::bail!("the model raised ValueError: boom");
            }
            r.exchange(b"result")?;
            Ok(())
        })
        .map_err(|e| format!("{e:#}"))
    });
    assert_eq!(got[1].as_ref().unwrap_err(), "the model raised ValueError: boom");
    for k in [0, 2] {
        let e = got[k].as_ref().unwrap_err();
        assert!(e.contains("rank 1: the model raised ValueError: boom"), "{e}");
        assert!(e.contains(&format!("this is rank {k} of 3")), "{e}");
    }
}

/// A failure after the last result (a record not written on rank 0) reaches the others at
/// the job's last exchange.
#[test]
fn a_late_failure_reaches_the_others_at_the_last_exchange() {
    let got = on_ranks(2, |r| {
        r.run(&serde_json::json!({}), || {
            r.exchange(b"x")?;
            anyhow::ensure!(r.rank() != 0, "out: cannot write");
            Ok(())
        })
        .map_err(|e| format!("{e:#}"))
    });
    assert!(got[1].as_ref().unwrap_err().contains("rank 0: out: cannot write"));
}

/// Ranks asked different things are refused before any work, naming the field; models that
/// differ only in their buffers are said as batch-norm statistics.
#[test]
fn ranks_asked_different_things_are_refused_naming_the_field() {
    let got = on_ranks(2, |r| {
        let asked = serde_json::json!({"options": {"seed": r.rank(), "eps": 0.1}});
        r.run(&asked, || Ok(())).map_err(|e| format!("{e:#}"))
    });
    for g in &got {
        let e = g.as_ref().unwrap_err();
        assert!(
            e.starts_with("options.seed: rank 0 and rank 1 were asked different things (0 on rank 0, 1 on rank 1)"),
            "{e}"
        );
    }
    let got = on_ranks(2, |r| {
        let asked =
            serde_json::json!({"model_digest": format!("sha256:{}", r.rank()), "parameters_digest": "sha256:p"});
        r.run(&asked, || Ok(())).map_err(|e| format!("{e:#}"))
    });
    assert!(
        got[0].as_ref().unwrap_err().contains("batch-norm statistics"),
        "{got:?}"
    );
}
