//! The configuration `deploy/` ships reads as the kubelet decodes its file, and adds no
//! threshold of its own: the agent's thresholds are the node kubelet's.
use monitor::engine::eviction_config::{ConfigForm, EvictionConfig};

#[test]
fn the_configmaps_configuration_decodes_as_a_kubelet_configuration_without_thresholds() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/base/configmap.yaml");
    let text = std::fs::read_to_string(path).expect("deploy/base/configmap.yaml");
    let map: serde_norway::Value = serde_norway::from_str(&text).expect("YAML");
    let config = map["data"]["config.yaml"]
        .as_str()
        .expect("data.config.yaml");
    let (config, form) = EvictionConfig::decode(config).expect("the kubelet's rules");
    assert_eq!(form, ConfigForm::Document);
    let thresholds = |config: &EvictionConfig| -> Vec<String> {
        config
            .thresholds
            .iter()
            .map(|t| format!("{}<{}", t.signal, t.value))
            .collect()
    };
    // Alone it is the kubelet's defaults: it sets no threshold the kubelet does not have.
    let (defaults, _) = EvictionConfig::decode(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
    )
    .expect("the kubelet's defaults");
    assert_eq!(thresholds(&config), thresholds(&defaults));
    assert!(
        !thresholds(&config).iter().any(|t| t.starts_with("pid.")),
        "the kubelet's defaults have no pid.available threshold"
    );
}
