//! `[loss]` tables as rdml wrote them before `[loss.miner]`: the triplet, contrastive and margin
//! losses kept their miner's `anchors`, `cutoff` and `nonzero_loss_cutoff` beside `miner`. Such a
//! table (a config file, a run's `run.json`) is read as the same table with those keys moved into
//! `[loss.miner]`; the two places giving one key is an error.

use super::LossConfig;
use serde::de::Error;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// The losses whose tables carried the miner's keys (a fixed list: later losses never did).
const KINDS: [&str; 3] = ["triplet", "contrastive", "margin"];

/// The miner's keys those tables carried beside `miner`.
const KEYS: [&str; 3] = ["anchors", "cutoff", "nonzero_loss_cutoff"];

/// Reads `[loss]`, old layout or new (`#[serde(deserialize_with)]` on the experiment's field).
pub fn read<'de, D: Deserializer<'de>>(d: D) -> Result<LossConfig, D::Error> {
    let mut table = Value::deserialize(d)?;
    if let Value::Object(t) = &mut table {
        upgrade(t).map_err(D::Error::custom)?;
    }
    LossConfig::deserialize(table).map_err(D::Error::custom)
}

/// Moves the old keys of `t` into its `miner` table.
fn upgrade(t: &mut Map<String, Value>) -> Result<(), String> {
    if !t
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| KINDS.contains(&k))
    {
        return Ok(());
    }
    let moved: Vec<(&str, Value)> = KEYS.iter().filter_map(|&k| t.remove(k).map(|v| (k, v))).collect();
    if moved.is_empty() {
        return Ok(());
    }
    let miner = match t.remove("miner") {
        None => Map::new(),
        Some(Value::String(kind)) => Map::from_iter([("kind".to_string(), Value::String(kind))]),
        Some(Value::Object(m)) => m,
        // Not a miner: left for the loss's own reader to refuse.
        Some(other) => {
            t.insert("miner".into(), other);
            return Ok(());
        }
    };
    let mut miner = miner;
    for (k, v) in moved {
        if miner.contains_key(k) {
            return Err(format!(
                "loss.{k} and loss.miner.{k} are both given; keep loss.miner.{k} (loss.{k} is the layout before [loss.miner])"
            ));
        }
        // A null (an old run.json's "no cutoff") is the key left out.
        if !v.is_null() {
            miner.insert(k.to_string(), v);
        }
    }
    t.insert("miner".into(), Value::Object(miner));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loss::miner::{Anchors, Miner};
    use crate::loss::miner_table::MinerTable;

    #[derive(Deserialize)]
    struct Holder {
        #[serde(deserialize_with = "read")]
        loss: LossConfig,
    }

    fn loss(toml_text: &str) -> Result<LossConfig, String> {
        toml::from_str::<Holder>(toml_text)
            .map(|h| h.loss)
            .map_err(|e| e.to_string())
    }

    fn miner(l: &LossConfig) -> MinerTable {
        match l {
            LossConfig::Triplet(t) => t.miner,
            LossConfig::Contrastive(c) => c.miner,
            LossConfig::Margin(m) => m.miner,
            _ => panic!("not a tuple loss"),
        }
    }

    /// The old layout and the new read to the same loss; keys left out take the loss's
    /// defaults; a key given in both places is refused.
    #[test]
    fn old_and_new_layouts_read_alike() {
        let old = loss("[loss]\nkind = \"triplet\"\nminer = \"distance\"\nanchors = \"all\"\ncutoff = 0.5\n").unwrap();
        let new =
            loss("[loss]\nkind = \"triplet\"\n[loss.miner]\nkind = \"distance\"\nanchors = \"all\"\ncutoff = 0.5\n")
                .unwrap();
        assert_eq!(old, new);
        assert_eq!(
            miner(&new),
            MinerTable {
                kind: Miner::Distance,
                anchors: Anchors::All,
                cutoff: 0.5,
                nonzero_loss_cutoff: None
            }
        );
        // A name alone, and the margin loss's own defaults under a table without them.
        let named = loss("[loss]\nkind = \"contrastive\"\nminer = \"semihard\"\n").unwrap();
        assert_eq!(miner(&named).kind, Miner::Semihard);
        assert_eq!(miner(&named).cutoff, 0.0);
        let wu = loss("[loss]\nkind = \"margin\"\nanchors = \"all\"\n").unwrap();
        assert_eq!(
            miner(&wu),
            MinerTable {
                anchors: Anchors::All,
                ..MinerTable::WU
            }
        );
        // An old run.json's null cutoff is the default.
        let json: LossConfig = {
            let v = serde_json::json!({"kind": "triplet", "miner": "semihard", "anchors": "pairs",
                "cutoff": 0.0, "nonzero_loss_cutoff": null, "margin": 0.2, "distance": "normalized-euclidean"});
            let text = v.to_string();
            let mut d = serde_json::Deserializer::from_str(&text);
            read(&mut d).unwrap()
        };
        assert_eq!(miner(&json).kind, Miner::Semihard);
        // What rdml writes now reads back the same.
        let written = toml::to_string(&Holder2 { loss: old.clone() }).unwrap();
        assert!(written.contains("[loss.miner]"), "{written}");
        assert_eq!(loss(&written).unwrap(), old);
        let both = loss("[loss]\nkind = \"triplet\"\ncutoff = 0.1\n[loss.miner]\ncutoff = 0.5\n").unwrap_err();
        assert!(
            both.contains("loss.cutoff and loss.miner.cutoff are both given"),
            "{both}"
        );
        let unknown = loss("[loss]\nkind = \"triplet\"\n[loss.miner]\nkind = \"semihard\"\ncutof = 0.5\n").unwrap_err();
        assert!(unknown.contains("unknown field `cutof`"), "{unknown}");
        let name = loss("[loss]\nkind = \"triplet\"\nminer = \"semhard\"\n").unwrap_err();
        assert!(name.contains("unknown variant `semhard`"), "{name}");
        // Other losses never had the keys: refused as their own.
        let lifted = loss("[loss]\nkind = \"lifted\"\ncutoff = 0.5\n").unwrap_err();
        assert!(lifted.contains("unknown field `cutoff`"), "{lifted}");
    }

    #[derive(serde::Serialize)]
    struct Holder2 {
        loss: LossConfig,
    }
}
