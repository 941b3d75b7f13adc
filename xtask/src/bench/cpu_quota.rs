//! A CPU cgroup of the bench's own, holding the agent to a CFS quota as a pod's CPU limit
//! does: cgroup v1's `cpu` controller (`cpu.cfs_quota_us` over `cpu.cfs_period_us`) where it
//! is mounted, else v2's `cpu.max` in the memory hierarchy's tree. Removed on drop, after
//! whatever still runs in it is killed.
use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};

/// The kubelet's CFS period: a limit of `m` millicores is `m * 100` µs a period.
pub(super) const PERIOD_US: u64 = 100_000;

/// Where the agent's CPU is limited.
pub(super) struct CpuQuota {
    pub dir: PathBuf,
    v2: bool,
}

/// What the cgroup's `cpu.stat` counted: CFS periods, those that ran out of quota, and the
/// time held back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Throttling {
    pub periods: u64,
    pub throttled: u64,
    pub throttled_ns: u64,
}

impl Throttling {
    pub(super) fn since(self, before: Self) -> Self {
        Self {
            periods: self.periods.saturating_sub(before.periods),
            throttled: self.throttled.saturating_sub(before.throttled),
            throttled_ns: self.throttled_ns.saturating_sub(before.throttled_ns),
        }
    }

    /// v1's `nr_periods`, `nr_throttled`, `throttled_time` (ns); v2's `throttled_usec`.
    fn parse(stat: &str) -> Option<Self> {
        let field = |name: &str| {
            stat.lines().find_map(|l| {
                let (key, value) = l.split_once(' ')?;
                (key == name).then(|| value.trim().parse::<u64>().ok())?
            })
        };
        let throttled_ns =
            field("throttled_time").or_else(|| Some(field("throttled_usec")? * 1000));
        Some(Self {
            periods: field("nr_periods")?,
            throttled: field("nr_throttled")?,
            throttled_ns: throttled_ns?,
        })
    }
}

impl CpuQuota {
    /// A cgroup `monitor-bench-<pid>-<name>` under the v1 `cpu` mount, or `agent_dir` itself
    /// on v2 (the `cpu` controller delegated down to it from `v2_root`), without a limit yet.
    pub(super) fn create(name: &str, v2_root: &Path, agent_dir: &Path) -> anyhow::Result<Self> {
        if let Some(mount) = v1_cpu_mount() {
            let dir = mount.join(format!("monitor-bench-{}-{name}", std::process::id()));
            fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let quota = Self { dir, v2: false };
            quota.write("cpu.cfs_period_us", &PERIOD_US.to_string())?;
            return Ok(quota);
        }
        let controllers =
            fs::read_to_string(v2_root.join("cgroup.controllers")).unwrap_or_default();
        if !controllers.split_whitespace().any(|c| c == "cpu") {
            bail!(
                "no cpu controller: none mounted on cgroup v1 and none in {}",
                v2_root.join("cgroup.controllers").display()
            );
        }
        // Every level above the agent's cgroup hands the controller down.
        let rel = agent_dir
            .strip_prefix(v2_root)
            .context("the agent's cgroup is outside the hierarchy")?;
        let mut dir = v2_root.to_path_buf();
        for part in rel.components() {
            fs::write(dir.join("cgroup.subtree_control"), "+cpu")
                .with_context(|| format!("delegating cpu below {}", dir.display()))?;
            dir.push(part);
        }
        Ok(Self {
            dir: agent_dir.to_path_buf(),
            v2: true,
        })
    }

    /// Moves the process `pid` (all its threads) into the cgroup.
    pub(super) fn enter(&self, pid: u32) -> anyhow::Result<()> {
        if self.v2 {
            return Ok(()); // It was started in it.
        }
        self.write("cgroup.procs", &pid.to_string())
    }

    /// Limits the cgroup to `millicores` (`None`: no limit).
    pub(super) fn limit(&self, millicores: Option<u64>) -> anyhow::Result<()> {
        let quota_us = millicores.map(|m| m * PERIOD_US / 1000);
        if self.v2 {
            let quota = quota_us.map_or_else(|| "max".to_string(), |q| q.to_string());
            return self.write("cpu.max", &format!("{quota} {PERIOD_US}"));
        }
        let quota = quota_us.map_or_else(|| "-1".to_string(), |q| q.to_string());
        self.write("cpu.cfs_quota_us", &quota)
    }

    pub(super) fn throttling(&self) -> anyhow::Result<Throttling> {
        let path = self.dir.join("cpu.stat");
        let stat =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        Throttling::parse(&stat).with_context(|| format!("{}: {stat:?}", path.display()))
    }

    fn write(&self, file: &str, value: &str) -> anyhow::Result<()> {
        let path = self.dir.join(file);
        fs::write(&path, value).with_context(|| format!("writing {value} to {}", path.display()))
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        // On v2 the cgroup is the agent's memory cgroup, which the bench tree removes.
        if !self.v2 {
            let _ = self.limit(None);
            test_harness::cgroup_tree::remove_tree(&self.dir);
        }
    }
}

/// Where cgroup v1's `cpu` controller is mounted, from /proc/self/mountinfo.
fn v1_cpu_mount() -> Option<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        let mut fs = fs.split_whitespace();
        let is_cpu = fs.next()? == "cgroup" && fs.nth(1)?.split(',').any(|o| o == "cpu");
        let point = mount.split_whitespace().nth(4)?;
        is_cpu.then(|| PathBuf::from(point))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_reads_both_versions() {
        let v1 = "nr_periods 40\nnr_throttled 12\nthrottled_time 345000000\nnr_bursts 0\n";
        let v2 = "usage_usec 9\nuser_usec 5\nsystem_usec 4\nnr_periods 40\nnr_throttled 12\n\
                  throttled_usec 345000\n";
        let expected = Throttling {
            periods: 40,
            throttled: 12,
            throttled_ns: 345_000_000,
        };
        assert_eq!(Throttling::parse(v1), Some(expected), "v1");
        assert_eq!(Throttling::parse(v2), Some(expected), "v2");
        assert_eq!(Throttling::parse("usage_usec 9\n"), None);
        let later = Throttling {
            periods: 50,
            throttled: 15,
            throttled_ns: 400_000_000,
        };
        assert_eq!(
            later.since(expected),
            Throttling {
                periods: 10,
                throttled: 3,
                throttled_ns: 55_000_000
            }
        );
    }
}
