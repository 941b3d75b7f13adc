//! Where the kubelet puts a pod's cgroup, by its naming rules, on cgroup v1 and v2 alike
//! (the relative names are the same; only the mount differs).
//!
//! The kubelet names a pod's cgroup `[kubepods, <qos>, pod<uid>]`, leaving out the QoS level
//! for Guaranteed pods, and renders that name per cgroup driver:
//! * cgroupfs: `/kubepods/burstable/pod<uid>`, `/kubepods/besteffort/pod<uid>`,
//!   `/kubepods/pod<uid>`;
//! * systemd: nested slices whose names repeat their parents' names, with `-` in a component
//!   escaped as `_`: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`,
//!   `/kubepods.slice/kubepods-pod<uid_>.slice`.
use std::{io, path::Path};

use crate::engine::{ids::CgroupRel, qos::QosClass};

/// How the kubelet's cgroup driver spells cgroup names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupDriver {
    Cgroupfs,
    Systemd,
}

/// The cgroup all pods live under, relative to the memory hierarchy root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubepodsCgroup {
    /// `/kubepods`, `/kubepods.slice`, or whatever `--kubepods-cgroup` said.
    pub rel: CgroupRel,
    pub driver: CgroupDriver,
}

/// Why the kubepods cgroup could not be found at the hierarchy root.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    /// Neither name exists: the node runs no kubelet, or uses a custom cgroup root.
    #[error(
        "neither kubepods nor kubepods.slice exists under {root}; is a kubelet running here? \
         pass --kubepods-cgroup when it uses a custom cgroup root"
    )]
    NotFound { root: String },
    /// Both exist, typically left over from a driver change; guessing could rank the wrong pods.
    #[error(
        "both kubepods and kubepods.slice exist under {root}; pass --kubepods-cgroup to choose"
    )]
    Ambiguous { root: String },
    /// The hierarchy root could not be examined.
    #[error("examining {root}: {source}")]
    Io { root: String, source: io::Error },
}

impl KubepodsCgroup {
    /// A cgroup given by path (`--kubepods-cgroup`); a `.slice` name means the systemd driver.
    pub fn new(rel: CgroupRel) -> Self {
        let driver = if rel.as_str().ends_with(".slice") {
            CgroupDriver::Systemd
        } else {
            CgroupDriver::Cgroupfs
        };
        Self { rel, driver }
    }

    /// Looks for `kubepods` (cgroupfs driver) or `kubepods.slice` (systemd driver) directly
    /// under the memory hierarchy's mount point.
    pub fn detect(mount: &Path) -> Result<Self, DetectError> {
        let root = mount.display().to_string();
        let exists = |name: &str| {
            mount
                .join(name)
                .try_exists()
                .map_err(|source| DetectError::Io {
                    root: root.clone(),
                    source,
                })
        };
        let at_root = |name| Self::new(CgroupRel::new(name).expect("a plain name"));
        match (exists("kubepods")?, exists("kubepods.slice")?) {
            (true, false) => Ok(at_root("kubepods")),
            (false, true) => Ok(at_root("kubepods.slice")),
            (true, true) => Err(DetectError::Ambiguous { root }),
            (false, false) => Err(DetectError::NotFound { root }),
        }
    }

    /// The pod's cgroup path relative to the hierarchy root, starting with `/`.
    pub fn pod_path(&self, qos: QosClass, uid: &str) -> String {
        let (parent, leaf) = self.parent_and_leaf(qos, uid);
        format!("{parent}/{leaf}")
    }

    /// [`Self::pod_path`], only when it names the pod's own directory: one component directly
    /// below its QoS level inside kubepods, with nothing that normalisation would change (no
    /// `.`, `..` or empty component). A uid of another shape could point at another pod's
    /// container or outside kubepods altogether.
    pub fn own_pod_path(&self, qos: QosClass, uid: &str) -> Result<CgroupRel, ForeignPath> {
        let (parent, leaf) = self.parent_and_leaf(qos, uid);
        let rel = format!("{parent}/{leaf}");
        let unchanged = |path: &str| CgroupRel::new(path).is_ok_and(|normal| normal == path);
        let inside = unchanged(&parent)
            && rel.starts_with(&format!("{}/", self.base()))
            && !leaf.is_empty()
            && !leaf.contains(['/', '\0'])
            && leaf != "."
            && leaf != "..";
        match CgroupRel::new(&rel) {
            Ok(own) if inside && own == rel.as_str() => Ok(own),
            _ => Err(ForeignPath { rel }),
        }
    }

