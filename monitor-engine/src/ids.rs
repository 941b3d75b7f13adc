//! Identifiers that are checked once, where they enter: a pod's uid and a cgroup's path
//! relative to the hierarchy root; and the pod table's own dense id.
//!
//! Tables keyed by these types compare like with like: a path spelled `kubepods/pod-a/` by
//! a flag and `/kubepods/pod-a` by the kernel is one key, because both were normalised when
//! built, not at each lookup.
use std::{borrow::Borrow, fmt, str::FromStr};

/// A pod's row in the pod table (`pod_table::PodTable`), which alone makes them: the
/// generation tells a reused row from the pod that held it before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PodId {
    pub(super) index: u32,
    pub(super) generation: u32,
}

/// The kernel's limit on a path (`PATH_MAX`, counting the terminating NUL).
const PATH_MAX: usize = 4096;
/// The kernel's limit on one directory name (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// A cgroup's path relative to the root of its hierarchy, in the form the kernel's cgroup
/// tracepoints use: `/a/b`, the root itself `/`. Built with [`CgroupRel::new`], which drops
/// empty components (leading, trailing and doubled slashes) and refuses what could name a
/// directory other than the one spelled.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CgroupRel(String);

/// Why a string is not a cgroup path relative to the hierarchy root.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CgroupRelError {
    /// `.` or `..`: cgroupfs would resolve it to another directory than the one spelled,
    /// possibly outside the subtree the path seems to name.
    #[error("cgroup path {path:?} has a {component:?} component; give the path without it")]
    DotComponent {
        path: String,
        component: &'static str,
    },
    /// A NUL byte ends the path early for the kernel.
    #[error("cgroup path {path:?} contains a NUL byte")]
    Nul { path: String },
    /// Longer than the kernel accepts for a path.
    #[error("cgroup path of {len} bytes is longer than the kernel's limit of {max}")]
    TooLong { len: usize, max: usize },
    /// One component longer than the kernel accepts for a directory name.
    #[error(
        "cgroup path {path:?} has a component of {len} bytes, over the kernel's limit of {max}"
    )]
    NameTooLong {
        path: String,
        len: usize,
        max: usize,
    },
    /// A filesystem path of the hierarchy (`/sys/fs/cgroup/...`) instead of one relative to
    /// its root.
    #[error(
        "cgroup path {path:?} is a filesystem path; give it relative to the hierarchy root \
         (`/kubepods`, not `/sys/fs/cgroup/memory/kubepods`)"
    )]
    MountPath { path: String },
}

impl CgroupRel {
    /// The root of the hierarchy, `/`.
    pub(crate) fn root() -> Self {
        Self("/".into())
    }

    /// Normalises `path` (`kubepods//pod-a/` becomes `/kubepods/pod-a`), or says why it
    /// cannot name a cgroup.
    pub fn new(path: &str) -> Result<Self, CgroupRelError> {
        if path.len() >= PATH_MAX {
            return Err(CgroupRelError::TooLong {
                len: path.len(),
                max: PATH_MAX - 1,
            });
        }
        if path.contains('\0') {
            return Err(CgroupRelError::Nul { path: path.into() });
        }
        let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        for component in &components {
            let dot = match *component {
                "." => Some("."),
                ".." => Some(".."),
                _ => None,
            };
            if let Some(component) = dot {
                return Err(CgroupRelError::DotComponent {
                    path: path.into(),
                    component,
                });
            }
            if component.len() > NAME_MAX {
                return Err(CgroupRelError::NameTooLong {
                    path: path.into(),
                    len: component.len(),
                    max: NAME_MAX,
                });
            }
        }
        if components.starts_with(&["sys", "fs", "cgroup"]) {
            return Err(CgroupRelError::MountPath { path: path.into() });
        }
        Ok(Self(format!("/{}", components.join("/"))))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path without its leading `/`, to join onto the hierarchy's mount point.
    pub fn relative(&self) -> &str {
        &self.0[1..]
    }

    /// The cgroup directly above; `None` for the root.
    pub(crate) fn parent(&self) -> Option<Self> {
        let cut = self.0.rfind('/')?;
        match (cut, self.0.len()) {
            (_, 1) => None,
            (0, _) => Some(Self::root()),
            _ => Some(Self(self.0[..cut].into())),
        }
    }

    /// True when `self` is `root` or below it (see [`is_within`]).
    pub fn is_within(&self, root: &CgroupRel) -> bool {
        is_within(&self.0, &root.0)
    }
}

impl FromStr for CgroupRel {
    type Err = CgroupRelError;

