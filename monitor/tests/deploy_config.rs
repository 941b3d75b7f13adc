//! The configuration `deploy/` ships reads as the kubelet decodes its file.
use monitor::engine::eviction_config::{ConfigForm, EvictionConfig};

#[test]
fn the_configmaps_configuration_decodes_as_a_kubelet_configuration() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/base/configmap.yaml");
    let text = std::fs::read_to_string(path).expect("deploy/base/configmap.yaml");
    let map: serde_norway::Value = serde_norway::from_str(&text).expect("YAML");
    let config = map["data"]["config.yaml"]
        .as_str()
        .expect("data.config.yaml");
    let (config, form) = EvictionConfig::decode(config).expect("the kubelet's rules");
    assert_eq!(form, ConfigForm::Document);
    let hard: Vec<String> = config
        .thresholds
        .iter()
        .map(|t| format!("{}<{}", t.signal, t.value))
        .collect();
    assert_eq!(
        hard,
        [
            "memory.available<100Mi",
            "allocatableMemory.available<100Mi",
            "pid.available<10%"
        ]
    );
}
