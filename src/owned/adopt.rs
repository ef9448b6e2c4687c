//! Files a ledger records that it did not write itself: a set an earlier version wrote, the files
//! of a folder from before ledgers, a run's log, each recorded only as it is now.

use super::{Ledger, current_digest, plain, prefix_digest};
use anyhow::Result;

impl Ledger {
    /// Records `name` as rdml's when its bytes are `digest` now (a set an earlier version wrote,
    /// proved by its own manifest).
    pub fn adopt(&mut self, name: &str, digest: &str) {
        if plain(name) && current_digest(&self.dir.join(name)).as_deref() == Some(digest) {
            self.state.files.insert(name.to_string(), digest.to_string());
        }
    }

    /// Records each of `names` that is a file now as rdml's, as it is (the files of a folder an
    /// earlier version wrote, before it kept a ledger there), and saves the ledger when any was.
    /// Returns the names recorded.
    pub fn adopt_as_is(&mut self, names: &[&str]) -> Result<Vec<String>> {
        let mut adopted = vec![];
        for n in names.iter().filter(|n| plain(n)) {
            if let Some(d) = current_digest(&self.dir.join(n)) {
                self.state.files.insert(n.to_string(), d);
                adopted.push(n.to_string());
            }
        }
        if !adopted.is_empty() {
            self.save()?;
        }
        Ok(adopted)
    }

    /// Records `name`, a plain file rdml appends to (a run's log), as rdml's while it begins with
    /// the bytes it holds now, and saves the ledger.
    pub fn adopt_appended(&mut self, name: &str) -> Result<()> {
        let p = self.dir.join(name);
        if plain(name)
            && let Ok(now) = crate::read::bytes(&p, crate::read::Follow::NoLinks, crate::read::ANY)
        {
            self.state.files.insert(name.to_string(), prefix_digest(&now));
            self.save()?;
        }
        Ok(())
    }
}
