//! Applies kernel events to what the trace knows (paths, baselines) and yields the lines to
//! print, honouring the `--cgroup` filter.
use std::collections::HashMap;

use monitor_common::Stat;

use super::TraceRecord;
use crate::{
    cgroupfs::{CgroupPaths, paths::is_within},
    source::event::KernelEvent,
};

/// The trace's knowledge between events.
pub struct TraceView {
    paths: CgroupPaths,
    filter: Option<String>,
    /// Own value minus the kernel's running sum, per cgroup and stat, fixed at first sight.
    baselines: HashMap<(u64, Stat), i64>,
}

impl TraceView {
    pub fn new(paths: CgroupPaths, filter: Option<String>) -> Self {
        Self { paths, filter, baselines: HashMap::new() }
    }

    /// The record for an event, or `None` when the filter hides it.
    ///
    /// `baseline(id, path, stat)` is asked once per cgroup and stat that existed before the
    /// trace: the cgroup's own value minus the kernel's running sum, both read now. Cgroups
    /// created during the trace start empty, so theirs is zero without asking.
    pub fn apply(
        &mut self,
        event: KernelEvent,
        baseline: &mut dyn FnMut(u64, &str, Stat) -> Option<i64>,
    ) -> Option<TraceRecord> {
        match event {
            KernelEvent::Mkdir { cgroup_id, ts_ns, path } => {
                self.paths.insert(cgroup_id, path.clone());
                for stat in Stat::ALL {
                    self.baselines.insert((cgroup_id, stat), 0);
                }
                self.shown(&path).then_some(TraceRecord::Mkdir {
                    monotonic_ns: ts_ns,
                    cgroup_id,
                    cgroup_path: path,
                })
            }
            KernelEvent::Rmdir { cgroup_id, ts_ns, path } => {
                self.paths.remove(cgroup_id);
                self.baselines.retain(|(id, _), _| *id != cgroup_id);
                self.shown(&path).then_some(TraceRecord::Rmdir {
                    monotonic_ns: ts_ns,
                    cgroup_id,
                    cgroup_path: path,
                })
            }
            KernelEvent::Stat { cgroup_id, stat, ts_ns, delta_bytes, total_bytes } => {
                let path = self.paths.get(cgroup_id).map(str::to_string);
                match (&path, &self.filter) {
                    (Some(p), _) if !self.shown(p) => return None,
                    (None, Some(_)) => return None,
                    _ => {}
                }
                let baseline = *self.baselines.entry((cgroup_id, stat)).or_insert_with(|| {
                    path.as_deref()
                        .and_then(|p| baseline(cgroup_id, p, stat))
                        .unwrap_or(0)
                });
                Some(TraceRecord::Stat {
                    monotonic_ns: ts_ns,
                    cgroup_id,
                    cgroup_path: path,
                    stat: stat.name(),
                    delta_bytes,
                    current_bytes: baseline + total_bytes,
                })
            }
        }
    }

    fn shown(&self, path: &str) -> bool {
        self.filter.as_deref().is_none_or(|root| is_within(path, root))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(id: u64, delta: i64, total: i64) -> KernelEvent {
        KernelEvent::Stat { cgroup_id: id, stat: Stat::Anon, ts_ns: 1, delta_bytes: delta, total_bytes: total }
    }

    fn view(filter: Option<&str>) -> TraceView {
        let mut paths = CgroupPaths::default();
        paths.insert(1, "/".into());
        paths.insert(10, "/pods/a".into());
        TraceView::new(paths, filter.map(str::to_string))
    }

    /// Cgroup /pods/a held 100 bytes of anon more than the kernel's running sum.
    fn baseline(_id: u64, path: &str, _stat: Stat) -> Option<i64> {
        (path == "/pods/a").then_some(100)
    }

    impl TraceView {
        fn apply_with(&mut self, event: KernelEvent) -> Option<TraceRecord> {
            self.apply(event, &mut baseline)
        }
    }

    #[test]
    fn current_is_baseline_plus_running_sum() {
        let mut v = view(None);
        let first = v.apply_with(stat(10, 4096, 4096)).unwrap();
        assert!(matches!(first, TraceRecord::Stat { current_bytes: 4196, .. }), "{first:?}");
        let second = v.apply_with(stat(10, -2048, 2048)).unwrap();
        assert!(matches!(second, TraceRecord::Stat { current_bytes: 2148, .. }), "{second:?}");
    }

    #[test]
    fn mkdir_teaches_paths_and_rmdir_forgets_them() {
        let mut v = view(None);
        v.apply_with(KernelEvent::Mkdir { cgroup_id: 11, ts_ns: 1, path: "/pods/b".into() });
        let r = v.apply_with(stat(11, 1 << 20, 1 << 20)).unwrap();
        assert!(
            matches!(&r, TraceRecord::Stat { cgroup_path: Some(p), current_bytes, .. } if p == "/pods/b" && *current_bytes == 1 << 20),
            "a cgroup created during the trace counts from zero: {r:?}"
        );
        v.apply_with(KernelEvent::Rmdir { cgroup_id: 11, ts_ns: 2, path: "/pods/b".into() });
        let r = v.apply_with(stat(11, 4096, 4096)).unwrap();
        assert!(matches!(r, TraceRecord::Stat { cgroup_path: None, .. }));
    }

    #[test]
    fn filter_selects_a_subtree() {
        let mut v = view(Some("/pods"));
        assert!(v.apply_with(stat(10, 1, 1)).is_some());
        assert!(v.apply_with(stat(1, 1, 1)).is_none(), "root is outside /pods");
        assert!(v.apply_with(stat(99, 1, 1)).is_none(), "unknown cgroups are hidden by a filter");
        assert!(v.apply_with(KernelEvent::Mkdir { cgroup_id: 12, ts_ns: 1, path: "/podsx".into() }).is_none());
        assert!(v.apply_with(KernelEvent::Mkdir { cgroup_id: 13, ts_ns: 1, path: "/pods/c".into() }).is_some());
    }
}
