//! A change of several files of a ledger's folder at once: staged, then swapped in (see the
//! module above for the journal's phases).

use super::{Ledger, Phase, digest, plain, remove_file};
use anyhow::{Context as _, Result, bail};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Removes a staging folder the ledger named (its files are all rdml's: nothing else writes there).
pub(super) fn remove_staging(staging: &Path) -> Result<()> {
    let Ok(m) = std::fs::symlink_metadata(staging) else {
        return Ok(());
    };
    if !m.is_dir() {
        bail!(
            "{} is not the folder rdml staged files in; it is left as it is",
            staging.display()
        );
    }
    for e in std::fs::read_dir(staging).with_context(|| format!("cannot read {}", staging.display()))? {
        remove_file(&e?.path())?;
    }
    crate::fault::point("remove", staging);
    std::fs::remove_dir(staging).with_context(|| format!("cannot remove {}", staging.display()))
}

/// A change under way: files staged, nothing in place yet.
#[derive(Debug)]
pub struct Change {
    pub(super) ledger: Ledger,
    pub(super) staging: PathBuf,
    pub(super) staged: BTreeMap<String, String>,
}

impl Change {
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Writes `bytes` as the new `name` (staged: in place at [`commit`](Self::commit)).
    pub fn stage(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        anyhow::ensure!(plain(name), "'{name}' is not a plain file name");
        let p = self.staging.join(name);
        crate::fault::point("write", &p);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&p)
            .with_context(|| format!("cannot create {}", p.display()))?;
        // Synced: past the point of no return a power cut must not roll half a file forward.
        std::io::Write::write_all(&mut f, bytes)
            .and_then(|()| f.sync_all())
            .with_context(|| format!("cannot write {}", p.display()))?;
        self.staged.insert(name.to_string(), digest(bytes));
        Ok(())
    }

    /// Puts the staged files in place and removes those of `removes` rdml wrote (one the user
    /// changed stays), after checking again that no staged name became the user's meanwhile;
    /// `what` names the folder's use.
    pub fn commit(mut self, removes: &[String], what: &str) -> Result<Ledger> {
        if let Err(e) = self.ledger.check_free(self.staged.keys().map(String::as_str), what) {
            let _ = remove_staging(&self.staging);
            self.ledger.state.pending = None;
            let _ = self.ledger.save();
            return Err(e);
        }
        let mut p = self
            .ledger
            .state
            .pending
            .take()
            .context("a change without its journal")?;
        if let Ok(d) = std::fs::File::open(&self.staging) {
            let _ = d.sync_all();
        }
        p.phase = Phase::Swapping;
        p.writes = std::mem::take(&mut self.staged);
        p.removes = removes.iter().filter(|n| self.ledger.owns(n)).cloned().collect();
        self.ledger.state.pending = Some(p.clone());
        self.ledger.save()?;
        self.ledger.swap(&p, &self.staging, true)?;
        Ok(self.ledger)
    }

    /// Gives the change up: the staged files go, the folder is as it was.
    pub fn abandon(mut self) -> Result<Ledger> {
        remove_staging(&self.staging)?;
        self.ledger.state.pending = None;
        self.ledger.save()?;
        Ok(self.ledger)
    }
}