    /// Its path to put names after: the root is `/`, every other path has no trailing `/`.
    fn base(&self) -> &str {
        self.rel.as_str().trim_end_matches('/')
    }

    /// The QoS level's cgroup and the pod's directory name in it.
    fn parent_and_leaf(&self, qos: QosClass, uid: &str) -> (String, String) {
        let qos_level = match qos {
            QosClass::Guaranteed => None,
            QosClass::Burstable => Some("burstable"),
            QosClass::BestEffort => Some("besteffort"),
        };
        let pod = format!("pod{uid}");
        let base = self.base();
        match self.driver {
            CgroupDriver::Cgroupfs => {
                let parent = qos_level.map_or(base.to_string(), |q| format!("{base}/{q}"));
                (parent, pod)
            }
            CgroupDriver::Systemd => {
                // A child slice is named after its parent slice: `<parent>-<component>.slice`.
                let mut slice = base
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .trim_end_matches(".slice")
                    .to_string();
                let mut parent = base.to_string();
                if let Some(q) = qos_level {
                    slice = format!("{slice}-{q}");
                    parent = format!("{parent}/{slice}.slice");
                }
                (parent, format!("{slice}-{}.slice", pod.replace('-', "_")))
            }
        }
    }
}

/// A pod's cgroup path that is not the pod's own directory inside kubepods.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{rel:?} is not a pod directory inside kubepods")]
pub struct ForeignPath {
    pub rel: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc";

    #[test]
    fn pod_paths_follow_the_kubelet_naming() {
        struct Case {
            name: &'static str,
            kubepods: &'static str,
            qos: QosClass,
            path: &'static str,
        }
        use QosClass::*;
        let cases = [
            Case {
                name: "cgroupfs burstable",
                kubepods: "kubepods",
                qos: Burstable,
                path: "/kubepods/burstable/pod0f1e2d3c-aaaa-bbbb-cccc-123456789abc",
            },
            Case {
                name: "cgroupfs besteffort",
                kubepods: "/kubepods",
                qos: BestEffort,
                path: "/kubepods/besteffort/pod0f1e2d3c-aaaa-bbbb-cccc-123456789abc",
            },
            Case {
                name: "cgroupfs guaranteed sits directly under kubepods",
                kubepods: "/kubepods/",
                qos: Guaranteed,
                path: "/kubepods/pod0f1e2d3c-aaaa-bbbb-cccc-123456789abc",
            },
            Case {
                name: "systemd burstable",
                kubepods: "/kubepods.slice",
                qos: Burstable,
                path: "/kubepods.slice/kubepods-burstable.slice/\
                       kubepods-burstable-pod0f1e2d3c_aaaa_bbbb_cccc_123456789abc.slice",
            },
            Case {
                name: "systemd besteffort",
                kubepods: "kubepods.slice",
                qos: BestEffort,
                path: "/kubepods.slice/kubepods-besteffort.slice/\
                       kubepods-besteffort-pod0f1e2d3c_aaaa_bbbb_cccc_123456789abc.slice",
            },
            Case {
                name: "systemd guaranteed",
                kubepods: "/kubepods.slice",
                qos: Guaranteed,
                path: "/kubepods.slice/kubepods-pod0f1e2d3c_aaaa_bbbb_cccc_123456789abc.slice",
            },
            Case {
                name: "systemd under a custom cgroup root",
                kubepods: "/custom.slice/custom-kubepods.slice",
                qos: Burstable,
                path: "/custom.slice/custom-kubepods.slice/custom-kubepods-burstable.slice/\
                       custom-kubepods-burstable-pod0f1e2d3c_aaaa_bbbb_cccc_123456789abc.slice",
            },
            Case {
                name: "cgroupfs under a custom cgroup root",
                kubepods: "/custom/kubepods",
                qos: BestEffort,
                path: "/custom/kubepods/besteffort/pod0f1e2d3c-aaaa-bbbb-cccc-123456789abc",
            },
        ];
        for case in cases {
            let kubepods = KubepodsCgroup::new(case.kubepods.parse().unwrap());
            assert_eq!(kubepods.pod_path(case.qos, UID), case.path, "{}", case.name);
        }
    }

