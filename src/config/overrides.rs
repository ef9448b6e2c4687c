//! `--set KEY=VALUE`: a config's keys overridden on the TOML tree before it is read.

use anyhow::{Context, Result, bail, ensure};

/// Config overrides as a request carries them: `KEY=VALUE` texts (the command line's `--set`, a
/// list in Python), or keys and their values (a dict in Python, read from JSON: no front end
/// writes TOML text).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(untagged)]
pub enum SetKeys {
    Texts(Vec<String>),
    Values(serde_json::Map<String, serde_json::Value>),
}

impl Default for SetKeys {
    fn default() -> Self {
        SetKeys::Texts(vec![])
    }
}

impl SetKeys {
    /// The overrides as `KEY=VALUE` texts, in the order given; a value written as TOML.
    pub fn texts(&self) -> Result<Vec<String>> {
        match self {
            SetKeys::Texts(t) => Ok(t.clone()),
            SetKeys::Values(m) => m
                .iter()
                .map(|(key, v)| {
                    let value = toml::Value::try_from(v).map_err(|_| {
                        crate::input_error(format!(
                            "⟨set⟩ {key}: {v} has no TOML form (expected a number, a string, a boolean, a list or a \
                             table of them)"
                        ))
                    })?;
                    Ok(format!("{key}={value}"))
                })
                .collect(),
        }
    }
}

/// The overrides a command's flags make: `--set KEY=VALUE`s, then `--epochs` and
/// `--max-batches` (so they win over a `--set`), each kept as the option the caller gave
/// (`⟨epochs⟩=3`: [`config_key`] reads it as `train.epochs`), so that every message names it in
/// the caller's words (`--epochs 3`, `epochs=3`), never as a `--set` they did not write.
pub fn command_overrides(set: &[String], epochs: Option<usize>, max_batches: Option<usize>) -> Vec<String> {
    let mut v = set.to_vec();
    if let Some(e) = epochs {
        v.push(format!("⟨epochs⟩={e}"));
    }
    if let Some(m) = max_batches {
        v.push(format!("⟨max_batches⟩={m}"));
    }
    v
}

/// The config key an override's key sets: itself, or the one a command's option stands for.
pub fn config_key(key: &str) -> &str {
    match key {
        "⟨epochs⟩" => "train.epochs",
        "⟨max_batches⟩" => "train.max_batches",
        "⟨defense⟩" => "defense",
        k => k,
    }
}

/// An override as a message names it: `⟨set⟩ key=value`, or the option that made it (`⟨epochs⟩ 3`,
/// which each front end words as its own: `--epochs 3`, `epochs=3`).
pub fn said(o: &str) -> String {
    match o.split_once('=') {
        Some((k, v)) if k.starts_with('⟨') => format!("{k} {v}"),
        _ => format!("⟨set⟩ {o}"),
    }
}

/// A word for each key that `overrides` give more than once with different values: the last
/// one is used (a later `--set` overrides an earlier one, as a flag such as `--epochs` does).
pub fn repeated_overrides(overrides: &[String]) -> Vec<String> {
    type Given<'a> = (&'a str, &'a str);
    let mut last: std::collections::BTreeMap<&str, (Given, Vec<Given>)> = std::collections::BTreeMap::new();
    for o in overrides {
        if let Some((k, v)) = o.split_once('=') {
            let given = (o.as_str(), v.trim());
            let e = last.entry(config_key(k.trim())).or_insert((given, vec![]));
            if e.0.1 != v.trim() {
                e.1.push(e.0);
                e.0 = given;
            }
        }
    }
    last.iter()
        .filter(|(_, (_, earlier))| !earlier.is_empty())
        .map(|(k, ((o, v), earlier))| {
            if earlier.iter().chain([&(*o, *v)]).all(|(o, _)| !o.starts_with('⟨')) {
                let before: Vec<&str> = earlier.iter().map(|e| e.1).collect();
                return format!(
                    "{k} is set more than once ({} then {v}): {v}, the last, is used",
                    before.join(", ")
                );
            }
            let before: Vec<String> = earlier.iter().map(|e| said(e.0)).collect();
            format!(
                "{k} is given more than once ({}, then {}): the last is used",
                before.join(", "),
                said(o)
            )
        })
        .collect()
}

