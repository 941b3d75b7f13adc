//! Pods from a directory of manifests, the way a node without an API server connection learns
//! what runs on it.
//!
//! Every `.yaml`, `.yml` or `.json` file directly in the directory is read; other files,
//! subdirectories and hidden files (editor swap files, `..data` links) are ignored. A file
//! may hold several YAML documents, each a `Pod`, a `PodList` or a `kind: List` of pods. A
//! file that does not parse is skipped whole and a pod whose identifiers are not of the shape
//! Kubernetes gives them ([`validate`](super::validate)) is skipped alone; both are reported
//! so the rest still loads.
//!
//! Files are untrusted input and bounded before parsing: at most [`MAX_FILE_BYTES`] each
//! (read through a bounded reader, so a file growing meanwhile cannot exceed it), then within
//! the nesting, tokens and aliases [`yaml_bounds`](crate::engine::yaml_bounds) allows.
use crate::engine::rank_report::LeftOut;
use std::{
    collections::HashMap,
    fs, io,
    io::Read as _,
    path::{Path, PathBuf},
};

use k8s_openapi::api::core::v1::Pod;
use serde::de::DeserializeSeed as _;
use serde_json::Value;

use super::{
    manifest_document::{DocumentSeed, ItemProblem, Verdict},
    validate::{InvalidPod, validate_pod},
};
use crate::{
    engine::printable::printable,
    engine::yaml_bounds::{self, Unbounded},
};

/// The largest manifest file read; a node's pod manifests are a few KiB each.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Why a manifest file, or one pod in it, was skipped.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read.
    #[error("{file}: {source}")]
    Read { file: PathBuf, source: io::Error },
    /// A document is not valid YAML or JSON, or not a valid Pod.
    #[error("{file}: document {document}: {message}")]
    Syntax {
        file: PathBuf,
        document: usize,
        message: String,
    },
    /// A document, or an item of a list, is something other than a Pod.
    #[error("{file}: document {document}: kind {kind:?} is not Pod, PodList or List of pods")]
    UnsupportedKind {
        file: PathBuf,
        document: usize,
        kind: String,
    },
    /// The file is larger than [`MAX_FILE_BYTES`].
    #[error("{file}: larger than {limit} bytes; not read")]
    TooLarge { file: PathBuf, limit: u64 },
    /// The file holds more than [`yaml_bounds::LIMITS`] allow, or an alias.
    #[error("{file}: {reason}; not parsed")]
    Unbounded { file: PathBuf, reason: Unbounded },
    /// A pod's uid, namespace or name is not of the shape Kubernetes gives them.
    #[error("{file}: pod {pod}: {reason}")]
    Invalid {
        file: PathBuf,
        pod: String,
        reason: InvalidPod,
    },
    /// A pod's uid was already loaded from another manifest; the first one is kept.
    #[error("{file}: pod {pod}: uid {uid} is already used by pod {first_pod} in {first_file}")]
    DuplicateUid {
        file: PathBuf,
        pod: String,
        uid: String,
        first_file: PathBuf,
        first_pod: String,
    },
}

/// What one read of the directory produced, each pod as `T`.
#[derive(Debug)]
pub struct Loaded<T> {
    /// Pods in file-name order, then in order within each file.
    pub pods: Vec<T>,
    /// Files and pods that were skipped, with the reason.
    pub errors: Vec<ManifestError>,
    /// Pods the source holds that are not this node's active pods (finished, another
    /// node's), with the reason; the agent logs them.
    pub left_out: Vec<LeftOut>,
}

impl<T> Default for Loaded<T> {
    fn default() -> Self {
        Self {
            pods: Vec::new(),
            errors: Vec::new(),
            left_out: Vec::new(),
        }
    }
}

/// A read that keeps the whole Pod objects, for one-shot commands.
pub type LoadedPods = Loaded<Pod>;

/// Reads every manifest in `dir`. Fails only when the directory itself cannot be listed.
pub fn load_dir(dir: &Path) -> io::Result<LoadedPods> {
    load_dir_as(dir, |pod| pod)
}

