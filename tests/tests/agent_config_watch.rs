//! The configuration followed as it changes (root only): the node's kubelet configuration
//! and, laid over it, a ConfigMap volume laid out and updated exactly as the kubelet's atomic
//! writer does it (`config.yaml -> ..data/config.yaml`, `..data -> ..<timestamp>`, an update a
//! new timestamped directory and a `..data_tmp` link renamed over `..data`). Each update is
//! put in force within a couple of seconds and logged with what changed, and acted on; an
//! invalid one is refused with the reason and the one in force kept; `/metrics`, and
//! `monitor config --agent`, say which configuration is in force and since when.
use std::{
    fs,
    os::unix::fs::symlink,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use tests::{
    AgentScene, TempDir, TestPod, http_get, metric, metrics_addr, monitor_bin, running_as_root,
    scene_decisions::{KILL, alive, assert_no_decision},
};

/// The brief's bound: a swap is in force within a couple of seconds.
const IN_FORCE_WITHIN: Duration = Duration::from_secs(3);

const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

/// A ConfigMap volume as the kubelet's atomic writer keeps it.
struct AtomicVolume {
    dir: TempDir,
    generation: u32,
}

impl AtomicVolume {
    fn new(name: &str, text: &str) -> Self {
        let mut volume = Self {
            dir: TempDir::new(name),
            generation: 0,
        };
        volume.update(text);
        symlink("..data/config.yaml", volume.key()).unwrap();
        volume
    }

    /// The key's path, as the agent is given it.
    fn key(&self) -> PathBuf {
        self.dir.join("config.yaml")
    }

    /// The writer's update: the payload in a new timestamped directory, a `..data_tmp` link
    /// to it renamed over `..data`, the old directory removed.
    fn update(&mut self, text: &str) {
        let old = self.stamp();
        self.generation += 1;
        let data = self.dir.join(&self.stamp());
        fs::create_dir(&data).unwrap();
        fs::write(data.join("config.yaml"), text).unwrap();
        let tmp = self.dir.join("..data_tmp");
        symlink(self.stamp(), &tmp).unwrap();
        fs::rename(&tmp, self.dir.join("..data")).unwrap();
        if self.generation > 1 {
            fs::remove_dir_all(self.dir.join(&old)).unwrap();
        }
    }

    fn stamp(&self) -> String {
        format!(
            "..2026_12_06_10_{:02}_00.{}",
            self.generation, self.generation
        )
    }
}

fn overlay(fields: &str) -> String {
    format!("{HEAD}monitor:\n  evictionInterval: 1s\n  podCleanupTimeout: 5s\n{fields}")
}

fn hard_threshold_bytes(metrics: &str) -> Option<u64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(
            "monitor_eviction_threshold_bytes{eviction_signal=\"allocatableMemory.available\",\
             threshold_kind=\"hard\"} ",
        )?
        .parse()
        .ok()
    })
}

/// When the configuration in force was put in force (seconds since the epoch, fractional).
fn loaded_at(metrics: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("monitor_config_loaded_timestamp_seconds ")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no load time in\n{metrics}"))
}

