//! Pods from a directory of manifests, the way a node without an API server connection learns
//! what runs on it.
//!
//! Every `.yaml`, `.yml` or `.json` file directly in the directory is read; other files,
//! subdirectories and hidden files (editor swap files, `..data` links) are ignored. A file
//! may hold several YAML documents, each a `Pod`, a `PodList` or a `kind: List` of pods. A
//! file that does not parse is skipped whole and a pod without `metadata.uid` (the key every
//! stat is matched by) is skipped alone; both are reported so the rest still loads.
use std::{
    collections::HashSet,
    fs, io,
    path::{Path, PathBuf},
};

use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize as _;
use serde_json::Value;

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
    /// A pod has no `metadata.uid`.
    #[error("{file}: pod {pod}: metadata.uid is required")]
    MissingUid { file: PathBuf, pod: String },
    /// A pod's uid was already loaded from another manifest; the first one is kept.
    #[error("{file}: pod {pod}: uid {uid} is already used by another pod")]
    DuplicateUid {
        file: PathBuf,
        pod: String,
        uid: String,
    },
}

/// What one read of the directory produced.
#[derive(Debug, Default)]
pub struct LoadedPods {
    /// Pods in file-name order, then in order within each file.
    pub pods: Vec<Pod>,
    /// Files and pods that were skipped, with the reason.
    pub errors: Vec<ManifestError>,
}

/// Reads every manifest in `dir`. Fails only when the directory itself cannot be listed.
pub fn load_dir(dir: &Path) -> io::Result<LoadedPods> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| is_manifest(path) && path.is_file())
        .collect();
    files.sort();
    let mut loaded = LoadedPods::default();
    let mut uids = HashSet::new();
    for file in files {
        let pods = match fs::read_to_string(&file) {
            Ok(text) => parse_file(&file, &text),
            Err(source) => Err(ManifestError::Read {
                file: file.clone(),
                source,
            }),
        };
        let pods = match pods {
            Ok(pods) => pods,
            Err(error) => {
                loaded.errors.push(error);
                continue;
            }
        };
        for pod in pods {
            let label = pod_label(&pod);
            match pod.metadata.uid.clone().filter(|uid| !uid.is_empty()) {
                None => loaded.errors.push(ManifestError::MissingUid {
                    file: file.clone(),
                    pod: label,
                }),
                Some(uid) if !uids.insert(uid.clone()) => {
                    loaded.errors.push(ManifestError::DuplicateUid {
                        file: file.clone(),
                        pod: label,
                        uid,
                    })
                }
                Some(_) => loaded.pods.push(pod),
            }
        }
    }
    Ok(loaded)
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
    let mut pods = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let document_number = index + 1;
        let syntax = |message: String| ManifestError::Syntax {
            file: file.to_path_buf(),
            document: document_number,
            message,
        };
        let value = Value::deserialize(document).map_err(|e| syntax(e.to_string()))?;
        let unsupported = |kind: &str| ManifestError::UnsupportedKind {
            file: file.to_path_buf(),
            document: document_number,
            kind: kind.to_string(),
        };
        let kind = kind_of(&value).map(str::to_owned);
        match kind.as_deref() {
            // Empty documents, such as after a trailing `---`.
            _ if value.is_null() => {}
            Some("Pod") => pods.push(to_pod(value).map_err(syntax)?),
            Some(list @ ("PodList" | "List")) => {
                let Value::Object(mut object) = value else {
                    unreachable!("kind_of needs an object")
                };
                let items = match object.remove("items") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(items)) => items,
                    Some(_) => return Err(syntax("items is not a list".into())),
                };
                for item in items {
                    // A PodList's items may leave out their kind; a generic List's may not.
                    match (list, kind_of(&item)) {
                        (_, Some("Pod")) | ("PodList", None) => {
                            pods.push(to_pod(item).map_err(syntax)?)
                        }
                        (_, kind) => return Err(unsupported(kind.unwrap_or("<none>"))),
                    }
                }
            }
            kind => return Err(unsupported(kind.unwrap_or("<none>"))),
        }
    }
    Ok(pods)
}

fn kind_of(value: &Value) -> Option<&str> {
    value.get("kind")?.as_str()
}

fn to_pod(value: Value) -> Result<Pod, String> {
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// `namespace/name` for messages, as far as the pod has them.
fn pod_label(pod: &Pod) -> String {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or("<unnamed>");
    format!("{namespace}/{name}")
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

    #[test]
    fn directory_skips_what_is_broken_and_loads_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| fs::write(tmp.path().join(name), text).unwrap();
        write("a.yaml", "kind: Pod\nmetadata: {name: a, uid: ua}\n");
        write(
            "b.yml",
            "kind: Pod\nmetadata: {name: no-uid}\n---\nkind: Pod\nmetadata: {uid: ub}\n",
        );
        write("c.json", "{ not json");
        write(
            "d.json",
            r#"{"kind": "Pod", "metadata": {"name": "dup", "uid": "ua"}}"#,
        );
        write("notes.txt", "kind: Pod\nmetadata: {uid: ignored}\n");
        write(".a.yaml.swp", "garbage");
        fs::create_dir(tmp.path().join("sub.yaml")).unwrap();

        let loaded = load_dir(tmp.path()).unwrap();
        assert_eq!(uids(&loaded.pods), ["ua", "ub"]);
        let mut reported: Vec<String> = loaded.errors.iter().map(ToString::to_string).collect();
        reported.sort();
        assert_eq!(reported.len(), 3, "{reported:?}");
        assert!(
            reported[0].contains("b.yml: pod default/no-uid: metadata.uid is required"),
            "{reported:?}"
        );
        assert!(reported[1].contains("c.json: document 1:"), "{reported:?}");
        assert!(
            reported[2].contains("d.json: pod default/dup: uid ua is already used"),
            "{reported:?}"
        );
    }

    #[test]
    fn unreadable_directory_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(load_dir(&tmp.path().join("missing")).is_err());
    }
}