/// Reads every manifest in `dir` as [`load_dir`], keeping of each accepted pod only what
/// `keep` takes: the Pods of one file at a time are held, never the whole directory's.
pub fn load_dir_as<T>(dir: &Path, keep: impl Fn(Pod) -> T) -> io::Result<Loaded<T>> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| is_manifest(path) && path.is_file())
        .collect();
    files.sort();
    let mut loaded = Loaded::default();
    // Each uid loaded so far, with the file and the pod it came from.
    let mut uids: HashMap<String, (PathBuf, String)> = HashMap::new();
    for file in files {
        // Each pod is checked and kept as it is read; the file's verdict comes at its end.
        let mut check_and_keep = |pod: Pod| {
            let label = pod_label(&pod);
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            (validate_pod(&pod).map(|()| keep(pod)), uid, label)
        };
        let pods = read_bounded(&file).and_then(|text| {
            yaml_bounds::check(&text, yaml_bounds::LIMITS).map_err(|reason| {
                ManifestError::Unbounded {
                    file: file.clone(),
                    reason,
                }
            })?;
            parse_file_as(&file, &text, &mut check_and_keep)
        });
        let pods = match pods {
            Ok(pods) => pods,
            Err(error) => {
                loaded.errors.push(error);
                continue;
            }
        };
        for (checked, uid, label) in pods {
            let pod = match checked {
                Ok(pod) => pod,
                Err(reason) => {
                    loaded.errors.push(ManifestError::Invalid {
                        file: file.clone(),
                        pod: label,
                        reason,
                    });
                    continue;
                }
            };
            if let Some((first_file, first_pod)) = uids.get(&uid) {
                loaded.errors.push(ManifestError::DuplicateUid {
                    file: file.clone(),
                    pod: label,
                    uid,
                    first_file: first_file.clone(),
                    first_pod: first_pod.clone(),
                });
                continue;
            }
            uids.insert(uid, (file.clone(), label));
            loaded.pods.push(pod);
        }
    }
    Ok(loaded)
}

/// The file's text, refused when larger than [`MAX_FILE_BYTES`]: the reader stops one byte
/// past the limit, so memory stays bounded however large the file is or grows.
fn read_bounded(file: &Path) -> Result<String, ManifestError> {
    let read_error = |source| ManifestError::Read {
        file: file.to_path_buf(),
        source,
    };
    let mut text = String::new();
    fs::File::open(file)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_string(&mut text))
        .map_err(read_error)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(ManifestError::TooLarge {
            file: file.to_path_buf(),
            limit: MAX_FILE_BYTES,
        });
    }
    Ok(text)
}

/// True for names this module reads: a manifest extension and not hidden.
pub fn is_manifest(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .is_none_or(|name| name.to_string_lossy().starts_with('.'));
    let extension = path.extension().and_then(|e| e.to_str());
    !hidden && matches!(extension, Some("yaml" | "yml" | "json"))
}

/// Parses one file's text into its pods; `file` only names it in errors. JSON is read as
/// YAML, of which it is a subset.
pub fn parse_file(file: &Path, text: &str) -> Result<Vec<Pod>, ManifestError> {
    parse_file_as(file, text, &mut |pod| pod)
}

/// As [`parse_file`], each pod handed to `keep` as soon as it is read, so only what `keep`
/// returns is held, never the parsed tree of a whole list.
fn parse_file_as<T>(
    file: &Path,
    text: &str,
    keep: &mut dyn FnMut(Pod) -> T,
) -> Result<Vec<T>, ManifestError> {
    let mut kept = Vec::new();
    // JSON (how tools write a PodList) is read as it is parsed. The YAML parser first takes
    // a whole document's events, about 10 KiB a pod of a list. What does not parse as one
    // JSON value (YAML flow style, several documents) is read as YAML, as before.
    if text.trim_start().starts_with('{') {
        let mut json = serde_json::Deserializer::from_str(text);
        let read = DocumentSeed { keep: &mut *keep }
            .deserialize(&mut json)
            .and_then(|verdict| json.end().map(|()| verdict));
        if let Ok(verdict) = read {
            take_document(file, 1, verdict, keep, &mut kept)?;
            return Ok(kept);
        }
    }
    for (index, document) in serde_norway::Deserializer::from_str(text).enumerate() {
        let document_number = index + 1;
        let verdict = DocumentSeed { keep: &mut *keep }
            .deserialize(document)
            .map_err(|e| syntax_in(file, document_number, e.to_string()))?;
        take_document(file, document_number, verdict, keep, &mut kept)?;
    }
    Ok(kept)
}

fn syntax_in(file: &Path, document: usize, message: String) -> ManifestError {
    ManifestError::Syntax {
        file: file.to_path_buf(),
        document,
        message,
    }
}

