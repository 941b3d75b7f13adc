//! SIGHUP, as operators expect of a daemon: the configuration file is read again and the
//! pods listed anew. A configuration that does not load is logged and the one in force kept,
//! so a typo never leaves the node without thresholds.
use super::components::Agent;

impl Agent {
    /// Reads `--config` again and puts it in force; keeps the old one when it does not load.
    pub(super) fn reload_config(&mut self) {
        match crate::config_file::load(self.args.config.as_deref()) {
            Ok((config, _)) => {
                tracing::info!(
                    "SIGHUP: configuration read again, thresholds {}",
                    config.thresholds_line()
                );
                self.core.reconfigure(config);
                self.stat_programs.forget_mark();
                self.move_stat_gate();
                self.evaluate(None);
            }
            Err(e) => tracing::error!(
                "SIGHUP: the configuration was not read again ({e:#}); the one in force stays"
            ),
        }
    }
}
