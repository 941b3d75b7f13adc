//! The one way the configuration in force (`config_in_force.rs`) changes: SIGHUP (as
//! operators expect of a daemon) and a change of its files (`config_watch`) both come here. A change is logged with
//! each setting's old and new value; a configuration that does not load is refused, logged
//! with the reason, counted, and the one in force kept, so a typo never leaves the node
//! without thresholds.
use std::fmt;

use super::components::Agent;
use crate::{
    config_file::{LoadedConfig, load},
    engine::config_origin::{changes, effective_settings},
};

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
