//! Progress of a long command on standard error: a bar redrawn in place on a terminal, a plain
//! line every tenth of the way otherwise (so that a log file stays readable), nothing when quiet.

use std::io::IsTerminal;
use std::sync::RwLock;
use std::time::Instant;

/// The message of the error [`between_batches`] returns when the hook asks to stop.
pub const INTERRUPTED: &str = "interrupted";

type Hook = Box<dyn Fn() -> bool + Send + Sync>;
static INTERRUPT: RwLock<Option<Hook>> = RwLock::new(None);

/// Sets the check run between the batches of training and of attacks (`None`: none). The
/// command line needs none (Ctrl-C ends the process); the Python package, whose long calls run
/// without the GIL, checks there for Ctrl-C.
pub fn set_interrupt(hook: Option<Hook>) {
    *INTERRUPT.write().unwrap_or_else(|e| e.into_inner()) = hook;
}

/// Between two batches: an error ([`INTERRUPTED`]) when the hook says to stop. A run stopped
/// here keeps its last checkpoint, as a killed one does.
pub fn between_batches() -> anyhow::Result<()> {
    let stop = INTERRUPT
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|h| h());
    anyhow::ensure!(!stop, INTERRUPTED);
    Ok(())
}

/// A line of a long job's progress on standard error (an epoch's, a suite attack's), and where
/// the library's notes go when no front end installed a sink ([`crate::notes`]).
pub fn line(text: &str) {
    if crate::ranks::speaks() {
        eprintln!("{text}");
    }
}

/// One task of `total` steps.
pub struct Progress {
    label: String,
    total: usize,
    t0: Instant,
    tty: bool,
    enabled: bool,
    drawn: bool,
}

impl Progress {
    /// `enabled` false: a silent progress (`--quiet`).
    pub fn new(label: impl Into<String>, total: usize, enabled: bool) -> Self {
        Self {
            label: label.into(),
            total,
            t0: Instant::now(),
            tty: std::io::stderr().is_terminal(),
            // Every rank of a split job goes through the same steps: rank 0 shows them.
            enabled: enabled && crate::ranks::speaks(),
            drawn: false,
        }
    }

    /// Seconds since the task began.
    pub fn seconds(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// `done` of the steps are finished; `note` follows the counts (a running loss, say).
    pub fn set(&mut self, done: usize, note: &str) {
        if !self.enabled || self.total == 0 {
            return;
        }
        let secs = self.seconds();
        let rate = done as f64 / secs.max(1e-9);
        let eta = self.total.saturating_sub(done) as f64 / rate.max(1e-9);
        let n = self.total;
        if self.tty {
            let w = 30;
            let fill = w * done.min(n) / n;
            eprint!(
                "\r{} [{}{}] {done}/{n} {note} ETA {eta:.0} s   ",
                self.label,
                "#".repeat(fill),
                " ".repeat(w - fill)
            );
            self.drawn = true;
        } else if done == n || done.is_multiple_of((n / 10).max(1)) {
            eprintln!("{} {done}/{n} {note} ({secs:.1} s)", self.label);
        }
    }

    /// Ends the bar's line on a terminal.
    pub fn finish(&mut self) {
        if self.drawn {
            eprintln!();
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
