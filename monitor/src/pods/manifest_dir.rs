//! What `--pods` must name, checked before it is watched or read: a first run pointed at a
//! directory that is not there is told what belongs in it, not only that it is missing.
use std::{fs, io, path::Path};

/// What a manifests directory holds, and the other way to name the node's pods.
pub const MANIFEST_DIR_HELP: &str = "--pods names a directory of this node's pod manifests: \
    .yaml, .yml or .json files, each a Pod, a PodList or a List of pods as the API server \
    returns them, every pod with its metadata.uid (e.g. `kubectl get pods -A \
    --field-selector spec.nodeName=NODE -o yaml > DIR/pods.yaml`, or `-o json`); the agent \
    reads it again whenever a file changes. Without one, `--kube --node-name NODE` lists and \
    watches the node's pods through the API server";

/// Why `--pods` names no directory the agent can read.
#[derive(Debug, thiserror::Error)]
#[error("{dir}: {why}. {MANIFEST_DIR_HELP}")]
pub struct NoManifestDir {
    dir: String,
    why: String,
}

/// Whether `dir` is a directory that can be listed, saying what it must hold when not.
pub fn check(dir: &Path) -> Result<(), NoManifestDir> {
    let why = match fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => "no such directory".to_string(),
        Err(e) => e.to_string(),
        Ok(meta) if !meta.is_dir() => "not a directory".to_string(),
        Ok(_) => match fs::read_dir(dir) {
            Ok(_) => return Ok(()),
            Err(e) => format!("cannot be listed: {e}"),
        },
    };
    Err(NoManifestDir {
        dir: dir.display().to_string(),
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_that_is_no_directory_is_told_what_belongs_there() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("pods.yaml");
        fs::write(&file, "kind: Pod\n").unwrap();
        let missing = tmp.path().join("pods");
        for (name, path, why) in [
            ("missing", &missing, "no such directory"),
            ("a file", &file, "not a directory"),
        ] {
            let error = check(path).unwrap_err().to_string();
            for part in [
                format!("{}: {why}. --pods names a directory", path.display()),
                "a Pod, a PodList or a List".into(),
                "kubectl get pods -A --field-selector spec.nodeName=NODE -o yaml".into(),
                "--kube --node-name NODE".into(),
            ] {
                assert!(error.contains(&part), "{name}: {part:?} in {error}");
            }
        }
        assert!(
            check(tmp.path()).is_ok(),
            "an empty directory is a directory"
        );
    }
}
