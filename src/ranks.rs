//! The ranks of a process group a scoring job's work is split over (torch.distributed's, through
//! the Python package): each rank embeds and attacks its share of the batches, and every rank
//! ends with every rank's results, combined in the single-process order, so the split changes no
//! number. rdml has no transport of its own: a [`Group`] is the caller's all-gather of bytes.
//!
//! Every exchange carries a status, so that nothing hangs: a rank whose work fails sends its
//! reason as its next exchange ([`Ranks::run`]), which the others receive in place of a result
//! wherever they wait, and raise naming that rank. A job's last exchange says that every rank
//! finished, so a failure after the last result (a record that could not be written) reaches
//! every rank too. A rank waits for the others at most [`Ranks::wait`] at each exchange.

use anyhow::{Context as _, Result, anyhow};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// How long a rank waits for the others to join a job (the first exchange), unless the caller
/// says: the ranks reach a scoring call within the imbalance of their last step, and a rank that
/// was never asked must not keep the others waiting for the process group's own timeout (30
/// minutes for gloo). Once every rank has joined, an exchange waits for the others' work, which
/// may take as long as it takes, within the group's own timeout.
pub const WAIT_SECONDS: f64 = 300.0;

/// The caller's process group: its rank, its size and an all-gather of bytes.
pub trait Group: Send + Sync {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// Every rank's `bytes` in rank order (this rank's among them), waiting at most `wait` for
    /// the others (`None`: the group's own timeout).
    fn all_gather(&self, bytes: &[u8], wait: Option<Duration>) -> Result<Vec<Vec<u8>>>;
    /// The words this rank's failure `e` is told to the others in (the binding names the
    /// exception a caller's model raised).
    fn reason(&self, e: &anyhow::Error) -> String {
        format!("{e:#}")
    }
}

/// The ranks a job runs on: this process alone, or a process group.
#[derive(Clone)]
pub struct Ranks {
    group: Option<Arc<dyn Group>>,
    /// The caller's `group_timeout` (checked when a job starts, so that every rank hears of it).
    wait_s: f64,
    /// Whether every rank has joined the job under way: its exchanges then wait for the others'
    /// work without the joining bound.
    joined: Arc<AtomicBool>,
}

impl Default for Ranks {
    fn default() -> Self {
        Self::alone()
    }
}

impl std::fmt::Debug for Ranks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ranks({} of {})", self.rank(), self.size())
    }
}

/// A failure another rank told, or the group itself failing: nothing more is sent after it.
#[derive(Debug)]
struct Told(String);