/// Adds a document's pods to `kept`, or says why the file is refused.
fn take_document<T>(
    file: &Path,
    document: usize,
    verdict: Verdict<T>,
    keep: &mut dyn FnMut(Pod) -> T,
    kept: &mut Vec<T>,
) -> Result<(), ManifestError> {
    let syntax = |message: String| syntax_in(file, document, message);
    let unsupported = |kind: &str| ManifestError::UnsupportedKind {
        file: file.to_path_buf(),
        document,
        kind: kind.to_string(),
    };
    let (kind, object, items) = match verdict {
        // Empty documents, such as after a trailing `---`.
        Verdict::Empty => return Ok(()),
        Verdict::NotAnObject => return Err(unsupported("<none>")),
        Verdict::Object {
            kind,
            object,
            items,
        } => (kind, object, items),
    };
    match kind.as_deref() {
        Some("Pod") => kept.push(keep(to_pod(Value::Object(object)).map_err(syntax)?)),
        Some(list @ ("PodList" | "List")) => {
            if items.not_a_list {
                return Err(syntax("items is not a list".into()));
            }
            // The first item in the way decides, as when they were checked in order.
            let without_kind = items.first_without_kind.filter(|_| list == "List");
            match (without_kind, items.first_problem) {
                (Some(at), problem) if problem.as_ref().is_none_or(|(p, _)| at <= *p) => {
                    return Err(unsupported("<none>"));
                }
                (_, Some((_, ItemProblem::Kind(kind)))) => return Err(unsupported(&kind)),
                (_, Some((_, ItemProblem::NotAPod(message)))) => return Err(syntax(message)),
                _ => kept.extend(items.kept),
            }
        }
        kind => return Err(unsupported(kind.unwrap_or("<none>"))),
    }
    Ok(())
}

