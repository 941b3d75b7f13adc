//! The configuration in force, and its one way to change: SIGHUP (as operators expect of a
//! daemon) and a change of its files (`config_watch`) both come here. A change is logged with
//! each setting's old and new value; a configuration that does not load is refused, logged
//! with the reason, counted, and the one in force kept, so a typo never leaves the node
//! without thresholds.
use std::fmt;

use super::components::Agent;
use crate::{
    config_file::{ConfigSources, LoadedConfig, load},
    engine::config_origin::{Setting, changes, effective_settings},
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
}

impl ConfigInForce {
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

/// What asked for the configuration to be read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trigger {
    Sighup,
    FilesChanged,
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Trigger::Sighup => "SIGHUP",
            Trigger::FilesChanged => "configuration files changed",
        })
    }
}

impl Agent {
    /// SIGHUP: reads the configuration again and puts it in force.
    pub(super) fn reload_config(&mut self) {
        let loaded = load(&self.config.sources);
        self.apply_config(Trigger::Sighup, loaded);
    }

    /// Puts a configuration read again in force, saying what changed; keeps the one in
    /// force when it did not load.
    pub(super) fn apply_config(&mut self, trigger: Trigger, loaded: anyhow::Result<LoadedConfig>) {
        let loaded = match loaded {
            Ok(loaded) => loaded,
            Err(e) => {
                self.config.refusals += 1;
                let reason = format!("{e:#}");
                tracing::error!(
                    "{trigger}: configuration refused: {reason}; the one in force stays ({}, in \
                     force since {})",
                    self.config.checksum,
                    self.config.since
                );
                self.config.refused = Some(reason);
                self.update_metrics(None, None);
                return;
            }
        };
        for note in &loaded.notes {
            tracing::warn!("{note}");
        }
        let settings = effective_settings(&loaded.config, &loaded.written);
        let changed = changes(&self.config.settings, &settings);
        let was_refused = self.config.refused.take().is_some();
        if changed.is_empty() {
            let same = loaded.checksum == self.config.checksum;
            if trigger == Trigger::FilesChanged && same {
                tracing::debug!("{trigger}: the same configuration ({})", loaded.checksum);
            } else {
                tracing::info!(
                    "{trigger}: configuration read again ({}): no setting changed{}",
                    loaded.checksum,
                    if was_refused {
                        "; the files give the configuration in force again"
                    } else {
                        ""
                    }
                );
            }
            if !same {
                self.config.checksum = loaded.checksum;
                self.config.since = jiff::Timestamp::now();
            }
            self.update_metrics(None, None);
            return;
        }
        let said: Vec<String> = changed.iter().map(ToString::to_string).collect();
        tracing::info!(
            "{trigger}: configuration changed ({} -> {}): {}; thresholds {}",
            self.config.checksum,
            loaded.checksum,
            said.join(", "),
            loaded.config.thresholds_line()
        );
        self.config.settings = settings;
        self.config.checksum = loaded.checksum;
        self.config.since = jiff::Timestamp::now();
        self.core.reconfigure(loaded.config);
        self.stat_programs.forget_mark();
        self.move_stat_gate();
        self.evaluate(None);
    }
}