    #[test]
    fn only_the_pods_own_directory_is_accepted() {
        struct Case {
            name: &'static str,
            kubepods: &'static str,
            uid: String,
            own: bool,
        }
        let cases = [
            Case {
                name: "cgroupfs uid",
                kubepods: "/kubepods",
                uid: UID.into(),
                own: true,
            },
            Case {
                name: "systemd uid",
                kubepods: "/kubepods.slice",
                uid: UID.into(),
                own: true,
            },
            Case {
                name: "climbing out of kubepods",
                kubepods: "/kubepods",
                uid: format!("{UID}/../../../outside"),
                own: false,
            },
            Case {
                name: "another pod's container",
                kubepods: "/kubepods",
                uid: format!("{UID}/ctr-x"),
                own: false,
            },
            Case {
                name: "systemd: another slice's child",
                kubepods: "/kubepods.slice",
                uid: format!("{UID}.slice/x"),
                own: false,
            },
            Case {
                name: "a dot component",
                kubepods: "/kubepods",
                uid: "/.".into(),
                own: false,
            },
            Case {
                name: "a NUL byte",
                kubepods: "/kubepods",
                uid: format!("{UID}\0"),
                own: false,
            },
            Case {
                name: "a 4 KiB uid",
                kubepods: "/kubepods",
                uid: "u".repeat(4096),
                own: false,
            },
        ];
        for case in cases {
            let kubepods = KubepodsCgroup::new(case.kubepods.parse().unwrap());
            let got = kubepods.own_pod_path(QosClass::Burstable, &case.uid);
            assert_eq!(got.is_ok(), case.own, "{}: {got:?}", case.name);
            if let Ok(rel) = got {
                assert_eq!(
                    rel.as_str(),
                    kubepods.pod_path(QosClass::Burstable, &case.uid)
                );
            }
        }
    }

    #[test]
    fn driver_follows_the_slice_suffix() {
        assert_eq!(
            KubepodsCgroup::new("kubepods.slice".parse().unwrap()).driver,
            CgroupDriver::Systemd
        );
        assert_eq!(
            KubepodsCgroup::new("/kubepods".parse().unwrap()).driver,
            CgroupDriver::Cgroupfs
        );
        assert_eq!(
            KubepodsCgroup::new("kubepods/".parse().unwrap()).rel,
            "/kubepods"
        );
    }

    #[test]
    fn detection_looks_at_the_hierarchy_root() {
        struct Case {
            name: &'static str,
            dirs: &'static [&'static str],
            found: Result<(&'static str, CgroupDriver), &'static str>,
        }
        let cases = [
            Case {
                name: "cgroupfs",
                dirs: &["kubepods/burstable"],
                found: Ok(("/kubepods", CgroupDriver::Cgroupfs)),
            },
            Case {
                name: "systemd",
                dirs: &["kubepods.slice", "system.slice"],
                found: Ok(("/kubepods.slice", CgroupDriver::Systemd)),
            },
            Case {
                name: "neither",
                dirs: &["system.slice", "x/kubepods"],
                found: Err("neither"),
            },
            Case {
                name: "both",
                dirs: &["kubepods", "kubepods.slice"],
                found: Err("both"),
            },
        ];
        for case in cases {
            let tmp = tempfile::tempdir().unwrap();
            for dir in case.dirs {
                std::fs::create_dir_all(tmp.path().join(dir)).unwrap();
            }
            let got = KubepodsCgroup::detect(tmp.path());
            match (got, case.found) {
                (Ok(k), Ok((rel, driver))) => {
                    assert_eq!((k.rel.as_str(), k.driver), (rel, driver), "{}", case.name);
                }
                (Err(e), Err(start)) => {
                    assert!(e.to_string().starts_with(start), "{}: {e}", case.name);
                }
                (got, want) => panic!("{}: got {got:?}, want {want:?}", case.name),
            }
        }
    }
}
