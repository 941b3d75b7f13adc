//! Which tests may skip in `cargo xtask test`, and which did. A test that cannot run fails
//! unless `MONITOR_TESTS_ALLOW_SKIP` names its reason (the `test-skip` crate); this allows the
//! reasons the tests crate's `skip_probe` finds on the machine, and those the developer
//! allowed already (`root`, say), and after the run lists every skip by reason.
use std::{collections::BTreeMap, path::Path};

use anyhow::{Context as _, bail};
use test_skip::{ALLOW_VAR, LOG_VAR, Reason};

/// The reasons allowed for this run: the probe's, then the developer's.
pub(crate) struct Allowed {
    pub reasons: Vec<Reason>,
}

impl Allowed {
    /// Runs the probe (the tests crate's `skip_probe` of the test build) and adds what
    /// [`ALLOW_VAR`] already allows.
    pub(crate) fn here(probe: &Path) -> anyhow::Result<Self> {
        let out = std::process::Command::new(probe)
            .output()
            .with_context(|| format!("starting the skip probe {}", probe.display()))?;
        if !out.status.success() {
            bail!(
                "the skip probe failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut reasons = Vec::new();
        eprintln!("tests may skip here for:");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let (name, why) = line.split_once('\t').unwrap_or((line, ""));
            reasons.push(name.parse::<Reason>()?);
            eprintln!("  {name}: {why}");
        }
        for reason in test_skip::allowed().with_context(|| format!("reading {ALLOW_VAR}"))? {
            if !reasons.contains(&reason) {
                eprintln!("  {reason}: allowed by {ALLOW_VAR}");
                reasons.push(reason);
            }
        }
        Ok(Self { reasons })
    }

    /// Sets the allowed reasons and the skip log (emptied) on `cmd`.
    pub(crate) fn apply(&self, cmd: &mut std::process::Command, log: &Path) -> anyhow::Result<()> {
        match std::fs::remove_file(log) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", log.display())),
        }
        cmd.env(ALLOW_VAR, test_skip::join_list(&self.reasons))
            .env(LOG_VAR, log);
        Ok(())
    }
}

/// The skips recorded in `log`, by reason: the lines printed after the run.
pub(crate) fn summary(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut by_reason: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for skipped in test_skip::read_log(&text) {
        by_reason
            .entry(skipped.reason)
            .or_default()
            .push(format!("{} ({})", skipped.test, skipped.detail));
    }
    if by_reason.is_empty() {
        return vec!["skipped: none".to_string()];
    }
    let count: usize = by_reason.values().map(Vec::len).sum();
    let mut lines = vec![format!("skipped: {count} tests")];
    for (reason, tests) in by_reason {
        lines.push(format!("  {reason}:"));
        lines.extend(tests.into_iter().map(|t| format!("    {t}")));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_groups_skips_by_reason() {
        let dir = std::env::temp_dir().join(format!("xtask-skips-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("skips.log");
        assert_eq!(summary(&log), ["skipped: none"]);
        std::fs::write(
            &log,
            "fentry\tkernel::a\tEPERM\ncap-sys-resource\tself::b\tno cap\nfentry\tkernel::c\tEPERM\n",
        )
        .unwrap();
        let lines = summary(&log);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            lines,
            [
                "skipped: 3 tests",
                "  cap-sys-resource:",
                "    self::b (no cap)",
                "  fentry:",
                "    kernel::a (EPERM)",
                "    kernel::c (EPERM)",
            ]
        );
    }
}
