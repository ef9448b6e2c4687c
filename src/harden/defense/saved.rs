//! A saved state checked as a config is before a session takes it (`Defense.load_state_dict`):
//! its defense, the keys its memory keeps, and the epoch within the epochs. A state of another
//! defense, with keys no memory of this one keeps, or past its last epoch was taken on trust
//! and trained on.

use super::{DefenseSession, Saved};
use anyhow::Result;

impl DefenseSession {
    pub(super) fn check_saved(&self, saved: &Saved) -> Result<()> {
        let name = self.defense.name();
        if let Some(kind) = &saved.kind {
            crate::ensure_input!(
                kind == name,
                "state: saved by defense {kind}; this defense is {name} (load a state this defense saved)"
            );
        }
        let keeps = self.memory.save();
        let kept: Vec<&str> = keeps.keys().map(String::as_str).collect();
        if let Some(k) = saved.state.memory.keys().find(|k| !keeps.contains_key(*k)) {
            return Err(crate::input_error(format!(
                "state: unknown key {k:?} in defense {name}'s state; its memory keeps {}",
                if kept.is_empty() {
                    "nothing".to_string()
                } else {
                    kept.join(", ")
                }
            )));
        }
        let (epoch, epochs) = (saved.state.epoch, saved.state.epochs);
        crate::ensure_input!(
            epochs >= 1 && epoch < epochs,
            "state: epoch {epoch} of {epochs}; expected 0 ≤ epoch < epochs"
        );
        Ok(())
    }
}
