//! The image archive `cargo xtask image` writes is one OCI index of linux/amd64 and
//! linux/arm64: each image holds a static `monitor` for its architecture as `/monitor`, its
//! entrypoint. The arm64 binary runs (under qemu's user-mode emulation) and ranks the real
//! cluster captures exactly as the amd64 binary of the same index does.
//!
//! Needs the archive (`target/image/monitor.oci.tar` or MONITOR_IMAGE), tar and
//! `qemu-aarch64-static` (Debian's qemu-user-static; `cargo xtask test` installs it); without
//! them the test fails unless skipping for `image` is allowed.
use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use serde_json::Value;
use test_harness::elf;
use tests::{Reason, TempDir, cannot_run, image_archive};

const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const QEMU_AARCH64: &str = "qemu-aarch64-static";

/// The archive unpacked into a directory of its own.
struct Layout {
    dir: TempDir,
}

impl Layout {
    fn unpack(archive: &Path) -> Self {
        let dir = TempDir::new("image-index");
        tar(archive, &dir.join("."));
        Self { dir }
    }

    fn blob(&self, descriptor: &Value) -> PathBuf {
        let digest = descriptor["digest"].as_str().expect("descriptor digest");
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        self.dir.join("blobs/sha256").join(hex)
    }

    fn json(&self, descriptor: &Value) -> Value {
        let path = self.blob(descriptor);
        serde_json::from_slice(&fs::read(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// Each platform's (`os/architecture`) image manifest, through the index the archive's
    /// own `index.json` names.
    fn platforms(&self) -> BTreeMap<String, Value> {
        let top: Value =
            serde_json::from_slice(&fs::read(self.dir.join("index.json")).unwrap()).unwrap();
        let entries = top["manifests"]
            .as_array()
            .expect("index.json lists manifests");
        assert_eq!(entries.len(), 1, "one reference: {top}");
        assert_eq!(entries[0]["mediaType"], INDEX, "it names an index: {top}");
        let index = self.json(&entries[0]);
        index["manifests"]
            .as_array()
            .expect("the index lists manifests")
            .iter()
            .map(|entry| {
                assert_eq!(entry["mediaType"], MANIFEST, "{entry}");
                let platform = &entry["platform"];
                let name = format!(
                    "{}/{}",
                    platform["os"].as_str().unwrap(),
                    platform["architecture"].as_str().unwrap()
                );
                (name, self.json(entry))
            })
            .collect()
    }

    /// The one layer of `manifest` unpacked; returns the path of `/monitor` in it.
    fn monitor_of(&self, manifest: &Value, platform: &str) -> PathBuf {
        let layers = manifest["layers"].as_array().expect("layers");
        assert_eq!(
            layers.len(),
            1,
            "{platform}: one layer, the binary: {manifest}"
        );
        let root = self
            .dir
            .join(&format!("root-{}", platform.replace('/', "-")));
        fs::create_dir_all(&root).unwrap();
        tar(&self.blob(&layers[0]), &root);
        let files: Vec<_> = fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(files, ["monitor"], "{platform}: /monitor alone");
        root.join("monitor")
    }
}

/// Unpacks a tar file (gzip-compressed or not: GNU tar tells) into `dir`.
fn tar(archive: &Path, dir: &Path) {
    let out = Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(dir)
        .output()
        .expect("running tar");
    assert!(
        out.status.success(),
        "tar -xf {}: {}",
        archive.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn corpus(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../monitor/tests/fixtures/corpus")
        .join(name)
        .display()
        .to_string()
}

/// `monitor rank` of a real capture, as JSON, by `monitor` run through `runner` (if any).
fn rank(runner: Option<&str>, monitor: &Path, pods: &str, summary: &str) -> Output {
    let mut cmd = match runner {
        Some(runner) => {
            let mut cmd = Command::new(runner);
            cmd.arg(monitor);
            cmd
        }
        None => Command::new(monitor),
    };
    cmd.args(["rank", "--output", "json", "--pods", &corpus(pods)])
        .args(["--summary", &corpus(summary)])
        .output()
        .expect("running monitor rank")
}

#[test]
fn the_index_holds_a_static_monitor_for_amd64_and_arm64_and_both_rank_alike() {
    let archive = match image_archive() {
        Ok(archive) => archive,
        Err(why) => return cannot_run(Reason::Image, &why),
    };
    if Command::new(QEMU_AARCH64)
        .arg("--version")
        .output()
        .is_err()
    {
        return cannot_run(
            Reason::Image,
            "qemu-aarch64-static is not installed (Debian's qemu-user-static; cargo xtask test \
             installs it)",
        );
    }
    let layout = Layout::unpack(&archive);
    let platforms = layout.platforms();
    assert_eq!(
        platforms.keys().collect::<Vec<_>>(),
        ["linux/amd64", "linux/arm64"]
    );

    let mut binaries = BTreeMap::new();
    for (platform, manifest) in &platforms {
        let config = layout.json(&manifest["config"]);
        let arch = platform.strip_prefix("linux/").unwrap();
        assert_eq!(config["architecture"], arch, "{platform}: {config}");
        assert_eq!(config["os"], "linux", "{platform}");
        assert_eq!(
            config["config"]["Entrypoint"],
            serde_json::json!(["/monitor"]),
            "{platform}"
        );
        let monitor = layout.monitor_of(manifest, platform);
        let shape = elf::shape(&fs::read(&monitor).unwrap()).expect("an ELF executable");
        let want = if arch == "amd64" {
            elf::X86_64
        } else {
            elf::AARCH64
        };
        assert_eq!(shape.machine, want, "{platform}: ELF machine");
        assert!(!shape.interpreter, "{platform}: statically linked");
        binaries.insert(arch.to_string(), monitor);
    }

    // Every capture of the corpus with a summary: the same order, the same figures, byte
    // for byte, from the arm64 binary (emulated) as from the amd64 one.
    for (pods, summary) in [
        ("nri-1.16-pods.yaml", "nri-1.16-summary.json"),
        ("nri-1.28-pods.yaml", "nri-1.28-summary.json"),
        ("nri-1.35-pods.yaml", "nri-1.35-summary.json"),
    ] {
        let amd64 = rank(None, &binaries["amd64"], pods, summary);
        let arm64 = rank(Some(QEMU_AARCH64), &binaries["arm64"], pods, summary);
        for (arch, out) in [("amd64", &amd64), ("arm64", &arm64)] {
            assert!(
                out.status.success(),
                "{arch} {pods}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let ranked: Value = serde_json::from_slice(&amd64.stdout).unwrap();
        assert!(
            ranked["pods"].as_array().is_some_and(|p| p.len() > 5),
            "{pods}: pods ranked: {ranked}"
        );
        assert_eq!(
            String::from_utf8_lossy(&arm64.stdout),
            String::from_utf8_lossy(&amd64.stdout),
            "{pods}: arm64 ranks as amd64"
        );
    }
}
