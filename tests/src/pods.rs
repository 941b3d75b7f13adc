//! Pods as a test describes them, written as manifests the agent reads.
use std::{
    fs,
    path::{Path, PathBuf},
};

use crate::Qos;

/// A pod for a manifests directory: burstable with a memory request, best-effort without.
#[derive(Clone, Debug)]
pub struct TestPod {
    pub name: String,
    pub uid: String,
    pub memory_request_mib: Option<u64>,
    pub priority: Option<i32>,
    /// Carries `kubernetes.io/config.source: file`, like a static pod.
    pub static_pod: bool,
}

impl TestPod {
    /// A pod named `name` with a uid of the API server's shape (a UUID) made from the name.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            uid: uid_for(name),
            memory_request_mib: None,
            priority: None,
            static_pod: false,
        }
    }

    pub fn request_mib(mut self, mib: u64) -> Self {
        self.memory_request_mib = Some(mib);
        self
    }

    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    pub fn static_pod(mut self) -> Self {
        self.static_pod = true;
        self
    }

    pub fn qos(&self) -> Qos {
        if self.memory_request_mib.is_some() {
            Qos::Burstable
        } else {
            Qos::BestEffort
        }
    }

    /// The pod as a YAML manifest.
    pub fn manifest(&self) -> String {
        let mut text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {}\n  namespace: default\n  uid: {}\n",
            self.name, self.uid
        );
        if self.static_pod {
            text.push_str("  annotations:\n    kubernetes.io/config.source: file\n");
        }
        text.push_str("spec:\n");
        if let Some(priority) = self.priority {
            text.push_str(&format!("  priority: {priority}\n"));
        }
        text.push_str("  containers:\n  - name: main\n    image: registry.k8s.io/pause:3.9\n");
        if let Some(mib) = self.memory_request_mib {
            text.push_str(&format!(
                "    resources:\n      requests:\n        memory: {mib}Mi\n"
            ));
        }
        text
    }

    /// Writes the manifest as `<name>.yaml` into `dir` and returns its path.
    pub fn write_to(&self, dir: &Path) -> PathBuf {
        let path = dir.join(format!("{}.yaml", self.name));
        fs::write(&path, self.manifest())
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }
}

/// A UUID made from `name` (FNV-1a), the same for the same name: the agent accepts only
/// uids of the API server's shape.
pub fn uid_for(name: &str) -> String {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        hash >> 32,
        (hash >> 16) & 0xffff,
        hash & 0xfff,
        (hash >> 52) & 0xfff,
        hash & 0xffff_ffff_ffff
    )
}
