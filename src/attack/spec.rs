//! An attack or method spec, `NAME[:VALUE][:KEY=VALUE]…`, parsed into the parts a unit reads
//! (rdml's `NN-CW:0.05`, `MTAX:5`; robrank's `CA:pm=+:W=1:eps=0.03137:alpha=0.011764:pgditer=32`),
//! with robrank's budget keys.

use anyhow::{Context as _, Result, bail, ensure};
use std::str::FromStr;

/// Budget keys of a robrank spec: `eps`, `alpha` (the step) and `pgditer` (the steps).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpecBudget {
    pub eps: Option<f32>,
    pub step: Option<f32>,
    pub steps: Option<usize>,
}

/// A parsed spec: the name as written (upper-cased), an unnamed value, and `KEY=VALUE` pairs
/// that a unit takes as it reads them; any left over is an error.
#[derive(Debug)]
pub struct Params {
    spec: String,
    name: String,
    value: Option<String>,
    keys: Vec<(String, String, bool)>,
}

impl Params {
    pub fn parse(spec: &str) -> Result<Self> {
        let mut parts = spec.trim().split(':');
        let name = parts.next().unwrap_or("").trim().to_string();
        ensure!(!name.is_empty(), "empty spec '{spec}'");
        let (mut value, mut keys) = (None, vec![]);
        for part in parts {
            match part.split_once('=') {
                Some((k, v)) => {
                    let k = k.trim().to_ascii_lowercase();
                    ensure!(!keys.iter().any(|(kk, _, _)| *kk == k), "'{spec}': {k} is given twice");
                    keys.push((k, v.trim().to_string(), false));
                }
                None if value.is_none() && keys.is_empty() => value = Some(part.trim().to_string()),
                None => bail!("'{spec}': expected KEY=VALUE after ':', got '{part}'"),
            }
        }
        Ok(Self {
            spec: spec.to_string(),
            name: name.to_ascii_uppercase(),
            value,
            keys,
        })
    }

    /// The name, upper-cased.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// The unnamed value (`NN-CW:0.05`), or the value of `key`; at most one of the two.
    pub fn value_or(&mut self, key: &str) -> Result<Option<String>> {
        let named = self.take(key);
        match (self.value.take(), named) {
            (Some(_), Some(_)) => bail!("'{}': give {key} once", self.spec),
            (v, n) => Ok(v.or(n)),
        }
    }

    /// The value of `key`, marked as read.
    pub fn take(&mut self, key: &str) -> Option<String> {
        self.keys.iter_mut().find(|(k, _, _)| k == key).map(|(_, v, used)| {
            *used = true;
            v.clone()
        })
    }

    /// `key` (or the unnamed value) read as a `T` that `ok` accepts, `what` saying what is expected.
    pub fn number<T: FromStr>(&mut self, key: &str, what: &str, ok: impl Fn(&T) -> bool) -> Result<Option<T>> {
        let v = self.value_or(key)?;
        self.parse_number(key, v, what, ok)
    }

    /// A named-only number (robrank's keys), or `None`.
    pub(crate) fn key_number<T: FromStr>(
        &mut self,
        key: &str,
        what: &str,
        ok: impl Fn(&T) -> bool,
    ) -> Result<Option<T>> {
        let v = self.take(key);
        self.parse_number(key, v, what, ok)
    }

    fn parse_number<T: FromStr>(
        &self,
        key: &str,
        v: Option<String>,
        what: &str,
        ok: impl Fn(&T) -> bool,
    ) -> Result<Option<T>> {
        let Some(v) = v else { return Ok(None) };
        v.parse::<T>()
            .ok()
            .filter(|x| ok(x))
            .map(Some)
            .with_context(|| format!("'{}': {key} = '{v}': expected {what}", self.spec))
    }

    /// Whether the attack raises (`+`): from the name's sign (`CA+`) or robrank's `pm=±`.
    pub fn raise(&mut self) -> Result<bool> {
        let from_name = match self.name.chars().last() {
            Some('+') => Some(true),
            Some('-') => Some(false),
            _ => None,
        };
        let pm = self.take("pm");
        let from_pm = match pm.as_deref() {
            None => None,
            Some("+") => Some(true),
            Some("-") => Some(false),
            Some(o) => bail!("'{}': pm = '{o}': expected + or -", self.spec),
        };
        match (from_name, from_pm) {
            (Some(a), Some(b)) if a != b => bail!("'{}': the name's sign and pm disagree", self.spec),
            (Some(a), _) | (None, Some(a)) => Ok(a),
            (None, None) => bail!("'{}': say + or − (e.g. {}+, or pm=+)", self.spec, self.name),
        }
    }

    /// robrank's W (CA) or M (QA): rdml implements the ERS setting, 1.
    pub fn only_one(&mut self, key: &str) -> Result<()> {
        let spec = self.spec.clone();
        match self.take(&key.to_ascii_lowercase()) {
            None => Ok(()),
            Some(v) if v.trim() == "1" => Ok(()),
            Some(v) => bail!("'{spec}': {key} = {v}: rdml implements {key} = 1 (robrank's ERS setting) only"),
        }
    }

    /// Fails on keys no one read.
    pub(crate) fn finish(&self, expected: &str) -> Result<()> {
        if let Some(v) = &self.value {
            bail!("'{}': {} takes no value after ':' (got '{v}')", self.spec, self.name);
        }
        let unread: Vec<&str> = self.keys.iter().filter(|k| !k.2).map(|k| k.0.as_str()).collect();
        ensure!(
            unread.is_empty(),
            "'{}': unknown key(s) {} for {}{expected}",
            self.spec,
            unread.join(", "),
            self.name
        );
        Ok(())
    }
}
