//! Pure parts of the benchmark report: percentiles, figures, the table and the JSON object.
use std::{fmt::Write as _, time::Duration};

use serde_json::{Value, json};

use super::{Size, env::Machine};

/// One measured number, with where and under what load it was measured.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Figure {
    /// latency, density, kernel, ranking.
    pub bench: String,
    /// What was measured: `ebpf`, `poll 100ms`, `1000 pods ebpf`, a program's name.
    pub case: String,
    /// `p50`, `cpu`, `ns/hit`, ...
    pub metric: String,
    pub value: f64,
    pub unit: String,
    /// The same metric of the baseline measured in the same run, as `value / baseline` and
    /// the baseline's case; `None` when the figure is a baseline or has none.
    pub ratio: Option<(f64, String)>,
    /// Sample count, trials, window: what the figure rests on.
    pub note: String,
    /// `2 cores, 6.1.0-18-amd64`.
    pub machine: String,
    /// 1-minute load average when the measurement started.
    pub load: f64,
}

impl Figure {
    pub(super) fn new(bench: &str, case: &str, metric: &str, value: f64, unit: &str) -> Self {
        Self {
            bench: bench.into(),
            case: case.into(),
            metric: metric.into(),
            value,
            unit: unit.into(),
            ratio: None,
            note: String::new(),
            machine: String::new(),
            load: 0.0,
        }
    }

    pub(super) fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    pub(super) fn on(mut self, machine: &Machine, load: f64) -> Self {
        self.machine = machine.describe();
        self.load = load;
        self
    }

    /// Sets the ratio against `baseline` (the same metric of another case).
    pub(super) fn against(mut self, baseline: &Figure) -> Self {
        if baseline.value != 0.0 {
            self.ratio = Some((self.value / baseline.value, baseline.case.clone()));
        }
        self
    }
}

/// A benchmark's figures plus its raw data for the JSON output.
pub(super) struct Section {
    pub figures: Vec<Figure>,
    pub raw: Value,
}

/// The `p`-th percentile (0..=100) by nearest rank of unsorted samples; `None` when empty.
pub(crate) fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// A value with a precision that suits its size.
pub(super) fn format_value(value: f64, unit: &str) -> String {
    let magnitude = value.abs();
    let number = if magnitude >= 1000.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else if magnitude >= 0.1 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    };
    if unit.is_empty() {
        number
    } else {
        format!("{number} {unit}")
    }
}

fn format_ratio(ratio: &Option<(f64, String)>) -> String {
    match ratio {
        None => String::new(),
        Some((r, baseline)) if *r >= 0.1 => format!("{r:.2}x of {baseline}"),
        Some((r, baseline)) => format!("1/{:.0} of {baseline}", 1.0 / r),
    }
}

