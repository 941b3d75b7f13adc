//! Applies kernel events to what the trace knows (paths, pods, baselines, burst windows) and
//! yields the lines to print, honouring the filters; accumulates the summary and the recent
//! incidents on the way. Everything the view needs from the system comes through [`Lookups`].
use std::collections::HashMap;

use monitor_common::Stat;

use super::{
    TraceRecord,
    attribution::{PodLookup, Subject},
    filter::Filter,
    summary::Summary,
};
use crate::{
    cgroupfs::CgroupPaths,
    engine::{
        burst::BurstDetector,
        incident::{Incident, RecentIncidents, Reclaim},
    },
    source::{event::KernelEvent, pressure::PressureSignal},
};

/// How long [`TraceView::recent`] keeps incidents.
pub(crate) const RECENT_RETAIN_NS: u64 = 300 * 1_000_000_000;

/// What the view reads from the system, injected so the view stays pure.
pub(crate) trait Lookups {
    /// The cgroup's own value of `stat` minus the kernel's running sum, both read now; asked
    /// once per cgroup and stat that existed before the trace.
    fn baseline(&mut self, cgroup_id: u64, path: &str, stat: Stat) -> Option<i64>;
    /// The memory cgroup id the kernel recorded for OOM victim `pid` when it was chosen.
    fn victim_cgroup_id(&mut self, pid: u32) -> Option<u64>;
    /// The memory cgroup path of a process that still exists.
    fn cgroup_of_pid(&mut self, pid: u32) -> Option<String>;
}

/// Burst detection settings (`--burst-rate` over a fixed window).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BurstSettings {
    pub window_ns: u64,
    pub bytes_per_sec: u64,
}

/// The trace's knowledge between events.
pub(crate) struct TraceView {
    paths: CgroupPaths,
    filter: Filter,
    pods: Option<Box<dyn PodLookup>>,
    /// Own value minus the kernel's running sum, per cgroup and stat, fixed at first sight.
    baselines: HashMap<(u64, Stat), i64>,
    burst_window_ns: u64,
    bursts: BurstDetector,
    summary: Summary,
    recent: RecentIncidents,
    page_size: u64,
}

impl TraceView {
    pub(crate) fn new(
        paths: CgroupPaths,
        filter: Filter,
        pods: Option<Box<dyn PodLookup>>,
        burst: BurstSettings,
        page_size: u64,
    ) -> Self {
        Self {
            paths,
            filter,
            pods,
            baselines: HashMap::new(),
            burst_window_ns: burst.window_ns,
            bursts: BurstDetector::new(burst.window_ns, burst.bytes_per_sec),
            summary: Summary::default(),
            recent: RecentIncidents::new(RECENT_RETAIN_NS),
            page_size,
        }
    }

