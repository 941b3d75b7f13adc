//! The ranking micro-benchmark (the tests crate's `ranking_timings` binary), run and its JSON line turned
//! into figures: the incremental index against the fastest of its baselines (comparator
//! re-sort, full sort of precomputed keys, minimum scan).
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::{
    Size,
    env::{Binaries, Machine, loadavg},
    report::{Figure, Section},
};

pub(super) fn run(bins: &Binaries, machine: &Machine, size: Size) -> anyhow::Result<Section> {
    let load = loadavg();
    let mut cmd = Command::new(&bins.ranking);
    cmd.arg("--json");
    if size != Size::Full {
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

/// The baselines the benchmark reports: JSON field and case name.
const BASELINES: [(&str, &str); 3] = [
    ("resort_updates_per_sec", "re-sort"),
    ("key_sort_updates_per_sec", "key sort"),
    ("min_scan_updates_per_sec", "min scan"),
];

/// Incremental updates/s per size, against the fastest of the baselines; each baseline too.
pub(super) fn figures(machine: &Machine, load: f64, raw: &Value) -> anyhow::Result<Vec<Figure>> {
    let mut out = Vec::new();
    for result in raw["results"].as_array().context("no results")? {
        let pods = result["pods"].as_u64().context("pods")?;
        let fast = result["incremental_updates_per_sec"]
            .as_f64()
            .context("incremental")?;
        let mut baselines = Vec::new();
        for (field, case) in BASELINES {
            let value = result[field]
                .as_f64()
                .with_context(|| format!("{field} missing at {pods} pods"))?;
            baselines.push(
                Figure::new(
                    "ranking",
                    &format!("{pods} pods {case}"),
                    "updates/s",
                    value,
                    "/s",
                )
                .on(machine, load),
            );
        }
        let best = baselines
            .iter()
            .max_by(|a, b| a.value.total_cmp(&b.value))
            .context("no baseline")?;
        out.push(
            Figure::new(
                "ranking",
                &format!("{pods} pods incremental"),
                "updates/s",
                fast,
                "/s",
            )
            .note("against the fastest baseline")
            .on(machine, load)
            .against(best),
        );
        out.extend(baselines);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranking_json_becomes_figures_against_the_fastest_baseline() {
        let raw: Value = serde_json::from_str(
            r#"{"bench":"ranking","quick":true,"results":[{"pods":100,"incremental_updates_per_sec":1000.0,"resort_updates_per_sec":10.0,"key_sort_updates_per_sec":50.0,"min_scan_updates_per_sec":200.0,"speedup":5.0}]}"#,
        )
        .unwrap();
        let m = Machine {
            cores: 2,
            kernel: "t".into(),
            memory_bytes: 0,
        };
        let f = figures(&m, 0.1, &raw).unwrap();
        assert_eq!(f.len(), 4);
        assert_eq!(f[0].case, "100 pods incremental");
        assert_eq!(f[0].ratio, Some((5.0, "100 pods min scan".into())));
        assert_eq!(f[1].value, 10.0);
        assert_eq!(f[2].case, "100 pods key sort");
    }

    #[test]
    fn a_missing_baseline_is_an_error() {
        let raw: Value = serde_json::from_str(
            r#"{"results":[{"pods":100,"incremental_updates_per_sec":1000.0,"resort_updates_per_sec":10.0}]}"#,
        )
        .unwrap();
        let m = Machine {
            cores: 2,
            kernel: "t".into(),
            memory_bytes: 0,
        };
        let err = figures(&m, 0.1, &raw).unwrap_err();
        assert!(
            err.to_string().contains("key_sort_updates_per_sec"),
            "{err}"
        );
    }
}
