//! One counted point before every change rdml makes to a folder (a file written, a rename, a
//! removal, a new folder), so that a test can stop the process at each change in turn and prove
//! that what is left is the old state or the new one, never a mix (issue 38's fault injection).
//!
//! Two variables drive it, for tests only: `RDML_FAULT_LOG=FILE` appends one line per change
//! (`N what path`), and `RDML_FAULT_AT=N` ends the process just before the N-th change, with exit
//! status 137, as a `kill -9` would (no destructor, no clean-up). Unset, a point costs one
//! atomic increment.

use std::io::Write;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

static COUNT: AtomicU64 = AtomicU64::new(0);

struct Plan {
    at: Option<u64>,
    log: Option<std::path::PathBuf>,
}

fn plan() -> &'static Plan {
    static PLAN: OnceLock<Plan> = OnceLock::new();
    PLAN.get_or_init(|| Plan {
        at: std::env::var("RDML_FAULT_AT").ok().and_then(|v| v.parse().ok()),
        log: std::env::var_os("RDML_FAULT_LOG").map(Into::into),
    })
}

/// Marks the change `what` (`rename`, `remove`, `write`, `mkdir`) about to be made to `path`.
pub fn point(what: &str, path: &Path) {
    let n = COUNT.fetch_add(1, Ordering::SeqCst) + 1;
    let plan = plan();
    if let Some(log) = &plan.log
        && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log)
    {
        let _ = writeln!(f, "{n} {what} {}", path.display());
    }
    if plan.at == Some(n) {
        // SAFETY: `_exit` takes any status and never returns; it is as abrupt as a kill (no
        // unwinding, no destructor, no buffer flushed), which is the point.
        unsafe { libc::_exit(137) };
    }
}