    /// The records for an event: none when the filters hide it, two for a stat event that
    /// starts a burst.
    pub(crate) fn apply(
        &mut self,
        event: KernelEvent,
        lookups: &mut dyn Lookups,
    ) -> Vec<TraceRecord> {
        match event {
            KernelEvent::Mkdir {
                cgroup_id,
                ts_ns,
                path,
            } => {
                self.paths.insert(cgroup_id, path.clone());
                for stat in Stat::ALL {
                    self.baselines.insert((cgroup_id, stat), 0);
                }
                let shown = self.shown(&self.subject(cgroup_id));
                shown
                    .then_some(TraceRecord::Mkdir {
                        monotonic_ns: ts_ns,
                        cgroup_id,
                        cgroup_path: path,
                    })
                    .into_iter()
                    .collect()
            }
            KernelEvent::Rmdir {
                cgroup_id,
                ts_ns,
                path,
            } => {
                let shown = self.shown(&self.subject(cgroup_id));
                self.paths.remove(cgroup_id);
                self.baselines.retain(|(id, _), _| *id != cgroup_id);
                self.bursts.forget(cgroup_id);
                shown
                    .then_some(TraceRecord::Rmdir {
                        monotonic_ns: ts_ns,
                        cgroup_id,
                        cgroup_path: path,
                    })
                    .into_iter()
                    .collect()
            }
            KernelEvent::Stat {
                cgroup_id,
                stat,
                ts_ns,
                delta_bytes,
                total_bytes,
                ..
            } => {
                let subject = self.subject(cgroup_id);
                if !self.shown(&subject) {
                    return Vec::new();
                }
                let baseline = *self.baselines.entry((cgroup_id, stat)).or_insert_with(|| {
                    subject
                        .cgroup_path
                        .as_deref()
                        .and_then(|p| lookups.baseline(cgroup_id, p, stat))
                        .unwrap_or(0)
                });
                let mut records = vec![TraceRecord::Stat {
                    monotonic_ns: ts_ns,
                    subject: subject.clone(),
                    stat: stat.name(),
                    delta_bytes,
                    current_bytes: baseline + total_bytes,
                }];
                if let Some(burst) = self.bursts.observe(cgroup_id, stat, ts_ns, delta_bytes) {
                    self.summary.burst(&subject, burst.growth_bytes);
                    self.recent.record(Incident::Burst {
                        cgroup_id,
                        ts_ns,
                        growth_bytes: burst.growth_bytes,
                    });
                    records.push(TraceRecord::Burst {
                        monotonic_ns: ts_ns,
                        subject,
                        growth_bytes: burst.growth_bytes,
                        window_ns: self.burst_window_ns,
                        rate_bytes_per_sec: burst.rate_bytes_per_sec,
                    });
                }
                records
            }
            KernelEvent::Stall {
                reclaim,
                pid,
                tid,
                comm,
                cgroup_id,
                start_ns,
                duration_ns,
                nr_reclaimed,
            } => {
                let subject = self.subject(cgroup_id);
                if !self.shown(&subject) {
                    return Vec::new();
                }
                let reclaimed_bytes = nr_reclaimed * self.page_size;
                self.summary
                    .stall(&subject, reclaim, duration_ns, reclaimed_bytes);
                self.recent.record(Incident::Stall {
                    cgroup_id,
                    ts_ns: start_ns,
                    duration_ns,
                    reclaim,
                    reclaimed_bytes,
                });
                vec![TraceRecord::Stall {
                    monotonic_ns: start_ns,
                    subject,
                    reclaim: match reclaim {
                        Reclaim::Direct => "direct",
                        Reclaim::Memcg => "memcg",
                    },
                    pid,
                    tid,
                    comm,
                    duration_ns,
                    reclaimed_bytes,
                }]
            }
            KernelEvent::Kswapd {
                awake,
                nid,
                order,
                ts_ns,
            } => vec![TraceRecord::Kswapd {
                monotonic_ns: ts_ns,
                nid,
                state: if awake { "wake" } else { "sleep" },
                order,
            }],
            KernelEvent::OomKill {
                pid,
                comm,
                trigger_cgroup_id,
                ts_ns,
                anon_rss_kb,
                file_rss_kb,
                shmem_rss_kb,
                oom_score_adj,
            } => {
                let trigger = self.subject(trigger_cgroup_id);
                // The kernel's record first: /proc names the root once the victim has exited
                // (on v1 already while it is a zombie), which a storm of kills often beats us to.
                let recorded = lookups
                    .victim_cgroup_id(pid)
                    .filter(|id| self.paths.get(*id).is_some());
                let (subject, cgroup_source) = match recorded {
                    Some(id) => (self.subject(id), "kernel"),
                    None => match lookups
                        .cgroup_of_pid(pid)
                        .and_then(|path| self.paths.id_of(&path))
                    {
                        Some(id) => (self.subject(id), "proc"),
                        None => (trigger.clone(), "trigger"),
                    },
                };
                if !self.shown(&subject) {
                    return Vec::new();
                }
                self.summary.oom_kill(pid, &comm, Some(&subject));
                vec![TraceRecord::OomKill {
                    monotonic_ns: ts_ns,
                    subject,
                    cgroup_source,
                    pid,
                    comm,
                    trigger,
                    anon_rss_bytes: anon_rss_kb * 1024,
                    file_rss_bytes: file_rss_kb * 1024,
                    shmem_rss_bytes: shmem_rss_kb * 1024,
                    oom_score_adj,
                }]
            }
            // The agent's wake-up for pid.available; a trace arms none, so none come.
            KernelEvent::Forks { .. } => Vec::new(),
        }
    }

