//! A run's report page sealed as rdml's: its last line names the digests of the page above it,
//! of the run's `run.json` and of its model when rdml wrote it. A page whose seal still holds
//! (the page unedited, the same run and model) is one rdml can prove it wrote after the run's
//! ledger is lost ([`super::recover`]); an edited page, or one of another run, stays the user's.

use super::RUN;
use crate::owned::digest;
use std::path::Path;

const OPEN: &str = "<!-- rdml report seal: ";
const CLOSE: &str = " -->\n";

/// The seal's fields: the page's, the run record's and the model's digests.
fn fields(dir: &Path, page: &[u8]) -> Option<String> {
    let run = crate::read::bookkeeping(&dir.join(RUN)).ok()?;
    let model = super::model_digest(dir).ok()?;
    Some(serde_json::json!({"page": digest(page), "run": digest(&run), "model": model}).to_string())
}

/// `page` with its seal appended (a comment after the document, which browsers ignore); as it
/// is where the run has no record or model yet.
pub fn seal(dir: &Path, mut page: Vec<u8>) -> Vec<u8> {
    if let Some(f) = fields(dir, &page) {
        page.extend(format!("{OPEN}{f}{CLOSE}").into_bytes());
    }
    page
}

/// Whether `bytes` is a page rdml sealed in `dir`, unedited since, for the run and model there now.
pub fn sealed(dir: &Path, bytes: &[u8]) -> bool {
    // A page re-saved in another encoding is not the page rdml wrote.
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    let Some(body) = text.strip_suffix(CLOSE) else {
        return false;
    };
    let Some(at) = body.rfind(OPEN) else {
        return false;
    };
    let page = &bytes[..at];
    fields(dir, page).is_some_and(|f| f == body[at + OPEN.len()..])
}
