//! Applies kernel events to what the trace knows (paths, baselines) and yields the lines to
//! print, honouring the `--cgroup` filter.
use std::collections::HashMap;

use monitor_common::Stat;

use super::TraceRecord;
use crate::{
    cgroupfs::{CgroupPaths, paths::is_within},
    source::event::KernelEvent,
};

/// Reads a cgroup's own current value of a stat (path relative to the hierarchy root).
pub type BaselineReader = Box<dyn FnMut(&str, Stat) -> Option<u64>>;

/// The trace's knowledge between events.
pub struct TraceView {
    paths: CgroupPaths,
    filter: Option<String>,
    /// Own value minus the kernel's running sum, per cgroup and stat, fixed at first sight.
    baselines: HashMap<(u64, Stat), i64>,
    read_baseline: BaselineReader,
}

impl TraceView {
    pub fn new(paths: CgroupPaths, filter: Option<String>, read_baseline: BaselineReader) -> Self {
        Self { paths, filter, baselines: HashMap::new(), read_baseline }
    }

    /// The record for an event, or `None` when the filter hides it.
    pub fn apply(&mut self, event: KernelEvent) -> Option<TraceRecord> {
        match event {
            KernelEvent::Mkdir { cgroup_id, ts_ns, path } => {
                self.paths.insert(cgroup_id, path.clone());
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
                let baseline = match self.baselines.get(&(cgroup_id, stat)) {
                    Some(b) => *b,
                    None => {
                        let own = path.as_deref().and_then(|p| (self.read_baseline)(p, stat));
                        let b = own.map_or(0, |own| own as i64 - total_bytes);
                        self.baselines.insert((cgroup_id, stat), b);
                        b
                    }
                };
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
        // Cgroup /pods/a already held 100 bytes of anon when the trace started.
        let reader: BaselineReader =
            Box::new(|path, _| (path == "/pods/a").then_some(100 + 4096));
        TraceView::new(paths, filter.map(str::to_string), reader)
    }

    #[test]
    fn current_is_baseline_plus_running_sum() {
        let mut v = view(None);
        let first = v.apply(stat(10, 4096, 4096)).unwrap();
        assert!(matches!(first, TraceRecord::Stat { current_bytes: 4196, .. }), "{first:?}");
        let second = v.apply(stat(10, -2048, 2048)).unwrap();
        assert!(matches!(second, TraceRecord::Stat { current_bytes: 2148, .. }), "{second:?}");
    }

    #[test]
    fn mkdir_teaches_paths_and_rmdir_forgets_them() {
        let mut v = view(None);
        v.apply(KernelEvent::Mkdir { cgroup_id: 11, ts_ns: 1, path: "/pods/b".into() });
        let r = v.apply(stat(11, 1 << 20, 1 << 20)).unwrap();
        assert!(
            matches!(&r, TraceRecord::Stat { cgroup_path: Some(p), current_bytes, .. } if p == "/pods/b" && *current_bytes == 1 << 20),
            "a new cgroup with no readable baseline counts from zero: {r:?}"
        );
        v.apply(KernelEvent::Rmdir { cgroup_id: 11, ts_ns: 2, path: "/pods/b".into() });
        let r = v.apply(stat(11, 4096, 4096)).unwrap();
        assert!(matches!(r, TraceRecord::Stat { cgroup_path: None, .. }));
    }

    #[test]
    fn filter_selects_a_subtree() {
        let mut v = view(Some("/pods"));
        assert!(v.apply(stat(10, 1, 1)).is_some());
        assert!(v.apply(stat(1, 1, 1)).is_none(), "root is outside /pods");
        assert!(v.apply(stat(99, 1, 1)).is_none(), "unknown cgroups are hidden by a filter");
        assert!(v.apply(KernelEvent::Mkdir { cgroup_id: 12, ts_ns: 1, path: "/podsx".into() }).is_none());
        assert!(v.apply(KernelEvent::Mkdir { cgroup_id: 13, ts_ns: 1, path: "/pods/c".into() }).is_some());
    }
}
