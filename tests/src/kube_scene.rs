//! The `--kube` scene of the end-to-end tests: an [`AgentScene`] whose pods come from a MOCK
//! Kubernetes API server instead of its manifests directory.
use std::{path::PathBuf, sync::Arc};

use serde_json::Value;

use crate::{AgentScene, TempDir, TestPod, kube_api::MockKubeApi, uid_for};

/// Pods on the mock and in real cgroups: `hog` over its request, `calm` within its own;
/// the two together pass the scene's threshold once allocated.
pub struct KubeScene {
    pub scene: AgentScene,
    pub api: Arc<MockKubeApi>,
    pub kubeconfig: PathBuf,
    pub hog: TestPod,
    pub calm: TestPod,
    _files: TempDir,
}

impl KubeScene {
    /// The node the mock's pods are bound to.
    pub const NODE: &str = "node-a";

    pub fn new(name: &str) -> Self {
        Self::on(AgentScene::new(name, "10s", "30s"), name)
    }

    /// The pods on `scene`, which is named `name`.
    pub fn on(scene: AgentScene, name: &str) -> Self {
        let api = Arc::new(MockKubeApi::start(Self::NODE));
        let hog = TestPod::new("hog").request_mib(20);
        let calm = TestPod::new("calm").request_mib(300);
        api.apply_pod(&hog);
        api.apply_pod(&calm);
        let (files, kubeconfig) = api.kubeconfig_in(&format!("{name}-kubeconfig"));
        Self {
            scene,
            api,
            kubeconfig,
            hog,
            calm,
            _files: files,
        }
    }

    /// Eviction requests so far.
    pub fn posts(&self) -> usize {
        self.api
            .requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path().ends_with("/eviction"))
            .count()
    }

    /// Asserts that `decision` is `action` on the scene's `hog`.
    pub fn assert_decides_on_hog(decision: &Value, action: &str) {
        assert_eq!(decision["action"], action, "{decision:#}");
        assert_eq!(decision["name"], "hog", "{decision:#}");
        assert_eq!(decision["uid"], uid_for("hog"), "{decision:#}");
        assert_eq!(decision["namespace"], "default", "{decision:#}");
    }
}