    /// The record for a PSI trigger that fired at `ts_ns`, unless the filters hide its cgroup.
    pub(crate) fn pressure(&self, ts_ns: u64, signal: PressureSignal) -> Option<TraceRecord> {
        let subject = match signal.cgroup {
            None => None,
            Some(path) => {
                let cgroup_id = self.paths.id_of(&path).unwrap_or(0);
                let pod = self
                    .pods
                    .as_ref()
                    .and_then(|pods| pods.pod_of(&path))
                    .cloned();
                let subject = Subject {
                    cgroup_id,
                    cgroup_path: Some(path),
                    pod,
                };
                if !self.shown(&subject) {
                    return None;
                }
                Some(subject)
            }
        };
        Some(TraceRecord::pressure(ts_ns, subject, signal.pressure))
    }

    /// The summary of what was shown, at `ts_ns`, scoped to the `--cgroup` root if any.
    pub(crate) fn summary(&self, ts_ns: u64) -> TraceRecord {
        let scope = self.filter.cgroup.as_ref().map(|root| Subject {
            cgroup_id: self.paths.id_of(root).unwrap_or(0),
            cgroup_path: Some(root.clone()),
            pod: None,
        });
        TraceRecord::Summary {
            monotonic_ns: ts_ns,
            scope,
            report: self.summary.report(),
        }
    }

    /// Stalls and bursts of the last [`RECENT_RETAIN_NS`].
    #[cfg(test)]
    pub(crate) fn recent(&self) -> &RecentIncidents {
        &self.recent
    }

    fn subject(&self, cgroup_id: u64) -> Subject {
        let cgroup_path = self.paths.get(cgroup_id).map(str::to_string);
        let pod = cgroup_path
            .as_deref()
            .and_then(|path| self.pods.as_ref()?.pod_of(path))
            .cloned();
        Subject {
            cgroup_id,
            cgroup_path,
            pod,
        }
    }

