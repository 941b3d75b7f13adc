//! Reads the agent's configuration for the agent and `monitor config`: the node's kubelet
//! configuration (`--kubelet-config`), an overlay laid over it (`--config`), or the overlay's
//! file alone as the whole configuration; the kubelet's defaults without either. Each file a
//! regular file (a FIFO or a device would block the read) of at most [`MAX_CONFIG_BYTES`],
//! decoded as the kubelet decodes its own.
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use sha2::{Digest as _, Sha256};

use crate::engine::eviction_config::{
    ConfigForm, ConfigLayer, EvictionConfig, MAX_CONFIG_BYTES, Written,
};
use crate::engine::printable::printable;

/// The files the flags name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ConfigSources {
    /// `--kubelet-config`: the node's kubelet configuration (its `--config` file, or a
    /// configz answer saved to a file).
    pub kubelet: Option<PathBuf>,
    /// `--config`: laid over the kubelet's configuration when both are given; alone, the
    /// whole configuration.
    pub overlay: Option<PathBuf>,
}

impl ConfigSources {
    /// Which configuration is read, and why, in words for the log and `monitor config`.
    pub(crate) fn describe(&self) -> String {
        let shown = |path: &Path| printable(&path.display().to_string()).into_owned();
        match (&self.kubelet, &self.overlay) {
            (Some(kubelet), Some(overlay)) => format!(
                "the kubelet's configuration {} (--kubelet-config) with {} (--config) laid over \
                 it as a kubelet drop-in",
                shown(kubelet),
                shown(overlay)
            ),
            (Some(kubelet), None) => format!(
                "the kubelet's configuration {} (--kubelet-config)",
                shown(kubelet)
            ),
            (None, Some(overlay)) => format!(
                "{} (--config, the whole configuration: no --kubelet-config given)",
                shown(overlay)
            ),
            (None, None) => {
                "the kubelet's defaults (neither --kubelet-config nor --config given)".into()
            }
        }
    }

    /// The files read, in order.
    pub(crate) fn files(&self) -> impl Iterator<Item = &Path> {
        self.kubelet
            .iter()
            .chain(&self.overlay)
            .map(PathBuf::as_path)
    }
}

/// A configuration as read from its files.
#[derive(Debug, Clone)]
pub(crate) struct LoadedConfig {
    pub config: EvictionConfig,
    /// What the files wrote themselves, for where each setting came from.
    pub written: Written,
    /// `sha256:` and the first 16 hex digits of the SHA-256 of the files' bytes in the order
    /// read (`cat KUBELET OVERLAY | sha256sum`); of nothing without files.
    pub checksum: String,
    /// What to say about it: fields the kubelet does not know, a configz answer, an
    /// overlay that does not exist.
    pub notes: Vec<String>,
}

/// Reads and decodes the configuration the sources name.
pub(crate) fn load(sources: &ConfigSources) -> anyhow::Result<LoadedConfig> {
    let mut hasher = Sha256::new();
    let mut notes = Vec::new();
    let mut layer = |path: &Path| -> anyhow::Result<ConfigLayer> {
        let text = read(path).with_context(|| format!("reading {}", path.display()))?;
        hasher.update(text.as_bytes());
        let layer = ConfigLayer::parse(&text).with_context(|| format!("{}", path.display()))?;
        notes.extend(
            layer
                .unknown_fields()
                .iter()
                .map(|unknown| format!("{}: {unknown}", path.display())),
        );
        if layer.form() == ConfigForm::Configz {
            notes.push(format!(
                "{}: a configz answer, the kubelet's effective configuration: read as it is, \
                 no defaults applied",
                path.display()
            ));
        }
        Ok(layer)
    };
    let (base, overlay) = match (&sources.kubelet, &sources.overlay) {
        (Some(kubelet), Some(overlay)) => {
            let base = layer(kubelet)?;
            // A ConfigMap's key may be absent: the kubelet's configuration stands alone then.
            let overlay = match std::fs::symlink_metadata(overlay) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    notes.push(format!(
                        "{} (--config) does not exist: the kubelet's configuration alone is in \
                         force; the overlay is read when it appears",
                        overlay.display()
                    ));
                    None
                }
                _ => Some(layer(overlay)?),
            };
            (Some(base), overlay)
        }
        (Some(only), None) | (None, Some(only)) => (Some(layer(only)?), None),
        (None, None) => (None, None),
    };
    let (config, written) = match &base {
        Some(base) => EvictionConfig::from_layers(base, overlay.as_ref())
            .context("laying the overlay (--config) over the kubelet's configuration")?,
        None => (EvictionConfig::default(), Written::default()),
    };
    let digest = hasher.finalize();
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    Ok(LoadedConfig {
        config,
        written,
        checksum: format!("sha256:{hex}"),
        notes,
    })
}