fn monitor_config(args: &[&str]) -> String {
    let out = Command::new(monitor_bin())
        .arg("config")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_configmap_swapped_by_the_kubelets_atomic_writer_is_put_in_force_and_acted_on() {
    if !running_as_root("a_configmap_swapped_by_the_kubelets_atomic_writer") {
        return;
    }
    // The kubelet's own file: 10Mi, far below the 150Mi the hog leaves of 300Mi.
    let scene = AgentScene::with_config(
        "cfgwatch",
        "evictionHard:\n  allocatableMemory.available: 10Mi\n",
    );
    let mut volume = AtomicVolume::new("cfgwatch-volume", &overlay(""));
    let (kubelet, key) = (scene.config.display().to_string(), volume.key());
    let key = key.display().to_string();
    let mut agent = scene.start_agent(&[
        "--kubelet-config",
        &kubelet,
        "--config",
        &key,
        "--metrics-addr",
        "127.0.0.1:0",
    ]);
    let addr = metrics_addr(&agent);
    agent
        .wait_stderr(Duration::from_secs(5), |l| {
            l.contains("configuration: the kubelet's configuration") && l.contains("laid over")
        })
        .expect("the start-up log says which files are read");
    let hog = TestPod::new("hog").request_mib(20);
    let calm = TestPod::new("calm").request_mib(100);
    let calm_proc = scene.start_pod(&calm);
    let mut hog_proc = scene.start_pod(&hog);
    hog_proc.alloc(150);
    assert_no_decision(
        &agent,
        Duration::from_secs(2),
        "140Mi above the 10Mi threshold",
    );
    let loaded_before = loaded_at(&http_get(addr, "/metrics"));

    // The ConfigMap now lays 200Mi over the kubelet's 10Mi: the hog's 150Mi meets it.
    volume.update(&overlay(
        "evictionHard:\n  allocatableMemory.available: 200Mi\n",
    ));
    let swapped = Instant::now();
    let line = agent
        .wait_stderr(IN_FORCE_WITHIN, |l| l.contains("configuration changed"))
        .unwrap_or_else(|| panic!("no reload within {IN_FORCE_WITHIN:?}:\n{}", agent.stderr()));
    assert!(
        line.contains("configuration files changed")
            && line.contains("evictionHard.allocatableMemory.available 10Mi -> 200Mi"),
        "{line}"
    );
    let decision = agent.next_decision(IN_FORCE_WITHIN);
    assert!(
        swapped.elapsed() < IN_FORCE_WITHIN,
        "{:?}",
        swapped.elapsed()
    );
    assert_eq!(decision["name"], "hog", "{decision:#}");
    assert_eq!(decision["threshold"], 200 << 20, "{decision:#}");
    scene.wait_until_empty(&hog, KILL);
    assert!(alive(&calm_proc), "only the hog died");
    let metrics = http_get(addr, "/metrics");
    assert_eq!(hard_threshold_bytes(&metrics), Some(200 << 20), "{metrics}");
    assert!(loaded_at(&metrics) > loaded_before, "{metrics}");

    // An invalid update: refused with the reason, 200Mi stays in force, and said so.
    volume.update(&overlay(
        "evictionHard:\n  allocatableMemory.available: lots\n",
    ));
    let refused = agent
        .wait_stderr(IN_FORCE_WITHIN, |l| l.contains("configuration refused"))
        .unwrap_or_else(|| panic!("no refusal:\n{}", agent.stderr()));
    assert!(
        refused.contains("\"lots\"") && refused.contains("the one in force stays"),
        "{refused}"
    );
    let metrics = http_get(addr, "/metrics");
    assert_eq!(hard_threshold_bytes(&metrics), Some(200 << 20), "{metrics}");
    assert_eq!(
        metric(&metrics, "monitor_config_last_reload_successful"),
        Some(0)
    );
    assert_eq!(
        metric(&metrics, "monitor_config_reload_failures_total"),
        Some(1)
    );
    let info = metrics
        .lines()
        .find(|l| l.starts_with("monitor_config_info{"))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(
        info.contains("source=\"kubelet_config+config\"") && info.contains(&key),
        "{info}"
    );
    let shown = monitor_config(&["--agent", &addr.to_string()]);
    assert!(
        shown.contains("since ") && shown.contains("was refused") && shown.contains("\"lots\""),
        "{shown}"
    );
    assert!(
        shown.contains("evictionHard.allocatableMemory.available  200Mi  the overlay"),
        "{shown}"
    );
    agent.assert_running("after the reload");

    // A pod under the old threshold only: with 10Mi back in force it is left alone.
    volume.update(&overlay(""));
    let back = agent
        .wait_stderr(IN_FORCE_WITHIN, |l| l.contains("200Mi -> 10Mi"))
        .unwrap_or_else(|| panic!("not back to 10Mi:\n{}", agent.stderr()));
    assert!(back.contains("configuration changed"), "{back}");
    let mut second = scene.start_pod(&TestPod::new("second").request_mib(20));
    second.alloc(150);
    assert_no_decision(
        &agent,
        Duration::from_secs(3),
        "150Mi used, 10Mi in force again",
    );
    assert_eq!(
        metric(
            &http_get(addr, "/metrics"),
            "monitor_config_last_reload_successful"
        ),
        Some(1)
    );
    agent.stop();
}

/// The kubelet's file alone, the start-up log saying so; a field the kubelet does not know
/// warned about with its file and document, not refused; an edit in place followed.
#[test]
fn the_kubelets_file_is_read_said_and_followed() {
    if !running_as_root("the_kubelets_file_is_read_said_and_followed") {
        return;
    }
    let scene = AgentScene::with_config(
        "cfgkubelet",
        "evictionHardd:\n  allocatableMemory.available: 10Mi\n",
    );
    let kubelet = scene.config.display().to_string();
    let other = TempDir::new("cfgkubelet-other");
    let missing = other.join("absent.yaml").display().to_string();
    let mut agent = scene.start_agent(&["--kubelet-config", &kubelet, "--config", &missing]);
    let said = agent.stderr();
    assert!(
        said.contains(&format!(
            "the kubelet's configuration {kubelet} (--kubelet-config)"
        )),
        "{said}"
    );
    assert!(
        said.contains("unknown field \"evictionHardd\"") && said.contains("document 1"),
        "{said}"
    );
    assert!(
        said.contains("absent.yaml (--config) does not exist"),
        "{said}"
    );
    // The misspelt field left the kubelet's defaults: 100Mi.
    assert!(said.contains("allocatableMemory.available<100Mi"), "{said}");

    fs::write(
        &scene.config,
        format!("{HEAD}evictionHard:\n  allocatableMemory.available: 50Mi\n"),
    )
    .unwrap();
    let changed = agent
        .wait_stderr(IN_FORCE_WITHIN, |l| l.contains("configuration changed"))
        .unwrap_or_else(|| panic!("no reload:\n{}", agent.stderr()));
    assert!(
        changed.contains("evictionHard.allocatableMemory.available 100Mi -> 50Mi"),
        "{changed}"
    );
    // The overlay appearing later is read too.
    fs::write(other.join("absent.yaml"), overlay("")).unwrap();
    agent
        .wait_stderr(IN_FORCE_WITHIN, |l| {
            l.contains("monitor.evictionInterval 10s -> 1s")
        })
        .unwrap_or_else(|| panic!("the overlay that appeared is not read:\n{}", agent.stderr()));
    agent.assert_running("after the reload");
    agent.stop();
}

/// `monitor config` reads the files as the agent does: which and why, the overlay's settings
/// named, the disk thresholds marked as not acted on, unknown fields warned about.
#[test]
fn monitor_config_says_which_files_and_what_is_not_acted_on() {
    let dir = TempDir::new("cfgcli");
    let write = |name: &str, text: String| -> String {
        let path: PathBuf = dir.join(name);
        fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let kubelet = write(
        "kubelet.yaml",
        format!("{HEAD}maxPods: 110\nevictionHardd: {{}}\n"),
    );
    let overlay = write(
        "overlay.yaml",
        overlay("evictionHard:\n  memory.available: 300Mi\n"),
    );
    let shown = monitor_config(&["--kubelet-config", &kubelet, "--config", &overlay]);
    let line = |name: &str| {
        shown
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in\n{shown}"))
            .to_string()
    };
    assert!(
        shown.starts_with("configuration: the kubelet's configuration"),
        "{shown}"
    );
    assert!(
        shown.contains("laid over it") && shown.contains("sha256:"),
        "{shown}"
    );
    assert!(
        shown.contains("warning: ") && shown.contains("\"evictionHardd\""),
        "{shown}"
    );
    assert!(
        line("evictionHard.memory.available").contains("the overlay"),
        "{shown}"
    );
    let nodefs = line("evictionHard.nodefs.available");
    assert!(
        nodefs.contains("kubelet default")
            && nodefs.contains("not acted on: ")
            && nodefs.contains("the kubelet enforces the disk signals"),
        "{nodefs}"
    );
    assert!(
        !line("evictionHard.memory.available").contains("not acted on"),
        "{shown}"
    );
    assert!(Path::new(&kubelet).exists());
}
