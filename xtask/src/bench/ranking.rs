//! The ranking micro-benchmark (`cargo bench -p monitor --bench ranking`), run through cargo
//! and its JSON line turned into figures.
use std::process::Stdio;

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::process::cargo;

use super::{
    env::{Machine, loadavg},
    report::{Figure, Section},
};

pub fn run(machine: &Machine, quick: bool) -> anyhow::Result<Section> {
    let load = loadavg();
    let mut cmd = cargo();
    cmd.args([
        "bench",
        "--quiet",
        "--package",
        "monitor",
        "--bench",
        "ranking",
        "--",
        "--json",
    ]);
    if quick {
        cmd.arg("--quick");
    }
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .context("running the ranking benchmark")?;
    if !out.status.success() {
        bail!("the ranking benchmark failed: {}", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .context("no JSON line from the ranking benchmark")?;
    let raw: Value = serde_json::from_str(last)?;
    Ok(Section {
        figures: figures(machine, load, &raw)?,
        raw,
    })
}

/// Incremental updates/s per size, against the full re-sort.
pub fn figures(machine: &Machine, load: f64, raw: &Value) -> anyhow::Result<Vec<Figure>> {
    let mut out = Vec::new();
    for result in raw["results"].as_array().context("no results")? {
        let pods = result["pods"].as_u64().context("pods")?;
        let fast = result["incremental_updates_per_sec"]
            .as_f64()
            .context("incremental")?;
        let slow = result["resort_updates_per_sec"]
            .as_f64()
            .context("resort")?;
        let base = Figure::new(
            "ranking",
            &format!("{pods} pods re-sort"),
            "updates/s",
            slow,
            "/s",
        )
        .on(machine, load);
        out.push(
            Figure::new(
                "ranking",
                &format!("{pods} pods incremental"),
                "updates/s",
                fast,
                "/s",
            )
            .on(machine, load)
            .against(&base),
        );
        out.push(base);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranking_json_becomes_figures() {
        let raw: Value = serde_json::from_str(
            r#"{"bench":"ranking","quick":true,"results":[{"pods":100,"incremental_updates_per_sec":1000.0,"resort_updates_per_sec":10.0,"speedup":100.0}]}"#,
        )
        .unwrap();
        let m = Machine {
            cores: 2,
            kernel: "t".into(),
            memory_bytes: 0,
        };
        let f = figures(&m, 0.1, &raw).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].case, "100 pods incremental");
        assert_eq!(f[0].ratio, Some((100.0, "100 pods re-sort".into())));
        assert_eq!(f[1].value, 10.0);
    }
}
