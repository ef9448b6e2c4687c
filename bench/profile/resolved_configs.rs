//! Prints every preset, and the quickstart config with each defense and loss kind, as resolved TOML
//! (or the error): `cargo run --release --example resolved_configs > F` before and after a change,
//! then `diff`.
use rdml::config::Experiment;

fn main() -> anyhow::Result<()> {
    let presets = std::fs::read_dir("presets")?;
    let mut names: Vec<String> = presets
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().trim_end_matches(".toml").to_string())
        .collect();
    names.sort();
    for n in &names {
        println!("### {n}\n{}", Experiment::load(n, &[])?.to_toml()?);
    }
    let b = "eps=0.3,step=0.03,steps=4";
    let defenses = [
        format!("{{kind=\"madry\",{b}}}"),
        format!("{{kind=\"est\",{b}}}"),
        format!("{{kind=\"act\",{b}}}"),
        format!("{{kind=\"advprop\",{b}}}"),
        format!("{{kind=\"formulation-1\",{b}}}"),
        format!("{{kind=\"formulation-2\",{b}}}"),
        format!("{{kind=\"formulation-3\",{b},lambda=0.5}}"),
        format!("{{kind=\"hm\",{b},source=\"softhard\",destination=\"lga\"}}"),
        format!("{{kind=\"ca-tride\",{b}}}"),
        format!("{{kind=\"ca-tride\",{b},margin_schedule=false}}"),
        format!("{{kind=\"positive-perturbation\",{b},rate=0.5}}"),
        format!("{{kind=\"mdprop\",{b},distributions=[{{kind=\"ux\"}}]}}"),
    ];
    for d in &defenses {
        match Experiment::load_with_defense("quickstart", &[], Some(d)) {
            Ok(e) => println!("### defense {d}\n{}", e.to_toml()?),
            Err(e) => println!("### defense {d}\nERROR {e:#}"),
        }
    }
    let losses = [
        "loss={kind=\"triplet\"}",
        "loss={kind=\"contrastive\"}",
        "loss={kind=\"margin\"}",
        "loss={kind=\"multi-similarity\"}",
        "loss={kind=\"lifted\"}",
        "loss={kind=\"npair\"}",
        "loss={kind=\"dro\",variant=\"kl\"}",
        "loss={kind=\"dro\",variant=\"top-k\",k=10}",
        "loss={kind=\"dro\",variant=\"ms\"}",
        "loss={kind=\"dro\",variant=\"top-k\"}",
        "loss={kind=\"triplet\",bogus=1}",
        "loss={kind=\"contrastive\",miner=\"semihard\",anchors=\"all\"}",
    ];
    for l in losses {
        match Experiment::load("quickstart", &[l.to_string()]) {
            Ok(e) => println!("### {l}\n{}", e.to_toml()?),
            Err(e) => println!("### {l}\nERROR {e:#}"),
        }
    }
    Ok(())
}
