//! `--cgroup`, `--pod` and `--namespace`: which cgroup-attributed events the trace shows.
//! Node-level events (kswapd, node pressure) carry no cgroup and are always shown: they are the
//! context a pod's stalls happen in.
use super::attribution::PodIdentity;
use crate::engine::ids::is_within;

/// All given conditions must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Filter {
    /// A cgroup path below the hierarchy root: it and its descendants.
    pub cgroup: Option<String>,
    /// `(namespace, name)` of one pod.
    pub pod: Option<(String, String)>,
    /// Pods of one namespace.
    pub namespace: Option<String>,
}

impl Filter {
    /// Whether an event about this cgroup (and pod, when known) is shown. An event whose
    /// cgroup path is unknown is hidden by any filter, since it cannot be shown to match.
    pub(crate) fn admits(&self, cgroup_path: Option<&str>, pod: Option<&PodIdentity>) -> bool {
        let cgroup_ok = self
            .cgroup
            .as_deref()
            .is_none_or(|root| cgroup_path.is_some_and(|p| is_within(p, root)));
        let pod_ok = self
            .pod
            .as_ref()
            .is_none_or(|(ns, name)| pod.is_some_and(|p| p.namespace == *ns && p.name == *name));
        let ns_ok = self
            .namespace
            .as_deref()
            .is_none_or(|ns| pod.is_some_and(|p| p.namespace == ns));
        cgroup_ok && pod_ok && ns_ok
    }
}

/// Parses `--pod NAMESPACE/NAME`.
pub(crate) fn parse_pod(text: &str) -> Result<(String, String), String> {
    match text.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => Err(format!("expected NAMESPACE/NAME, got {text:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn web() -> PodIdentity {
        PodIdentity {
            namespace: "shop".into(),
            name: "web".into(),
            uid: "u1".into(),
        }
    }

    #[test]
    fn filters_by_case() {
        let web = web();
        let by_cgroup = Filter {
            cgroup: Some("/kubepods".into()),
            ..Filter::default()
        };
        let by_pod = Filter {
            pod: Some(("shop".into(), "web".into())),
            ..Filter::default()
        };
        let by_ns = Filter {
            namespace: Some("shop".into()),
            ..Filter::default()
        };
        let other_ns = Filter {
            namespace: Some("db".into()),
            ..Filter::default()
        };
        let both = Filter {
            cgroup: Some("/other".into()),
            ..by_pod.clone()
        };
        let in_pod = Some("/kubepods/podu1/c");
        // (name, filter, cgroup path, pod, shown)
        type Case<'a> = (
            &'a str,
            &'a Filter,
            Option<&'a str>,
            Option<&'a PodIdentity>,
            bool,
        );
        let cases: [Case<'_>; 9] = [
            (
                "no filter shows everything",
                &Filter::default(),
                None,
                None,
                true,
            ),
            ("cgroup subtree", &by_cgroup, in_pod, Some(&web), true),
            (
                "outside the subtree",
                &by_cgroup,
                Some("/system.slice"),
                None,
                false,
            ),
            (
                "unknown path under a cgroup filter",
                &by_cgroup,
                None,
                None,
                false,
            ),
            ("the pod", &by_pod, in_pod, Some(&web), true),
            (
                "no pod under a pod filter",
                &by_pod,
                Some("/kubepods/x"),
                None,
                false,
            ),
            ("namespace", &by_ns, in_pod, Some(&web), true),
            ("other namespace", &other_ns, in_pod, Some(&web), false),
            ("all conditions must hold", &both, in_pod, Some(&web), false),
        ];
        for (name, filter, path, pod, expected) in cases {
            assert_eq!(filter.admits(path, pod), expected, "{name}");
        }
    }

    #[test]
    fn pod_arguments() {
        assert_eq!(parse_pod("shop/web"), Ok(("shop".into(), "web".into())));
        for bad in ["web", "/web", "shop/", "a/b/c"] {
            assert!(parse_pod(bad).is_err(), "{bad}");
        }
    }
}
