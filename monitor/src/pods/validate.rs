//! A pod's identifiers are untrusted input: its uid names a cgroup directory the agent reads
//! and kills, and its namespace and name are printed in decision lines. A pod is accepted only
//! with identifiers of the shape Kubernetes itself gives them, checked once where pods enter
//! (the manifests directory, the API watch):
//! * uid: an RFC 4122 UUID in its text form, as the API server issues them
//!   (`0f1e2d3c-aaaa-4bbb-8ccc-123456789abc`), or 32 hex digits, the kubelet's uid for a static
//!   pod read from a manifest without one (an MD5 of the manifest); the same for a mirror
//!   pod's `kubernetes.io/config.mirror` annotation, the uid its cgroup is named after;
//! * namespace: a DNS-1123 label (absent means `default`);
//! * name: a DNS-1123 subdomain.
//!
//! None of these can hold `/`, `.` alone, `..`, whitespace or control characters, so a uid
//! cannot reach outside its own pod cgroup and a name cannot start a new output line.
use k8s_openapi::api::core::v1::Pod;

use crate::engine::pod_facts::kubelet_uid;

/// The longest DNS-1123 label.
const LABEL_MAX: usize = 63;
/// The longest DNS-1123 subdomain.
const SUBDOMAIN_MAX: usize = 253;

/// Why a pod's identifiers were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPod {
    /// `metadata.uid` is absent or empty.
    #[error("metadata.uid is required")]
    MissingUid,
    /// `metadata.uid` is not a UUID (nor a static pod's 32-hex-digit uid).
    #[error("metadata.uid {0} is not a UUID (8-4-4-4-12 hex digits) or 32 hex digits")]
    Uid(Escaped),
    /// A mirror pod's `kubernetes.io/config.mirror` annotation is not a uid.
    #[error(
        "annotation kubernetes.io/config.mirror {0} is not a UUID (8-4-4-4-12 hex digits) or 32 \
         hex digits"
    )]
    MirrorUid(Escaped),
    /// `metadata.name` is absent or empty.
    #[error("metadata.name is required")]
    MissingName,
    /// `metadata.name` is not a DNS-1123 subdomain.
    #[error(
        "metadata.name {0} is not a DNS-1123 subdomain (at most 253 characters: lower-case \
         letters, digits, '-' and '.', starting and ending with a letter or digit)"
    )]
    Name(Escaped),
    /// `metadata.namespace` is not a DNS-1123 label.
    #[error(
        "metadata.namespace {0} is not a DNS-1123 label (at most 63 characters: lower-case \
         letters, digits and '-', starting and ending with a letter or digit)"
    )]
    Namespace(Escaped),
}

/// A refused value, quoted with its control characters escaped so the message stays one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escaped(pub String);

impl std::fmt::Display for Escaped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Debug quoting escapes control characters, quotes and backslashes.
        write!(f, "{:?}", self.0)
    }
}

/// Checks the uid, namespace and name of `pod`.
pub fn validate_pod(pod: &Pod) -> Result<(), InvalidPod> {
    let meta = &pod.metadata;
    match meta.uid.as_deref() {
        None | Some("") => return Err(InvalidPod::MissingUid),
        Some(uid) if !is_uid(uid) => return Err(InvalidPod::Uid(Escaped(uid.into()))),
        Some(_) => {}
    }
    if let Some(kubelet_uid) = kubelet_uid(pod)
        && !is_uid(kubelet_uid)
    {
        return Err(InvalidPod::MirrorUid(Escaped(kubelet_uid.into())));
    }
    if let Some(namespace) = meta.namespace.as_deref()
        && !is_dns1123_label(namespace)
    {
        return Err(InvalidPod::Namespace(Escaped(namespace.into())));
    }
    match meta.name.as_deref() {
        None | Some("") => Err(InvalidPod::MissingName),
        Some(name) if !is_dns1123_subdomain(name) => Err(InvalidPod::Name(Escaped(name.into()))),
        Some(_) => Ok(()),
    }
}

/// An RFC 4122 UUID's text (hex digits in groups of 8-4-4-4-12, either case), or 32 hex
/// digits without dashes.
pub fn is_uid(uid: &str) -> bool {
    let bytes = uid.as_bytes();
    let hex = |b: &u8| b.is_ascii_hexdigit();
    match bytes.len() {
        32 => bytes.iter().all(hex),
        36 => bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => hex(b),
        }),
        _ => false,
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns1123_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => {
            bytes.len() <= LABEL_MAX
                && alnum(first)
                && alnum(last)
                && bytes.iter().all(|&b| alnum(b) || b == b'-')
        }
        _ => false,
    }
}

