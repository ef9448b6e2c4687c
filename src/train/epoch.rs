//! One training epoch: its batches (seeded per epoch, so a resumed run draws what an
//! uninterrupted one would), the steps, the epoch's diagnostics read back once, the evaluation
//! when due, and what is said about it.

use super::record::{EpochRecord, TrainOptions};
use super::trainer::Trainer;
use crate::config::Experiment;
use crate::data::loader;
use crate::data::sampler::{self, epoch_rng};
use crate::eval::diagnostics::{Accumulator, EpochDiagnostics};
use crate::eval::{self, batch_tensor};
use crate::run_dir::RunLog;
use anyhow::Result;
use burn::tensor::Device;
use std::time::Instant;

/// Trains epoch `epoch` (0-based) and returns the trainer and the epoch's record.
pub(super) fn run(
    exp: &Experiment,
    opts: &TrainOptions,
    mut trainer: Trainer,
    splits: &crate::data::Splits,
    epoch: usize,
    log: &mut RunLog,
    device: &Device,
) -> Result<(Trainer, EpochRecord)> {
    let t0 = Instant::now();
    let mut batches = sampler::epoch_batches(&exp.train.sampler, &splits.train.labels, exp.seed, epoch)?;
    if let Some(m) = exp.train.max_batches {
        batches.truncate(m);
    }
    let nb = batches.len();
    let augment = Some(exp.seed.wrapping_mul(1_000_003).wrapping_add(epoch as u64));
    let mut rng = epoch_rng(exp.seed, epoch, 2);
    let mut sum = 0.0;
    let mut acc = Accumulator::new();
    trainer.start_epoch(exp, &splits.train, device)?;
    let mut bar =
        crate::progress::Progress::new(format!("[epoch {}/{}]", epoch + 1, exp.train.epochs), nb, opts.progress);
    for (i, b) in loader::prefetch(splits.train.clone(), batches, augment, 3).enumerate() {
        let b = b?;
        let x = batch_tensor(&b, device);
        trainer.defense_state.epoch = epoch;
        trainer.defense_state.epochs = exp.train.epochs;
        let (t, l, diag) = trainer.step(exp, x, &b.labels, &b.positions, &mut rng)?;
        trainer = t;
        acc.add_device(diag, exp.loss.triplet_margin().map(f64::from));
        sum += l;
        log.write(serde_json::json!({"event": "batch", "epoch": epoch + 1, "batch": i + 1, "loss": l}))?;
        bar.set(i + 1, &format!("loss {:.4}", sum / (i + 1) as f64));
        crate::progress::between_batches()?;
    }
    bar.finish();
    // The epoch's diagnostics and the last adversarial loss, each read back once.
    acc.flush()?;
    trainer.settle_defense_state()?;
    let secs = t0.elapsed().as_secs_f64();
    let last = epoch + 1 == exp.train.epochs;
    let due = exp.eval.every > 0 && (epoch + 1).is_multiple_of(exp.eval.every);
    let metrics = if due || last {
        Some(eval::evaluate(&trainer.net, &splits.test, &exp.eval, exp.seed, device)?)
    } else {
        None
    };
    let rec = EpochRecord {
        epoch: epoch + 1,
        batches: nb,
        mean_loss: sum / nb.max(1) as f64,
        seconds: secs,
        metrics,
        diagnostics: acc.finish(),
    };
    tell(exp, opts, &rec);
    log.write(serde_json::json!({"event": "epoch", "record": rec}))?;
    Ok((trainer, rec))
}

/// Warnings about the epoch (inseparable batches, an unhealthy model) and, with progress on,
/// its line.
fn tell(exp: &Experiment, opts: &TrainOptions, rec: &EpochRecord) {
    let epoch = rec.epoch;
    if let Some(d) = rec.diagnostics.as_ref().filter(|d| d.collapsed) {
        crate::notes::warn(format!(
            "epoch {epoch}: training batches inseparable: separability {:.4}, mean distance {:.4} (separability ≤ 0 in every batch, or NaN)",
            d.separability, d.mean_distance
        ));
    }
    if let Some(h) = rec
        .metrics
        .as_ref()
        .and_then(|m| m.health)
        .filter(|h| !h.verdict.is_healthy())
    {
        crate::notes::warn(format!("epoch {epoch}: {}", h.verdict.describe(&h)));
    }
    if opts.progress {
        let m = rec.metrics.as_ref().map(|m| {
            format!(
                " R@1 {:.4} MAP@R {:.4}{}",
                m.recall_at(1).unwrap_or(0.0),
                m.retrieval.map_at_r,
                m.nmi.map(|v| format!(" NMI {v:.4}")).unwrap_or_default()
            )
        });
        crate::progress::line(&format!(
            "epoch {epoch}/{}: loss {:.4}, {:.1} s{}",
            exp.train.epochs,
            rec.mean_loss,
            rec.seconds,
            m.unwrap_or_default()
        ));
        if let Some(d) = &rec.diagnostics {
            crate::progress::line(&format!("  {}", diagnostics_line(d)));
        }
    }
}

/// The epoch's collapse diagnostics on one line (the run log has them as JSON).
fn diagnostics_line(d: &EpochDiagnostics) -> String {
    let mut s = format!(
        "mean distance {:.4}, separability {:.4}, hardness {:.4}, collapseness {:.4}",
        d.mean_distance, d.separability, d.hardness, d.collapseness
    );
    if let (Some(m), Some(h)) = (d.made_hard, d.adversarial_hardness) {
        s += &format!(", perturbed hardness {h:.4}, made hard {:.1} %", 100.0 * m);
    }
    s
}