fn is_integer_literal(s: &str) -> bool {
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s).replace('_', "");
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Applies `a.b.c=value`; the value is read as a TOML value (number, bool, array, inline table),
/// or as a string when it is not one. A string set on a table that has a `kind` sets that kind.
pub fn apply_override(root: &mut toml::Value, spec: &str) -> Result<()> {
    let (key, raw) = spec
        .split_once('=')
        .with_context(|| format!("⟨set⟩ {spec}: expected key=value"))?;
    let key = config_key(key.trim());
    ensure!(!key.is_empty(), "⟨set⟩ {spec}: empty key");
    let value = match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").expect("parsed key"),
        // An integer TOML cannot hold would otherwise become a string and be reported as one.
        Err(_) if is_integer_literal(raw.trim()) => bail!(
            "⟨set⟩ {spec}: {} is out of range (TOML integers are {} to {})",
            raw.trim(),
            i64::MIN,
            i64::MAX
        ),
        Err(_) => toml::Value::String(raw.to_string()),
    };
    let parts: Vec<&str> = key.split('.').collect();
    let mut cur = root;
    for (i, part) in parts.iter().enumerate() {
        let table = cur
            .as_table_mut()
            .with_context(|| format!("⟨set⟩ {key}: '{}' is not a table", parts[..i].join(".")))?;
        if i + 1 == parts.len() {
            // A name set on a table with a kind names its kind and keeps its other keys
            // (`loss.miner=semihard` on `[loss.miner]`, as on the older `miner = "…"`).
            match (table.get_mut(*part), value) {
                (Some(toml::Value::Table(t)), toml::Value::String(kind)) if t.contains_key("kind") => {
                    t.insert("kind".into(), toml::Value::String(kind));
                }
                (_, value) => {
                    table.insert(part.to_string(), value);
                }
            }
            return Ok(());
        }
        cur = table
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(Default::default()));
        // A name is the table of its kind alone (`miner = "random"` for `loss.miner.kind=…`).
        if let toml::Value::String(kind) = cur
            && parts[i + 1..] == ["kind"]
        {
            *cur = toml::Value::Table(toml::Table::from_iter([(
                "kind".to_string(),
                toml::Value::String(kind.clone()),
            )]));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys and values (Python's dict) become the same overrides as their `KEY=VALUE` texts.
    #[test]
    fn values_are_written_as_toml() {
        let values: SetKeys = serde_json::from_str(
            r#"{"loss.margin": 0.1, "loss.miner": {"kind": "semihard"}, "eval.recall_ks": [1, 2], "eval.nmi": false}"#,
        )
        .unwrap();
        let texts = values.texts().unwrap();
        assert_eq!(
            texts,
            [
                "loss.margin=0.1",
                "loss.miner={ kind = \"semihard\" }",
                "eval.recall_ks=[1, 2]",
                "eval.nmi=false"
            ]
        );
        let listed: SetKeys = serde_json::from_str(r#"["loss.margin=0.1"]"#).unwrap();
        assert_eq!(listed.texts().unwrap(), ["loss.margin=0.1"]);
        let null: SetKeys = serde_json::from_str(r#"{"loss.margin": null}"#).unwrap();
        let e = format!("{:#}", null.texts().unwrap_err());
        assert!(e.contains("⟨set⟩ loss.margin: null has no TOML form"), "{e}");
        // And they load the same experiment.
        let a = crate::config::Experiment::load("quickstart", &texts).unwrap();
        assert_eq!(a.loss.name(), "triplet");
        assert_eq!(a.to_toml().unwrap().matches("semihard").count(), 1);
    }
}