    fn from_str(path: &str) -> Result<Self, Self::Err> {
        Self::new(path)
    }
}

impl AsRef<str> for CgroupRel {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CgroupRel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for CgroupRel {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for CgroupRel {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// True when `path` is `root` or below it, by whole components (`/a/bc` is not below
/// `/a/b`). Both in the kernel's form, as a [`CgroupRel`] holds it or a kernel record and
/// `/proc/<pid>/cgroup` spell it.
pub fn is_within(path: &str, root: &str) -> bool {
    root == "/"
        || path == root
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The value of the root that holds `path`, the deepest where roots nest (see
/// [`is_within`]).
pub fn deepest_within<'a, T>(roots: &'a [(String, T)], path: &str) -> Option<&'a T> {
    roots
        .iter()
        .filter(|(root, _)| is_within(path, root))
        .max_by_key(|(root, _)| root.len())
        .map(|(_, value)| value)
}

/// A pod's uid as the kubelet knows it (for a mirror pod, its static pod's uid), the key of
/// every per-pod table. Any string the API server accepts is one; what a uid may not do
/// inside a cgroup path is checked where the path is built.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(crate) struct PodUid(String);

impl PodUid {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for PodUid {
    fn from(uid: &str) -> Self {
        Self(uid.into())
    }
}

impl From<String> for PodUid {
    fn from(uid: String) -> Self {
        Self(uid)
    }
}

/// Tables keyed by uid are looked up with a borrowed `&str`.
impl Borrow<str> for PodUid {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PodUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_paths_are_normalised_once_or_refused_with_a_reason() {
        let long_name = "n".repeat(NAME_MAX + 1);
        let long_path = "/a".repeat(PATH_MAX / 2);
        struct Case {
            name: &'static str,
            input: String,
            want: Result<&'static str, CgroupRelError>,
        }
        let case = |name, input: &str, want| Case {
            name,
            input: input.into(),
            want,
        };
        let cases = [
            case("already normal", "/kubepods/pod-a", Ok("/kubepods/pod-a")),
            case("no leading slash", "kubepods/pod-a", Ok("/kubepods/pod-a")),
            case("trailing slash", "/kubepods/pod-a/", Ok("/kubepods/pod-a")),
            case(
                "doubled slashes",
                "//kubepods//pod-a",
                Ok("/kubepods/pod-a"),
            ),
            case("the root", "/", Ok("/")),
            case("empty is the root", "", Ok("/")),
            case("dots inside a name", "/a/..b/c.", Ok("/a/..b/c.")),
            case(
                "a parent step",
                "/kubepods/../system.slice",
                Err(CgroupRelError::DotComponent {
                    path: "/kubepods/../system.slice".into(),
                    component: "..",
                }),
            ),
            case(
                "a current-directory step",
                "/kubepods/./pod-a",
                Err(CgroupRelError::DotComponent {
                    path: "/kubepods/./pod-a".into(),
                    component: ".",
                }),
            ),
            case(
                "a NUL byte",
                "/kubepods\0/pod-a",
                Err(CgroupRelError::Nul {
                    path: "/kubepods\0/pod-a".into(),
                }),
            ),
            case(
                "a filesystem path",
                "/sys/fs/cgroup/memory/kubepods",
                Err(CgroupRelError::MountPath {
                    path: "/sys/fs/cgroup/memory/kubepods".into(),
                }),
            ),
            case("sys as a cgroup name", "/sys/kubepods", Ok("/sys/kubepods")),
            case(
                "a 4 KiB path",
                &long_path,
                Err(CgroupRelError::TooLong {
                    len: PATH_MAX,
                    max: PATH_MAX - 1,
                }),
            ),
            case(
                "a name over 255 bytes",
                &format!("/kubepods/{long_name}"),
                Err(CgroupRelError::NameTooLong {
                    path: format!("/kubepods/{long_name}"),
                    len: NAME_MAX + 1,
                    max: NAME_MAX,
                }),
            ),
        ];
        for c in cases {
            let got = CgroupRel::new(&c.input);
            match (&got, &c.want) {
                (Ok(got), Ok(want)) => assert_eq!(got.as_str(), *want, "{}", c.name),
                (Err(got), Err(want)) => assert_eq!(got, want, "{}", c.name),
                _ => panic!("{}: got {got:?}, want {:?}", c.name, c.want),
            }
        }
    }

    #[test]
    fn refusals_say_why() {
        let error = CgroupRel::new("/kubepods/../x").unwrap_err().to_string();
        assert!(error.contains("\"..\" component"), "{error}");
        let error = CgroupRel::new("/sys/fs/cgroup/memory/kubepods")
            .unwrap_err()
            .to_string();
        assert!(error.contains("relative to the hierarchy root"), "{error}");
    }

    #[test]
    fn parents_and_subtrees_go_by_whole_components() {
        let rel = |p| CgroupRel::new(p).unwrap();
        let cases = [
            (
                "a pod's parent",
                "/kubepods/burstable/pod-a",
                Some("/kubepods/burstable"),
            ),
            ("one below the root", "/kubepods", Some("/")),
            ("the root has none", "/", None),
        ];
        for (name, path, want) in cases {
            let got = rel(path).parent();
            assert_eq!(got.as_ref().map(CgroupRel::as_str), want, "{name}");
        }
        let cases = [
            ("itself", "/a/b", "/a/b", true),
            ("below", "/a/b/c", "/a/b", true),
            ("a name sharing a prefix", "/a/bc", "/a/b", false),
            ("above", "/a", "/a/b", false),
            ("everything is within the root", "/x", "/", true),
        ];
        for (name, path, root, want) in cases {
            assert_eq!(rel(path).is_within(&rel(root)), want, "{name}");
        }
        assert_eq!(rel("/kubepods/pod-a").relative(), "kubepods/pod-a");
        assert_eq!(CgroupRel::root().relative(), "");
    }

    #[test]
    fn uid_tables_are_looked_up_by_str() {
        let mut table = std::collections::HashMap::new();
        table.insert(PodUid::from("uid-a"), 1);
        assert_eq!(table.get("uid-a"), Some(&1));
        assert_eq!(PodUid::from("uid-a").to_string(), "uid-a");
    }
}
