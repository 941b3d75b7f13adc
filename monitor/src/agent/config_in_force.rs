//! The configuration in force, since when, and how the last change of it went: the state of
//! the one way it changes (`reload.rs`), apart from the steps, so the Agent that holds it
//! stands above both.
use crate::{
    config_file::{ConfigSources, LoadedConfig},
    engine::config_origin::{Setting, effective_settings},
    metrics::{exposition::ConfigMetrics, snapshot::DebugConfig},
};

/// What the configuration in force is, since when, and how the last change of it went.
#[derive(Debug, Clone)]
pub(crate) struct ConfigInForce {
    pub(crate) sources: ConfigSources,
    pub(crate) settings: Vec<Setting>,
    /// The files' checksum (`config_file::LoadedConfig::checksum`).
    pub(crate) checksum: String,
    /// When it was put in force.
    pub(crate) since: jiff::Timestamp,
    /// Why the files' newest content was refused, while it is.
    pub(crate) refused: Option<String>,
    /// Changes refused since start.
    pub(crate) refusals: u64,
}

impl ConfigInForce {
    /// The configuration read at start, in force from now.
    pub(crate) fn new(sources: ConfigSources, loaded: &LoadedConfig) -> Self {
        Self {
            sources,
            settings: effective_settings(&loaded.config, &loaded.written),
            checksum: loaded.checksum.clone(),
            since: jiff::Timestamp::now(),
            refused: None,
            refusals: 0,
        }
    }

    /// `monitor_config_*`.
    pub(crate) fn metrics(&self) -> ConfigMetrics {
        let path = |p: &Option<std::path::PathBuf>| {
            p.as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        ConfigMetrics {
            source: match (&self.sources.kubelet, &self.sources.overlay) {
                (Some(_), Some(_)) => "kubelet_config+config",
                (Some(_), None) => "kubelet_config",
                (None, Some(_)) => "config",
                (None, None) => "defaults",
            },
            kubelet_config: path(&self.sources.kubelet),
            config: path(&self.sources.overlay),
            checksum: self.checksum.clone(),
            loaded_at_seconds: self.since.as_millisecond() as f64 / 1000.0,
            reload_failures: self.refusals,
            last_reload_successful: self.refused.is_none(),
        }
    }

    /// `/debug/config`.
    pub(crate) fn view(&self) -> DebugConfig {
        let path = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| p.display().to_string());
        DebugConfig {
            source: self.sources.describe(),
            kubelet_config: path(&self.sources.kubelet),
            config: path(&self.sources.overlay),
            checksum: self.checksum.clone(),
            since: self.since.to_string(),
            refused: self.refused.clone(),
            refusals: self.refusals,
            settings: self.settings.clone(),
        }
    }
}