fn to_pod(value: Value) -> Result<Pod, String> {
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// `namespace/name` for messages, as far as the pod has them, escaped to stay on one line.
fn pod_label(pod: &Pod) -> String {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or("<unnamed>");
    format!("{}/{}", printable(namespace), printable(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uids(pods: &[Pod]) -> Vec<&str> {
        pods.iter()
            .map(|p| p.metadata.uid.as_deref().unwrap_or(""))
            .collect()
    }

    #[test]
    fn every_supported_shape_parses() {
        struct Case {
            name: &'static str,
            text: &'static str,
            uids: &'static [&'static str],
        }
        let cases = [
            Case {
                name: "single pod",
                text: "apiVersion: v1\nkind: Pod\nmetadata: {name: a, uid: u1}\n",
                uids: &["u1"],
            },
            Case {
                name: "several documents, empty ones skipped",
                text: "---\nkind: Pod\nmetadata: {uid: u1}\n---\n---\nkind: Pod\nmetadata: {uid: u2}\n---\n",
                uids: &["u1", "u2"],
            },
            Case {
                name: "pod list whose items leave out kind",
                text: "kind: PodList\nitems:\n- metadata: {uid: u1}\n- kind: Pod\n  metadata: {uid: u2}\n",
                uids: &["u1", "u2"],
            },
            Case {
                name: "generic list of pods",
                text: "apiVersion: v1\nkind: List\nitems:\n- {kind: Pod, metadata: {uid: u3}}\n",
                uids: &["u3"],
            },
            Case {
                name: "json",
                text: r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"uid": "j1"}, "spec": {"containers": []}}"#,
                uids: &["j1"],
            },
            Case {
                name: "empty list",
                text: "kind: List\nitems: []\n",
                uids: &[],
            },
            Case {
                name: "json list whose kind comes after its items, as kubectl sorts keys",
                text: r#"{"apiVersion":"v1","items":[{"metadata":{"uid":"k1"}},{"kind":"Pod","metadata":{"uid":"k2"}}],"kind":"PodList"}"#,
                uids: &["k1", "k2"],
            },
            Case {
                name: "a json pod whose items are not a list's",
                text: r#"{"kind":"Pod","items":[{"kind":"Pod","metadata":{"uid":"no"}}],"metadata":{"uid":"p1"}}"#,
                uids: &["p1"],
            },
            Case {
                name: "yaml flow style, read as yaml",
                text: "{kind: Pod, metadata: {uid: f1}}\n",
                uids: &["f1"],
            },
            Case {
                name: "json followed by a second document, read as yaml",
                text: "{\"kind\": \"Pod\", \"metadata\": {\"uid\": \"d1\"}}\n---\nkind: Pod\nmetadata: {uid: d2}\n",
                uids: &["d1", "d2"],
            },
        ];
        for case in cases {
            let pods = parse_file(Path::new("x.yaml"), case.text)
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            assert_eq!(uids(&pods), case.uids, "{}", case.name);
        }
    }

    #[test]
    fn bad_documents_are_typed_errors() {
        struct Case {
            name: &'static str,
            text: &'static str,
            check: fn(&ManifestError) -> bool,
        }
        let cases = [
            Case {
                name: "not yaml",
                text: "kind: Pod\nmetadata: [unclosed\n",
                check: |e| matches!(e, ManifestError::Syntax { document: 1, .. }),
            },
            Case {
                name: "another kind",
                text: "kind: Pod\nmetadata: {uid: a}\n---\nkind: Deployment\n",
                check: |e| matches!(e, ManifestError::UnsupportedKind { document: 2, kind, .. } if kind == "Deployment"),
            },
            Case {
                name: "no kind",
                text: "metadata: {uid: a}\n",
                check: |e| matches!(e, ManifestError::UnsupportedKind { kind, .. } if kind == "<none>"),
            },
            Case {
                name: "a List item that is not a pod",
                text: "kind: List\nitems:\n- {kind: Service}\n",
                check: |e| matches!(e, ManifestError::UnsupportedKind { kind, .. } if kind == "Service"),
            },
            Case {
                name: "wrong field type",
                text: "kind: Pod\nmetadata: {uid: a}\nspec: {containers: 3}\n",
                check: |e| matches!(e, ManifestError::Syntax { .. }),
            },
            Case {
                name: "wrong apiVersion",
                text: "apiVersion: apps/v1\nkind: Pod\n",
                check: |e| matches!(e, ManifestError::Syntax { .. }),
            },
            Case {
                name: "json List item without a kind, the kind after the items",
                text: r#"{"items":[{"metadata":{"uid":"a"}}],"kind":"List"}"#,
                check: |e| matches!(e, ManifestError::UnsupportedKind { kind, .. } if kind == "<none>"),
            },
            Case {
                name: "json List whose second item is another kind",
                text: r#"{"kind":"List","items":[{"kind":"Pod","metadata":{"uid":"a"}},{"kind":"Service"}]}"#,
                check: |e| matches!(e, ManifestError::UnsupportedKind { kind, .. } if kind == "Service"),
            },
            Case {
                name: "the first item in the way decides: a pod without kind before a Service",
                text: r#"{"kind":"List","items":[{"metadata":{"uid":"a"}},{"kind":"Service"}]}"#,
                check: |e| matches!(e, ManifestError::UnsupportedKind { kind, .. } if kind == "<none>"),
            },
            Case {
                name: "json PodList item that is not a valid pod",
                text: r#"{"kind":"PodList","items":[{"kind":"Pod","spec":{"containers":3}}]}"#,
                check: |e| matches!(e, ManifestError::Syntax { document: 1, .. }),
            },
            Case {
                name: "json items that are not a list",
                text: r#"{"kind":"PodList","items":5}"#,
                check: |e| matches!(e, ManifestError::Syntax { message, .. } if message == "items is not a list"),
            },
            Case {
                name: "json that is not an object",
                text: r#"["kind", "Pod"]"#,
                check: |e| matches!(e, ManifestError::UnsupportedKind { kind, .. } if kind == "<none>"),
            },
        ];
        for case in cases {
            let error = parse_file(Path::new("bad.yaml"), case.text).expect_err(case.name);
            assert!((case.check)(&error), "{}: {error:?}", case.name);
            assert!(
                error.to_string().starts_with("bad.yaml: "),
                "{}: {error}",
                case.name
            );
        }
    }

    const UA: &str = "0000000a-0000-4000-8000-00000000000a";
    const UB: &str = "0000000b-0000-4000-8000-00000000000b";

    #[test]
    fn directory_skips_what_is_broken_and_loads_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| fs::write(tmp.path().join(name), text).unwrap();
        write(
            "a.yaml",
            &format!("kind: Pod\nmetadata: {{name: a, uid: {UA}}}\n"),
        );
        write(
            "b.yml",
            &format!(
                "kind: Pod\nmetadata: {{name: no-uid}}\n---\nkind: Pod\nmetadata: {{name: b, uid: {UB}}}\n"
            ),
        );
        write("c.json", "{ not json");
        write(
            "d.json",
            &format!(r#"{{"kind": "Pod", "metadata": {{"name": "dup", "uid": "{UA}"}}}}"#),
        );
        write("notes.txt", "kind: Pod\nmetadata: {uid: ignored}\n");
        write(".a.yaml.swp", "garbage");
        fs::create_dir(tmp.path().join("sub.yaml")).unwrap();

        let loaded = load_dir(tmp.path()).unwrap();
        assert_eq!(uids(&loaded.pods), [UA, UB]);
        let mut reported: Vec<String> = loaded.errors.iter().map(ToString::to_string).collect();
        reported.sort();
        assert_eq!(reported.len(), 3, "{reported:?}");
        assert!(
            reported[0].contains("b.yml: pod default/no-uid: metadata.uid is required"),
            "{reported:?}"
        );
        assert!(reported[1].contains("c.json: document 1:"), "{reported:?}");
        assert!(
            reported[2].ends_with(&format!(
                "d.json: pod default/dup: uid {UA} is already used by pod default/a in {}",
                tmp.path().join("a.yaml").display()
            )),
            "{reported:?}"
        );
    }

    #[test]
    fn untrusted_files_and_pods_are_refused_with_the_reason() {
        struct Case {
            name: &'static str,
            text: String,
            error: &'static str,
        }
        let pod = |name: &str, uid: &str| {
            format!("kind: Pod\nmetadata:\n  name: {name:?}\n  uid: {uid:?}\n")
        };
        let cases = [
            Case {
                name: "uid climbing out of the pod's cgroup",
                text: pod("x", &format!("{UA}/../../../outside")),
                error: "is not a UUID",
            },
            Case {
                name: "uid naming another pod's container",
                text: pod("x", &format!("{UB}/ctr-x")),
                error: "is not a UUID",
            },
            Case {
                name: "name with a newline",
                text: pod("x\nwould evict kube-system/etcd: forged", UA),
                error: "pod default/x\\nwould evict kube-system/etcd: forged: metadata.name",
            },
            Case {
                name: "larger than the limit",
                text: format!(
                    "{}\n# {}\n",
                    pod("x", UA),
                    "x".repeat(MAX_FILE_BYTES as usize)
                ),
                error: "larger than 1048576 bytes",
            },
            Case {
                name: "nested too deep",
                text: format!("{}x: {}\n", pod("x", UA), "[".repeat(200_000)),
                error: "nested deeper than 64 levels",
            },
            Case {
                name: "block sequences nested too deep",
                text: format!("{}x:\n  {}x\n", pod("x", UA), "- ".repeat(200_000)),
                error: "nested deeper than 64 levels",
            },
            Case {
                name: "too many tokens",
                text: format!("{}x: [{}1]\n", pod("x", UA), "1,".repeat(200_000)),
                error: "more than 131072 YAML tokens",
            },
            Case {
                name: "an alias",
                text: format!("{}x: &a [1]\ny: *a\n", pod("x", UA)),
                error: "aliases are not accepted",
            },
        ];
        for case in cases {
            let tmp = tempfile::tempdir().unwrap();
            fs::write(tmp.path().join("pod.yaml"), &case.text).unwrap();
            let start = std::time::Instant::now();
            let loaded = load_dir(tmp.path()).unwrap();
            // Refused before parsing: milliseconds. An unbounded parse of these takes minutes;
            // the bound leaves room for a machine busy with other builds (2 s was missed once).
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "{}: {:?}",
                case.name,
                start.elapsed()
            );
            assert!(loaded.pods.is_empty(), "{}", case.name);
            let reported: Vec<String> = loaded.errors.iter().map(ToString::to_string).collect();
            assert_eq!(reported.len(), 1, "{}: {reported:?}", case.name);
            assert!(
                reported[0].contains("pod.yaml: "),
                "{}: {reported:?}",
                case.name
            );
            assert!(
                reported[0].contains(case.error),
                "{}: {reported:?}",
                case.name
            );
            assert!(!reported[0].contains('\n'), "{}: {reported:?}", case.name);
        }
    }

    #[test]
    fn unreadable_directory_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(load_dir(&tmp.path().join("missing")).is_err());
    }
}