fn read(path: &Path) -> anyhow::Result<String> {
    crate::file_kind::read_text(path, MAX_CONFIG_BYTES)
        .map_err(|e| anyhow::anyhow!("{e}; give the KubeletConfiguration file"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    fn file(path: PathBuf) -> ConfigSources {
        ConfigSources {
            kubelet: None,
            overlay: Some(path),
        }
    }

    #[test]
    fn only_a_regular_file_of_bounded_size_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let good = dir.join("good.yaml");
        std::fs::write(
            &good,
            format!("{HEAD}evictionHard:\n  memory.available: 200Mi\n"),
        )
        .unwrap();
        let loaded = load(&file(good.clone())).unwrap();
        assert_eq!(loaded.config.thresholds.len(), 2, "{:?}", loaded.config);
        assert_eq!(
            loaded.written.eviction_hard,
            Some(vec!["memory.available".to_string()])
        );

        let fifo = dir.join("fifo");
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let refused = format!("{:#}", load(&file(fifo)).unwrap_err());
        assert!(refused.contains("a FIFO"), "{refused}");
        let refused = format!("{:#}", load(&file(dir.to_path_buf())).unwrap_err());
        assert!(refused.contains("a directory"), "{refused}");

        let big = dir.join("big.yaml");
        std::fs::write(&big, "#".repeat(MAX_CONFIG_BYTES as usize + 1)).unwrap();
        let refused = format!("{:#}", load(&file(big)).unwrap_err());
        assert!(refused.contains("larger than"), "{refused}");
    }

    /// The checksum is `cat KUBELET OVERLAY | sha256sum`, cut; a missing overlay beside the
    /// kubelet's file is said, not an error; unknown fields are named with their file.
    #[test]
    fn layers_are_read_in_order_and_said() {
        let dir = tempfile::tempdir().unwrap();
        let (kubelet, overlay) = (dir.path().join("kubelet.yaml"), dir.path().join("o.yaml"));
        let kubelet_text = format!("{HEAD}evictionHard:\n  memory.available: 100Mi\n");
        let overlay_text = format!("{HEAD}monitor:\n  evictionInterval: 3s\nevictionHardd: {{}}\n");
        std::fs::write(&kubelet, &kubelet_text).unwrap();
        let sources = ConfigSources {
            kubelet: Some(kubelet),
            overlay: Some(overlay.clone()),
        };
        let alone = load(&sources).unwrap();
        assert!(
            alone.notes.iter().any(|n| n.contains("does not exist")),
            "{:?}",
            alone.notes
        );
        std::fs::write(&overlay, &overlay_text).unwrap();
        let both = load(&sources).unwrap();
        assert_eq!(both.config.thresholds, alone.config.thresholds);
        assert_eq!(
            both.config.monitor.eviction_interval,
            std::time::Duration::from_secs(3)
        );
        let expected = Sha256::digest(format!("{kubelet_text}{overlay_text}").as_bytes());
        let expected: String = expected
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(both.checksum, format!("sha256:{expected}"));
        assert!(
            both.notes
                .iter()
                .any(|n| n.contains("o.yaml: document 1") && n.contains("\"evictionHardd\"")),
            "{:?}",
            both.notes
        );
        assert!(
            sources.describe().contains("laid over"),
            "{}",
            sources.describe()
        );
        assert!(
            ConfigSources::default()
                .describe()
                .starts_with("the kubelet's defaults")
        );
    }
}
