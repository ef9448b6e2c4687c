//! What the library tells its user besides its results — warnings (a result to read with care)
//! and notes (something rdml did on its own, such as finishing an interrupted write) — handed to
//! the sink each front end installs at start: the command line prints them on standard error in
//! its option words, the Python package raises them with `warnings.warn` as `rdml.RdmlWarning`.
//! A text names options as field tokens (`⟨data⟩`), which the sink words as its front end's.
//! No library file prints a warning or a note itself.

use std::sync::RwLock;

/// How much a message weighs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Warning,
    Note,
}

impl Level {
    /// The word the command line starts its line with.
    pub fn word(self) -> &'static str {
        match self {
            Level::Warning => "warning",
            Level::Note => "note",
        }
    }
}

type Sink = Box<dyn Fn(Level, &str) + Send + Sync>;
static SINK: RwLock<Option<Sink>> = RwLock::new(None);

/// Installs the front end's sink (`None`: the library's own, a line on standard error with the
/// options' tokens in plain words, for a Rust caller that installs none).
pub fn set_sink(sink: Option<Sink>) {
    *SINK.write().unwrap_or_else(|e| e.into_inner()) = sink;
}

/// A warning: the result stands, but should be read with what this says.
pub fn warn(text: impl AsRef<str>) {
    tell(Level::Warning, text.as_ref());
}

/// A note: something rdml did on its own that the user should know of.
pub fn note(text: impl AsRef<str>) {
    tell(Level::Note, text.as_ref());
}

fn tell(level: Level, text: &str) {
    // Every rank of a split job computes the same: rank 0 tells it once.
    if !crate::ranks::speaks() {
        return;
    }
    match SINK.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        Some(sink) => sink(level, text),
        None => crate::progress::line(&format!(
            "{}: {}",
            level.word(),
            crate::field::render(text, crate::field::Words::Plain)
        )),
    }
}