/// DNS-1123 labels joined by `.`, at most 253 characters.
pub fn is_dns1123_subdomain(name: &str) -> bool {
    name.len() <= SUBDOMAIN_MAX && name.split('.').all(is_dns1123_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0f1e2d3c-aaaa-4bbb-8ccc-123456789abc";

    fn pod(namespace: Option<&str>, name: Option<&str>, uid: Option<&str>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.namespace = namespace.map(Into::into);
        pod.metadata.name = name.map(Into::into);
        pod.metadata.uid = uid.map(Into::into);
        pod
    }

    fn mirror(mut pod: Pod, kubelet_uid: &str) -> Pod {
        pod.metadata.annotations = Some(
            [(
                crate::engine::pod_facts::CONFIG_MIRROR_ANNOTATION.to_string(),
                kubelet_uid.to_string(),
            )]
            .into(),
        );
        pod
    }

    #[test]
    fn identifiers_of_kubernetes_shape_pass_and_others_are_named() {
        struct Case {
            name: &'static str,
            pod: Pod,
            want: Result<(), &'static str>,
        }
        let long_label = "a".repeat(63);
        let too_long_label = "a".repeat(64);
        let long_name = format!("{0}.{0}.{0}.{1}", "a".repeat(63), "b".repeat(61));
        let too_long_name = format!("{long_name}c");
        let crafted_dots = format!("{UID}/../../../outside");
        let crafted_child = format!("{UID}/ctr-x");
        let leak = Box::leak;
        let cases = [
            Case {
                name: "an API server pod",
                pod: pod(Some("kube-system"), Some("etcd-node-1"), Some(UID)),
                want: Ok(()),
            },
            Case {
                name: "upper-case uid",
                pod: pod(
                    None,
                    Some("web"),
                    Some("0F1E2D3C-AAAA-4BBB-8CCC-123456789ABC"),
                ),
                want: Ok(()),
            },
            Case {
                name: "static pod uid from the kubelet's manifest hash",
                pod: pod(None, Some("web"), Some("6b86b273ff34fce19d6b804eff5a3f57")),
                want: Ok(()),
            },
            Case {
                name: "a mirror pod keyed by its static pod's uid",
                pod: mirror(
                    pod(None, Some("etcd"), Some(UID)),
                    "6b86b273ff34fce19d6b804eff5a3f57",
                ),
                want: Ok(()),
            },
            Case {
                name: "a mirror annotation climbing out of kubepods",
                pod: mirror(pod(None, Some("etcd"), Some(UID)), "../../outside"),
                want: Err("kubernetes.io/config.mirror \"../../outside\""),
            },
            Case {
                name: "no namespace means default",
                pod: pod(None, Some("web.v1"), Some(UID)),
                want: Ok(()),
            },
            Case {
                name: "longest label and subdomain",
                pod: pod(
                    Some(leak(long_label.into())),
                    Some(leak(long_name.into())),
                    Some(UID),
                ),
                want: Ok(()),
            },
            Case {
                name: "missing uid",
                pod: pod(None, Some("web"), None),
                want: Err("metadata.uid is required"),
            },
            Case {
                name: "empty uid",
                pod: pod(None, Some("web"), Some("")),
                want: Err("metadata.uid is required"),
            },
            Case {
                name: "uid climbing out of kubepods",
                pod: pod(None, Some("web"), Some(leak(crafted_dots.into()))),
                want: Err(
                    "metadata.uid \"0f1e2d3c-aaaa-4bbb-8ccc-123456789abc/../../../outside\" is not a UUID",
                ),
            },
            Case {
                name: "uid naming another pod's container",
                pod: pod(None, Some("web"), Some(leak(crafted_child.into()))),
                want: Err(
                    "metadata.uid \"0f1e2d3c-aaaa-4bbb-8ccc-123456789abc/ctr-x\" is not a UUID",
                ),
            },
            Case {
                name: "uid with dashes misplaced",
                pod: pod(
                    None,
                    Some("web"),
                    Some("0f1e2d3caaaa-4bbb-8ccc-123456789abc-"),
                ),
                want: Err("is not a UUID"),
            },
            Case {
                name: "uid of a test, not a UUID",
                pod: pod(None, Some("web"), Some("hog-uid")),
                want: Err("metadata.uid \"hog-uid\" is not a UUID"),
            },
            Case {
                name: "missing name",
                pod: pod(None, None, Some(UID)),
                want: Err("metadata.name is required"),
            },
            Case {
                name: "name forging a line",
                pod: pod(
                    None,
                    Some("x\nwould evict kube-system/etcd: forged"),
                    Some(UID),
                ),
                want: Err(
                    "metadata.name \"x\\nwould evict kube-system/etcd: forged\" is not a DNS-1123 subdomain",
                ),
            },
            Case {
                name: "upper-case name",
                pod: pod(None, Some("Web"), Some(UID)),
                want: Err("is not a DNS-1123 subdomain"),
            },
            Case {
                name: "name with an empty label",
                pod: pod(None, Some("web..v1"), Some(UID)),
                want: Err("is not a DNS-1123 subdomain"),
            },
            Case {
                name: "name ending in a dash",
                pod: pod(None, Some("web-"), Some(UID)),
                want: Err("is not a DNS-1123 subdomain"),
            },
            Case {
                name: "name too long",
                pod: pod(None, Some(leak(too_long_name.into())), Some(UID)),
                want: Err("is not a DNS-1123 subdomain"),
            },
            Case {
                name: "namespace with a dot",
                pod: pod(Some("kube.system"), Some("web"), Some(UID)),
                want: Err("metadata.namespace \"kube.system\" is not a DNS-1123 label"),
            },
            Case {
                name: "namespace too long",
                pod: pod(Some(leak(too_long_label.into())), Some("web"), Some(UID)),
                want: Err("is not a DNS-1123 label"),
            },
            Case {
                name: "namespace with a slash",
                pod: pod(Some("a/b"), Some("web"), Some(UID)),
                want: Err("is not a DNS-1123 label"),
            },
            Case {
                name: "empty namespace",
                pod: pod(Some(""), Some("web"), Some(UID)),
                want: Err("is not a DNS-1123 label"),
            },
        ];
        for case in cases {
            let got = validate_pod(&case.pod).map_err(|e| e.to_string());
            match (&got, case.want) {
                (Ok(()), Ok(())) => {}
                (Err(message), Err(part)) => {
                    assert!(message.contains(part), "{}: {message}", case.name);
                    assert!(
                        !message.contains('\n'),
                        "{}: one line: {message}",
                        case.name
                    );
                }
                _ => panic!("{}: got {got:?}, want {:?}", case.name, case.want),
            }
        }
    }
}