impl std::fmt::Display for Told {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Told {}

fn is_told(e: &anyhow::Error) -> bool {
    e.downcast_ref::<Told>().is_some() || e.chain().any(|c| c.is::<Told>())
}

/// Exchanges' status bytes.
const OK: u8 = 0;
const FAILED: u8 = 1;

/// Jobs under way whose rank is not the one that speaks (rank 0): their warnings, notes and
/// progress are rank 0's to show.
static SILENT: AtomicUsize = AtomicUsize::new(0);

/// Whether this process shows warnings, notes and progress: not while it runs a job as a rank
/// other than 0.
pub fn speaks() -> bool {
    SILENT.load(Ordering::SeqCst) == 0
}

/// A job's silence on a rank other than 0, lifted however the job ends (a panic included).
struct Silence(bool);

impl Silence {
    fn of(rank: usize) -> Self {
        if rank != 0 {
            SILENT.fetch_add(1, Ordering::SeqCst);
        }
        Self(rank != 0)
    }
}

impl Drop for Silence {
    fn drop(&mut self) {
        if self.0 {
            SILENT.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Ranks {
    /// This process alone: no exchange, every share the whole.
    pub fn alone() -> Self {
        Self {
            group: None,
            wait_s: WAIT_SECONDS,
            joined: Default::default(),
        }
    }

    /// The ranks of `group`, the first exchange of a job waiting at most `wait_s` seconds
    /// (default [`WAIT_SECONDS`]) for every rank to join; a group of one is this process alone.
    pub fn over(group: Arc<dyn Group>, wait_s: Option<f64>) -> Self {
        let n = group.size();
        Self {
            group: (n > 1 && group.rank() < n).then_some(group),
            wait_s: wait_s.unwrap_or(WAIT_SECONDS),
            joined: Default::default(),
        }
    }

    pub fn rank(&self) -> usize {
        self.group.as_ref().map_or(0, |g| g.rank())
    }

    pub fn size(&self) -> usize {
        self.group.as_ref().map_or(1, |g| g.size())
    }

    /// Whether the work is split (a group of more than one rank).
    pub fn split(&self) -> bool {
        self.group.is_some()
    }

    /// How long the next exchange waits for the others: the joining bound until every rank has
    /// joined, then the group's own (a valid `group_timeout` is checked at a job's start).
    fn wait(&self) -> Option<Duration> {
        match self.joined.load(Ordering::SeqCst) {
            true => None,
            false => Some(Duration::try_from_secs_f64(self.wait_s).unwrap_or(Duration::from_secs_f64(WAIT_SECONDS))),
        }
    }

    /// This rank's share of `n` units (batches, queries): a run of consecutive ones, the ranks'
    /// shares in rank order making `0..n`, their sizes differing by one at most.
    pub fn share(&self, n: usize) -> Range<usize> {
        let (r, k) = (self.rank(), self.size());
        (r * n / k)..((r + 1) * n / k)
    }

    /// Every rank's `payload`, in rank order; a rank that told its failure instead is this
    /// rank's error, naming it.
    pub fn exchange(&self, payload: &[u8]) -> Result<Vec<Vec<u8>>> {
        let Some(g) = &self.group else {
            return Ok(vec![payload.to_vec()]);
        };
        let mut sent = Vec::with_capacity(payload.len() + 1);
        sent.push(OK);
        sent.extend_from_slice(payload);
        let here = format!("rank {} of {}", g.rank(), g.size());
        // The group's own error stays in the chain (an interrupt is said as one).
        let got = g
            .all_gather(&sent, self.wait())
            .map_err(|e| e.context(Told(format!("{here}: the exchange failed"))))?;
        if got.len() != g.size() {
            return Err(anyhow!(Told(format!(
                "{here}: the group answered {} ranks' messages",
                got.len()
            ))));
        }
        let failed: Vec<String> = got
            .iter()
            .enumerate()
            .filter(|(_, m)| m.first() != Some(&OK))
            .map(|(r, m)| format!("rank {r}: {}", String::from_utf8_lossy(m.get(1..).unwrap_or_default())))
            .collect();
        if !failed.is_empty() {
            return Err(anyhow!(Told(format!(
                "{} (this is {here}; every rank stops)",
                failed.join("; ")
            ))));
        }
        Ok(got.into_iter().map(|mut m| m.split_off(1)).collect())
    }

    /// Every rank's `value`, in rank order.
    pub fn gather<T: Serialize + DeserializeOwned>(&self, value: &T) -> Result<Vec<T>> {
        if !self.split() {
            return Ok(vec![serde_json::from_slice(&serde_json::to_vec(value)?)?]);
        }
        self.exchange(&serde_json::to_vec(value)?)?
            .iter()
            .enumerate()
            .map(|(r, m)| serde_json::from_slice(m).with_context(|| format!("rank {r}'s message")))
            .collect()
    }

    /// Every rank's float32 `rows` (of `dim` values each), joined in rank order: the shares of a
    /// set embedded across the ranks. A rank with no rows has no width; the others must agree.
    pub fn gather_rows(&self, rows: &[f32], dim: usize) -> Result<(Vec<f32>, usize)> {
        if !self.split() {
            return Ok((rows.to_vec(), dim));
        }
        let mut bytes = Vec::with_capacity(8 + rows.len() * 4);
        bytes.extend_from_slice(&(dim as u64).to_le_bytes());
        bytes.extend(rows.iter().flat_map(|v| v.to_le_bytes()));
        let (mut all, mut width) = (vec![], None::<(usize, usize)>);
        for (r, m) in self.exchange(&bytes)?.iter().enumerate() {
            let (d, values) = m
                .split_at_checked(8)
                .ok_or_else(|| anyhow!("rank {r}'s rows: no width"))?;
            let d = u64::from_le_bytes(d.try_into()?) as usize;
            anyhow::ensure!(
                values.len() % 4 == 0 && (d == 0 || (values.len() / 4).is_multiple_of(d)),
                "rank {r}'s rows: {} bytes for rows of {d} values",
                values.len()
            );
            if values.is_empty() {
                continue;
            }
            match width {
                Some((w, first)) if w != d => {
                    anyhow::bail!("the model embeds in {d} dimensions on rank {r} and in {w} on rank {first}")
                }
                _ => width = Some((d, r)),
            }
            all.extend(
                values
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
        }
        Ok((all, width.map_or(dim, |w| w.0)))
    }

    /// Checks that every rank was asked the same (`asked`: the request, digests of its arrays
    /// and models), naming the first field that differs; then runs `body`, telling the others
    /// when it fails (a panic too), and ends with an exchange that says every rank finished.
    pub fn run<T>(&self, asked: &serde_json::Value, body: impl FnOnce() -> Result<T>) -> Result<T> {
        if !self.split() {
            return body();
        }
        let _silence = Silence::of(self.rank());
        self.joined.store(false, Ordering::SeqCst);
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<T> {
            crate::ensure_input!(
                self.wait_s.is_finite() && self.wait_s > 0.0 && self.wait_s < 1e9,
                "group_timeout: {}; expected a number of seconds above 0",
                self.wait_s
            );
            self.agree(asked)?;
            self.joined.store(true, Ordering::SeqCst);
            let v = body()?;
            self.exchange(&[])?;
            Ok(v)
        }));
        let out = out.unwrap_or_else(|panic| {
            self.tell_failure(&anyhow!("rdml panicked (a bug: please report it)"));
            std::panic::resume_unwind(panic)
        });
        self.joined.store(false, Ordering::SeqCst);
        out.inspect_err(|e| self.tell_failure(e))
    }

    /// This rank's failure `e` told to the others as its next exchange (unless the failure is one
    /// they told, or the group's own): they receive it wherever they wait.
    pub fn tell_failure(&self, e: &anyhow::Error) {
        let Some(g) = &self.group else { return };
        if is_told(e) {
            return;
        }
        let mut sent = vec![FAILED];
        sent.extend_from_slice(g.reason(e).as_bytes());
        // Best effort: the failure itself is this rank's error either way.
        let _ = g.all_gather(&sent, self.wait());
    }

    /// Every rank's `asked` compared with rank 0's.
    fn agree(&self, asked: &serde_json::Value) -> Result<()> {
        let all = self.gather(asked)?;
        for (r, theirs) in all.iter().enumerate().skip(1) {
            let model = |v: &serde_json::Value| v.get("model_digest").cloned();
            let field = if model(&all[0]) != model(theirs) {
                Some("model_digest".to_string())
            } else {
                differs(&all[0], theirs, String::new())
            };
            if let Some(field) = field {
                return Err(crate::input_error(agreement_error(&field, r, &all[0], theirs)));
            }
        }
        Ok(())
    }
}

/// The words of a field that differs between rank 0 and rank `r`.
fn agreement_error(field: &str, r: usize, first: &serde_json::Value, theirs: &serde_json::Value) -> String {
    let value = |v: &serde_json::Value| {
        let at = field.split('.').filter(|k| !k.is_empty()).try_fold(v, |v, k| v.get(k));
        let s = at.map_or("nothing".to_string(), |v| v.to_string());
        if s.chars().count() > 80 {
            format!("{}…", s.chars().take(80).collect::<String>())
        } else {
            s
        }
    };
    if field == "model_digest" {
        let params = |v: &serde_json::Value| v.get("parameters_digest").filter(|p| !p.is_null()).cloned();
        let why = if params(first).is_some() && params(first) == params(theirs) {
            "the same parameters but other buffers: batch-norm statistics left by each rank's last \
             training-mode forward (DDP broadcasts buffers before a forward, not after). Broadcast rank 0's \
             buffers first: for b in model.buffers(): torch.distributed.broadcast(b, 0)"
        } else {
            "other weights: each rank must score the same ones (load the same checkpoint on every rank; DDP \
             keeps its parameters equal)"
        };
        return format!("model: rank {r} holds another model than rank 0, with {why}");
    }
    if let Some(what) = ["images", "gallery", "surrogate"]
        .iter()
        .find(|w| field.starts_with(&format!("{w}_digest")))
    {
        return format!(
            "{what}: rank {r} was given other {} than rank 0; every rank passes the same ones (rdml splits \
             the work over the ranks), or group=False scores each rank's own alone",
            if *what == "surrogate" {
                "surrogate weights"
            } else {
                "images or labels"
            }
        );
    }
    format!(
        "{}: rank 0 and rank {r} were asked different things ({} on rank 0, {} on rank {r}); every rank must \
         make the same call",
        if field.is_empty() { "request" } else { field },
        value(first),
        value(theirs)
    )
}

/// The first field (dotted keys) where `a` and `b` differ.
fn differs(a: &serde_json::Value, b: &serde_json::Value, at: String) -> Option<String> {
    use serde_json::Value::Object;
    match (a, b) {
        (Object(x), Object(y)) => {
            let keys = x.keys().chain(y.keys().filter(|k| !x.contains_key(*k)));
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(p), Some(q)) => differs(p, q, join(&at, k)),
                _ => Some(join(&at, k)),
            })
        }
        _ => (a != b).then_some(at),
    }
}

fn join(at: &str, k: &str) -> String {
    if at.is_empty() {
        k.to_string()
    } else {
        format!("{at}.{k}")
    }
}

/// A digest of float32 values, for ranks to compare the arrays they were given.
pub fn digest(values: &[f32]) -> String {
    use std::hash::Hasher;
    let mut h = std::hash::DefaultHasher::new();
    h.write_usize(values.len());
    for v in values {
        h.write_u32(v.to_bits());
    }
    format!("{:016x}", h.finish())
}

#[cfg(test)]
pub mod tests;