    fn shown(&self, subject: &Subject) -> bool {
        self.filter
            .admits(subject.cgroup_path.as_deref(), subject.pod.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::attribution::{PodCgroups, PodIdentity};

    const MIB: i64 = 1 << 20;

    fn stat(id: u64, delta: i64, total: i64) -> KernelEvent {
        KernelEvent::Stat {
            cgroup_id: id,
            stat: Stat::Anon,
            ts_ns: 1,
            delta_bytes: delta,
            total_bytes: total,
            growth_bytes: delta.max(0),
        }
    }

    fn stall(id: u64, ms: u64) -> KernelEvent {
        KernelEvent::Stall {
            reclaim: Reclaim::Memcg,
            pid: 5,
            tid: 5,
            comm: "alloc".into(),
            cgroup_id: id,
            start_ns: 10,
            duration_ns: ms * 1_000_000,
            nr_reclaimed: 2,
        }
    }

    fn oom(pid: u32, trigger: u64) -> KernelEvent {
        KernelEvent::OomKill {
            pid,
            comm: "alloc".into(),
            trigger_cgroup_id: trigger,
            ts_ns: 20,
            anon_rss_kb: 64 << 10,
            file_rss_kb: 0,
            shmem_rss_kb: 0,
            oom_score_adj: 0,
        }
    }

    /// /pods/a held 100 bytes of anon more than the kernel's running sum; pid 5 lives in
    /// /pods/a/c, pid 7 was recorded there by the kernel and is a zombie now, pid 8 was
    /// recorded in a cgroup the trace never saw, every other pid is gone.
    struct Fake;

    impl Lookups for Fake {
        fn baseline(&mut self, _id: u64, path: &str, _stat: Stat) -> Option<i64> {
            (path == "/pods/a").then_some(100)
        }
        fn victim_cgroup_id(&mut self, pid: u32) -> Option<u64> {
            match pid {
                7 => Some(12),
                8 => Some(999),
                _ => None,
            }
        }
        fn cgroup_of_pid(&mut self, pid: u32) -> Option<String> {
            match pid {
                5 => Some("/pods/a/c".into()),
                // A zombie on cgroup v1.
                7 => Some("/".into()),
                _ => None,
            }
        }
    }

    fn view(filter: Filter) -> TraceView {
        view_in_pages_of(filter, 4096)
    }

    fn view_in_pages_of(filter: Filter, page_size: u64) -> TraceView {
        let mut paths = CgroupPaths::default();
        paths.insert(1, "/".into());
        paths.insert(10, "/pods/a".into());
        paths.insert(12, "/pods/a/c".into());
        paths.insert(20, "/pods/b".into());
        let mut pods = PodCgroups::default();
        pods.insert(
            "/pods/a".into(),
            PodIdentity {
                namespace: "shop".into(),
                name: "web".into(),
                uid: "ua".into(),
            },
        );
        let burst = BurstSettings {
            window_ns: 1_000_000_000,
            bytes_per_sec: (8 * MIB) as u64,
        };
        TraceView::new(paths, filter, Some(Box::new(pods)), burst, page_size)
    }

    #[test]
    fn reclaimed_pages_are_counted_in_the_kernel_s_page_size() {
        // arm64 kernels may run with 16 KiB or 64 KiB pages: the stall's nr_reclaimed is in
        // those pages.
        for (page, bytes) in [
            (4096, 8192),
            (16 * 1024, 32 * 1024),
            (64 * 1024, 128 * 1024),
        ] {
            let records = view_in_pages_of(Filter::default(), page).apply(stall(12, 7), &mut Fake);
            let [
                TraceRecord::Stall {
                    reclaimed_bytes, ..
                },
            ] = &records[..]
            else {
                panic!("{records:?}")
            };
            assert_eq!(*reclaimed_bytes, bytes, "{page}-byte pages");
        }
    }

    fn kinds(records: &[TraceRecord]) -> Vec<String> {
        records
            .iter()
            .map(|r| {
                serde_json::to_value(r).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn current_is_baseline_plus_running_sum() {
        let mut v = view(Filter::default());
        let first = v.apply(stat(10, 4096, 4096), &mut Fake);
        assert!(
            matches!(
                first[..],
                [TraceRecord::Stat {
                    current_bytes: 4196,
                    ..
                }]
            ),
            "{first:?}"
        );
        let second = v.apply(stat(10, -2048, 2048), &mut Fake);
        assert!(
            matches!(
                second[..],
                [TraceRecord::Stat {
                    current_bytes: 2148,
                    ..
                }]
            ),
            "{second:?}"
        );
    }

    #[test]
    fn mkdir_teaches_paths_and_rmdir_forgets_them() {
        let mut v = view(Filter::default());
        v.apply(
            KernelEvent::Mkdir {
                cgroup_id: 11,
                ts_ns: 1,
                path: "/pods/x".into(),
            },
            &mut Fake,
        );
        let r = v.apply(stat(11, MIB, MIB), &mut Fake);
        assert!(
            matches!(&r[..], [TraceRecord::Stat { subject, current_bytes, .. }] if subject.cgroup_path.as_deref() == Some("/pods/x") && *current_bytes == MIB),
            "a cgroup created during the trace counts from zero: {r:?}"
        );
        v.apply(
            KernelEvent::Rmdir {
                cgroup_id: 11,
                ts_ns: 2,
                path: "/pods/x".into(),
            },
            &mut Fake,
        );
        let r = v.apply(stat(11, 4096, 4096), &mut Fake);
        assert!(
            matches!(&r[..], [TraceRecord::Stat { subject, .. }] if subject.cgroup_path.is_none())
        );
    }

    #[test]
    fn filters_by_case() {
        let by_cgroup = Filter {
            cgroup: Some("/pods".into()),
            ..Filter::default()
        };
        let by_pod = Filter {
            pod: Some(("shop".into(), "web".into())),
            ..Filter::default()
        };
        let by_ns = Filter {
            namespace: Some("other".into()),
            ..Filter::default()
        };
        let cases: [(&str, Filter, KernelEvent, usize); 9] = [
            ("subtree stat", by_cgroup.clone(), stat(10, 1, 1), 1),
            ("root is outside /pods", by_cgroup.clone(), stat(1, 1, 1), 0),
            (
                "unknown cgroups are hidden",
                by_cgroup.clone(),
                stat(99, 1, 1),
                0,
            ),
            (
                "similar prefix",
                by_cgroup,
                KernelEvent::Mkdir {
                    cgroup_id: 13,
                    ts_ns: 1,
                    path: "/podsx".into(),
                },
                0,
            ),
            (
                "stall in the pod's container",
                by_pod.clone(),
                stall(12, 5),
                1,
            ),
            ("stall in another cgroup", by_pod.clone(), stall(20, 5), 0),
            ("oom victim in the pod", by_pod.clone(), oom(5, 20), 1),
            (
                "node events pass every filter",
                by_pod,
                KernelEvent::Kswapd {
                    awake: true,
                    nid: 0,
                    order: 0,
                    ts_ns: 1,
                },
                1,
            ),
            ("namespace without pods", by_ns, stall(12, 5), 0),
        ];
        for (name, filter, event, expected) in cases {
            assert_eq!(
                view(filter).apply(event, &mut Fake).len(),
                expected,
                "{name}"
            );
        }
    }

    #[test]
    fn stalls_and_oom_kills_are_attributed_and_summarised() {
        let mut v = view(Filter::default());
        let records = v.apply(stall(12, 7), &mut Fake);
        let [
            TraceRecord::Stall {
                subject,
                reclaimed_bytes,
                ..
            },
        ] = &records[..]
        else {
            panic!("{records:?}")
        };
        assert_eq!(
            subject.pod.as_ref().map(|p| p.name.as_str()),
            Some("web"),
            "container cgroup -> pod"
        );
        assert_eq!(*reclaimed_bytes, 8192);
        let cases: [(&str, KernelEvent, &str, Option<&str>); 4] = [
            (
                "the kernel's record, though /proc already names the root",
                oom(7, 20),
                "kernel",
                Some("/pods/a/c"),
            ),
            (
                "a recorded cgroup the trace does not know: the next source",
                oom(8, 20),
                "trigger",
                Some("/pods/b"),
            ),
            (
                "victim still in /proc",
                oom(5, 20),
                "proc",
                Some("/pods/a/c"),
            ),
            (
                "victim gone: the OOMing cgroup",
                oom(6, 20),
                "trigger",
                Some("/pods/b"),
            ),
        ];
        for (name, event, source, path) in cases {
            let records = v.apply(event, &mut Fake);
            let [
                TraceRecord::OomKill {
                    subject,
                    cgroup_source,
                    trigger,
                    ..
                },
            ] = &records[..]
            else {
                panic!("{name}: {records:?}")
            };
            assert_eq!(
                (*cgroup_source, subject.cgroup_path.as_deref()),
                (source, path),
                "{name}"
            );
            assert_eq!(trigger.cgroup_path.as_deref(), Some("/pods/b"), "{name}");
        }
        let TraceRecord::Summary { report, .. } = v.summary(30) else {
            panic!()
        };
        assert_eq!(report.most_stalled[0].subject, "shop/web");
        assert_eq!(report.oom_kills.len(), 4);
        assert_eq!(v.recent().involving(12, 100_000_000, 100_000_000).len(), 1);
    }

    #[test]
    fn fast_growth_adds_a_burst_record() {
        let mut v = view(Filter::default());
        let mut all = Vec::new();
        for i in 0..10 {
            let event = KernelEvent::Stat {
                cgroup_id: 20,
                stat: Stat::Anon,
                ts_ns: i * 1_000_000,
                delta_bytes: MIB,
                total_bytes: MIB * (i as i64 + 1),
                growth_bytes: MIB * (i as i64 + 1),
            };
            all.extend(v.apply(event, &mut Fake));
        }
        let kinds = kinds(&all);
        assert_eq!(
            kinds.iter().filter(|k| *k == "burst").count(),
            1,
            "{kinds:?}"
        );
        assert_eq!(
            kinds[8], "burst",
            "the 8th MiB within 1 s crosses 8 MiB/s: {kinds:?}"
        );
        assert_eq!(
            v.recent().involving(20, 1_000_000_000, 1_000_000_000).len(),
            1
        );
    }

    #[test]
    fn pressure_signals_follow_the_filter() {
        use crate::source::pressure::Pressure;
        let v = view(Filter {
            pod: Some(("shop".into(), "web".into())),
            ..Filter::default()
        });
        let signal = |cgroup: Option<&str>| PressureSignal {
            cgroup: cgroup.map(str::to_string),
            pressure: Pressure::default(),
        };
        assert!(matches!(
            v.pressure(1, signal(None)),
            Some(TraceRecord::Pressure { scope: "node", .. })
        ));
        assert!(matches!(
            v.pressure(1, signal(Some("/pods/a"))),
            Some(TraceRecord::Pressure {
                scope: "cgroup",
                ..
            })
        ));
        assert!(v.pressure(1, signal(Some("/pods/b"))).is_none());
    }
}