/// The figures as one aligned text table.
pub(super) fn table(figures: &[Figure]) -> String {
    let header = [
        "bench",
        "case",
        "metric",
        "value",
        "vs baseline (same run)",
        "n / window",
        "machine",
        "load",
    ];
    let rows: Vec<[String; 8]> = figures
        .iter()
        .map(|f| {
            [
                f.bench.clone(),
                f.case.clone(),
                f.metric.clone(),
                format_value(f.value, &f.unit),
                format_ratio(&f.ratio),
                f.note.clone(),
                f.machine.clone(),
                format!("{:.2}", f.load),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String]| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            // Numbers right-aligned, words left-aligned.
            if i == 3 {
                let _ = write!(text, "{cell:>w$}  ");
            } else {
                let _ = write!(text, "{cell:<w$}  ");
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut out, &header.map(String::from));
    line(&mut out, &widths.map(|w| "-".repeat(w)));
    for row in &rows {
        line(&mut out, row);
    }
    out.trim_end().to_string()
}

/// Everything as one JSON object.
pub(super) fn json(
    machine: &Machine,
    size: Size,
    elapsed: Duration,
    figures: &[Figure],
    sections: serde_json::Map<String, Value>,
) -> Value {
    let figures: Vec<Value> = figures
        .iter()
        .map(|f| {
            json!({
                "bench": f.bench,
                "case": f.case,
                "metric": f.metric,
                "value": f.value,
                "unit": f.unit,
                "ratio": f.ratio.as_ref().map(|r| r.0),
                "baseline": f.ratio.as_ref().map(|r| r.1.clone()),
                "note": f.note,
                "machine": f.machine,
                "load": f.load,
            })
        })
        .collect();
    json!({
        "bench": "xtask bench",
        "quick": size == Size::Quick,
        "smoke": size == Size::Smoke,
        "machine": { "cores": machine.cores, "kernel": machine.kernel, "memory_bytes": machine.memory_bytes },
        "elapsed_secs": (elapsed.as_secs_f64() * 10.0).round() / 10.0,
        "figures": figures,
        "sections": Value::Object(sections),
    })
}

/// The smoke's check of a section: it has figures, and each one parsed (a value the harness
/// could not read is NaN). The values themselves are never judged.
pub(super) fn check_smoke(section: &str, figures: &[Figure]) -> anyhow::Result<()> {
    if figures.is_empty() {
        anyhow::bail!("{section}: no figure");
    }
    let unparsed: Vec<String> = figures
        .iter()
        .filter(|f| !f.value.is_finite())
        .map(|f| format!("{} / {}", f.case, f.metric))
        .collect();
    if !unparsed.is_empty() {
        anyhow::bail!(
            "{section}: figures that did not parse: {}",
            unparsed.join("; ")
        );
    }
    Ok(())
}

/// A runner's JSON lines that carry `key`, among a VM's console lines.
pub(super) fn json_lines(console: &[String], key: &str) -> anyhow::Result<Vec<Value>> {
    let quoted = format!("\"{key}\"");
    console
        .iter()
        .map(|l| l.trim())
        .filter(|l| l.starts_with('{') && l.contains(&quoted))
        .map(|l| {
            serde_json::from_str(l)
                .map_err(|e| anyhow::anyhow!("a {key} line is not JSON ({e}): {l}"))
        })
        .collect()
}

/// Win rates as a matrix: a row per case, a column per margin.
pub(super) fn win_table(rates: &[(String, u64, usize, usize)]) -> String {
    let mut margins: Vec<u64> = rates.iter().map(|r| r.1).collect();
    margins.sort_unstable();
    margins.dedup();
    let mut cases: Vec<&str> = Vec::new();
    for (case, ..) in rates {
        if !cases.contains(&case.as_str()) {
            cases.push(case);
        }
    }
    let width = cases.iter().map(|c| c.len()).max().unwrap_or(0).max(20);
    let mut out = format!("{:<width$}", "oom-race win rate");
    for m in &margins {
        out.push_str(&format!("  {:>9}", format!("{m} MiB")));
    }
    for case in cases {
        out.push_str(&format!("\n{case:<width$}"));
        for m in &margins {
            let cell = rates
                .iter()
                .find(|r| r.0 == case && r.1 == *m)
                .map_or_else(|| "-".into(), |r| format!("{}/{}", r.2, r.3));
            out.push_str(&format!("  {cell:>9}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_row_per_case_and_a_column_per_margin() {
        let rates = vec![
            ("ebpf".to_string(), 16, 3, 3),
            ("ebpf".to_string(), 48, 3, 3),
            ("poll 100ms".to_string(), 16, 1, 3),
            ("ebpf, other victim".to_string(), 48, 0, 3),
        ];
        let table = win_table(&rates);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(lines[0].contains("16 MiB") && lines[0].contains("48 MiB"));
        assert!(
            lines[2].starts_with("poll 100ms") && lines[2].ends_with('-'),
            "{table}"
        );
        assert!(lines[3].trim_end().ends_with("0/3"), "{table}");
    }

    fn machine() -> Machine {
        Machine {
            cores: 2,
            kernel: "6.1.0-test".into(),
            memory_bytes: 1 << 30,
        }
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let samples: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&samples, 50.0), Some(50.0));
        assert_eq!(percentile(&samples, 99.0), Some(99.0));
        assert_eq!(percentile(&samples, 100.0), Some(100.0));
        assert_eq!(percentile(&samples, 0.0), Some(1.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn values_keep_a_sensible_precision() {
        assert_eq!(format_value(123456.7, "ns"), "123457 ns");
        assert_eq!(format_value(12.345, "ms"), "12.3 ms");
        assert_eq!(format_value(0.456, "%"), "0.46 %");
        assert_eq!(format_value(0.0123, "%"), "0.012 %");
        assert_eq!(format_value(3.0, ""), "3");
    }

    #[test]
    fn ratios_name_their_baseline() {
        let base = Figure::new("latency", "poll 100ms", "p50", 50.0, "ms");
        let fast = Figure::new("latency", "ebpf", "p50", 0.25, "ms").against(&base);
        assert_eq!(fast.ratio, Some((0.005, "poll 100ms".into())));
        assert_eq!(format_ratio(&fast.ratio), "1/200 of poll 100ms");
        let slow = Figure::new("density", "poll", "cpu", 3.0, "%")
            .against(&Figure::new("density", "ebpf", "cpu", 1.5, "%"));
        assert_eq!(format_ratio(&slow.ratio), "2.00x of ebpf");
        let none =
            Figure::new("x", "y", "z", 1.0, "").against(&Figure::new("x", "b", "z", 0.0, ""));
        assert_eq!(none.ratio, None, "no ratio against zero");
    }

    #[test]
    fn table_aligns_columns_and_names_the_machine() {
        let m = machine();
        let figures = vec![
            Figure::new("latency", "ebpf", "p99", 0.8, "ms")
                .note("n=300")
                .on(&m, 0.5),
            Figure::new("density", "1000 pods poll 1s", "cpu", 2.5, "% of a core").on(&m, 1.25),
        ];
        let text = table(&figures);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("bench"));
        assert!(lines[2].contains("0.80 ms") && lines[2].contains("2 cores, 6.1.0-test"));
        assert!(lines[3].contains("2.50 % of a core") && lines[3].ends_with("1.25"));
        let value_end = |l: &str| l.find(" ms").or_else(|| l.find(" % of")).unwrap();
        assert_eq!(lines[2].find("0.80").unwrap() + 4, value_end(lines[2]));
        assert_eq!(
            lines[2].find("0.80 ms").unwrap() + 7,
            lines[3].find("2.50 % of a core").unwrap() + 16
        );
    }

    #[test]
    fn the_smoke_fails_on_a_figure_that_did_not_parse_never_on_its_value() {
        let m = machine();
        let slow = Figure::new("latency", "ebpf", "p50", 9e9, "ms").on(&m, 0.1);
        assert!(check_smoke("latency", std::slice::from_ref(&slow)).is_ok());
        let unparsed = Figure::new("latency", "poll 1s", "p50", f64::NAN, "ms").on(&m, 0.1);
        let err = check_smoke("latency", &[slow, unparsed]).unwrap_err();
        assert!(err.to_string().contains("poll 1s / p50"), "{err}");
        assert!(
            check_smoke("latency", &[]).is_err(),
            "a section without figures"
        );
    }

    #[test]
    fn json_carries_figures_and_machine() {
        let m = machine();
        let base = Figure::new("latency", "poll 1s", "p50", 500.0, "ms").on(&m, 0.1);
        let f = Figure::new("latency", "ebpf", "p50", 0.5, "ms")
            .against(&base)
            .on(&m, 0.1);
        let mut sections = serde_json::Map::new();
        sections.insert("latency".into(), json!({"trials": 3}));
        let v = json(
            &m,
            Size::Quick,
            Duration::from_secs(12),
            &[base, f],
            sections,
        );
        assert_eq!(v["machine"]["cores"], 2);
        assert_eq!(v["quick"], true);
        assert_eq!(v["smoke"], false);
        assert_eq!(v["figures"][1]["ratio"], 0.001);
        assert_eq!(v["figures"][1]["baseline"], "poll 1s");
        assert_eq!(v["figures"][0]["ratio"], Value::Null);
        assert_eq!(v["sections"]["latency"]["trials"], 3);
        let line = v.to_string();
        assert!(!line.contains('\n'), "one line");
    }
}
