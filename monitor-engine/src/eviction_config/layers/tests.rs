use std::time::Duration;

use super::*;
use crate::config_origin::{Origin, effective_settings};
use crate::eviction_config::tests::summary;

const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn layer(fields: &str) -> ConfigLayer {
    ConfigLayer::parse(&format!("{HEAD}{fields}")).expect(fields)
}

fn origin_of(config: &EvictionConfig, written: &Written, name: &str) -> Option<(String, Origin)> {
    effective_settings(config, written)
        .into_iter()
        .find(|s| s.name == name)
        .map(|s| (s.value, s.origin))
}

/// The overlay moves what it names and keeps the kubelet's other settings, as a kubelet
/// drop-in does; each setting says which layer it came from.
#[test]
fn an_overlay_is_laid_over_the_kubelets_configuration_as_a_drop_in() {
    let kubelet = layer(
        "evictionHard:\n  memory.available: 100Mi\n  nodefs.available: 10%\n\
         evictionMaxPodGracePeriod: 30\nmaxPods: 110\n",
    );
    let overlay =
        layer("evictionHard:\n  memory.available: 200Mi\nmonitor:\n  evictionInterval: 2s\n");
    let (config, written) = EvictionConfig::from_layers(&kubelet, Some(&overlay)).unwrap();
    assert_eq!(
        summary(&config),
        [
            "hard memory.available<200Mi",
            "hard allocatableMemory.available<200Mi",
            "hard nodefs.available<10%",
        ]
    );
    assert_eq!(config.max_pod_grace_period_seconds, 30);
    assert_eq!(config.monitor.eviction_interval, Duration::from_secs(2));
    for (name, expected) in [
        ("evictionHard.memory.available", ("200Mi", Origin::Overlay)),
        ("evictionHard.nodefs.available", ("10%", Origin::File)),
        (
            "evictionHard.allocatableMemory.available",
            ("200Mi", Origin::NodeAllocatableCopy),
        ),
        ("evictionMaxPodGracePeriod", ("30", Origin::File)),
        ("monitor.evictionInterval", ("2s", Origin::Overlay)),
        ("monitor.podCleanupTimeout", ("30s", Origin::AgentDefault)),
    ] {
        let expected = Some((expected.0.to_string(), expected.1));
        assert_eq!(origin_of(&config, &written, name), expected, "{name}");
    }

    // An overlay of the agent's settings alone changes no threshold.
    let settings_only = layer("monitor:\n  podCleanupTimeout: 1m\n");
    let (alone, _) = EvictionConfig::from_layers(&kubelet, None).unwrap();
    let (with, _) = EvictionConfig::from_layers(&kubelet, Some(&settings_only)).unwrap();
    assert_eq!(with.thresholds, alone.thresholds);
    assert_eq!(with.monitor.pod_cleanup_timeout, Duration::from_secs(60));
}

#[test]
fn the_kubelets_defaults_come_before_the_overlay_and_null_removes() {
    // No evictionHard in the kubelet's file: its defaults, then the overlay's one signal.
    let kubelet = layer("maxPods: 110\n");
    let overlay = layer("evictionHard:\n  memory.available: 300Mi\n");
    let (config, written) = EvictionConfig::from_layers(&kubelet, Some(&overlay)).unwrap();
    assert_eq!(
        summary(&config),
        [
            "hard memory.available<300Mi",
            "hard allocatableMemory.available<300Mi",
            "hard nodefs.available<10%",
            "hard nodefs.inodesFree<5%",
            "hard imagefs.available<15%",
            "hard imagefs.inodesFree<5%",
        ]
    );
    assert_eq!(
        origin_of(&config, &written, "evictionHard.imagefs.available"),
        Some(("15%".into(), Origin::KubeletDefault))
    );

    // null removes a key, as in a JSON merge patch; a list is replaced whole.
    let overlay = layer(
        "evictionHard:\n  nodefs.available: null\n  nodefs.inodesFree: null\n  \
         imagefs.available: null\n  imagefs.inodesFree: null\nenforceNodeAllocatable: []\n",
    );
    let (config, _) = EvictionConfig::from_layers(&kubelet, Some(&overlay)).unwrap();
    assert_eq!(summary(&config), ["hard memory.available<100Mi"]);
}

#[test]
fn a_configz_answer_is_a_base_never_an_overlay() {
    let configz = ConfigLayer::parse(
        r#"{"kubeletconfig":{"evictionHard":{"memory.available":"100Mi"},"enforceNodeAllocatable":["pods"]}}"#,
    )
    .unwrap();
    assert_eq!(configz.form(), ConfigForm::Configz);
    let overlay = layer(
        "evictionSoft:\n  memory.available: 1Gi\nevictionSoftGracePeriod:\n  memory.available: 1m\n",
    );
    let (config, written) = EvictionConfig::from_layers(&configz, Some(&overlay)).unwrap();
    assert_eq!(
        summary(&config),
        [
            "hard memory.available<100Mi",
            "hard allocatableMemory.available<100Mi",
            "soft 60s memory.available<1Gi",
        ]
    );
    assert_eq!(
        origin_of(&config, &written, "evictionSoft.memory.available"),
        Some(("1Gi".into(), Origin::Overlay))
    );
    assert_eq!(
        EvictionConfig::from_layers(&overlay, Some(&configz)).unwrap_err(),
        ConfigError::ConfigzOverlay
    );
}

/// A field the kubelet does not know is named with its document, not refused; the agent's
/// own section and every kubelet field pass quietly.
#[test]
fn unknown_fields_are_named_with_their_document() {
    let kubeadm = "apiVersion: kubeadm.k8s.io/v1beta3\nkind: InitConfiguration\nbogus: 1\n---\n\
                   apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                   evictionHardd:\n  memory.available: 1Gi\ncgroupDriver: systemd\n\
                   monitor:\n  evictionInterval: 5s\nfeatureGates: {}\n";
    let parsed = ConfigLayer::parse(kubeadm).unwrap();
    assert_eq!(
        parsed.unknown_fields(),
        [UnknownField {
            document: 2,
            field: "evictionHardd".into()
        }]
    );
    let said = parsed.unknown_fields()[0].to_string();
    assert!(
        said.contains("document 2") && said.contains("unknown field \"evictionHardd\""),
        "{said}"
    );
    // The misspelt field leaves the kubelet's defaults, which is why it is said.
    let (config, _) = EvictionConfig::from_layers(&parsed, None).unwrap();
    assert_eq!(config, EvictionConfig::default().with_interval(5));
    assert!(
        layer("maxPods: 110\nevictionHard: {}\n")
            .unknown_fields()
            .is_empty()
    );
    let configz = ConfigLayer::parse(r#"{"kubeletconfig":{"aFieldOfANewerKubelet":1}}"#).unwrap();
    assert!(
        configz.unknown_fields().is_empty(),
        "configz is the kubelet's own"
    );
}

impl EvictionConfig {
    fn with_interval(mut self, seconds: u64) -> EvictionConfig {
        self.monitor.eviction_interval = Duration::from_secs(seconds);
        self
    }
}

#[test]
fn a_layer_is_bounded_before_it_is_parsed() {
    let deep = format!("{HEAD}x: {}\n", "[".repeat(100_000));
    assert!(matches!(
        ConfigLayer::parse(&deep),
        Err(ConfigError::Unbounded(_))
    ));
    let large = format!("{HEAD}# {}\n", "x".repeat(MAX_CONFIG_BYTES as usize));
    assert!(matches!(
        ConfigLayer::parse(&large),
        Err(ConfigError::TooLarge)
    ));
}
