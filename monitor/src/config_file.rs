//! Reads the `--config` file for the agent and `monitor config`: a regular file (a FIFO or a
//! device would block the read), at most [`MAX_CONFIG_BYTES`], parsed as the kubelet's
//! configuration. Without a file, the kubelet's defaults.
use std::io::Read as _;
use std::path::Path;

use anyhow::{Context as _, bail};

use crate::engine::eviction_config::{ConfigForm, EvictionConfig, MAX_CONFIG_BYTES, Written};

/// The configuration in `path`, decoded as the kubelet decodes its file (or a configz answer
/// as the node's effective configuration), with what it wrote itself; the defaults without a
/// path.
pub(crate) fn load(path: Option<&Path>) -> anyhow::Result<(EvictionConfig, Written)> {
    let Some(path) = path else {
        return Ok((EvictionConfig::default(), Written::default()));
    };
    let text = read(path).with_context(|| format!("reading {}", path.display()))?;
    let (config, written, form) =
        EvictionConfig::decode_explained(&text).with_context(|| format!("{}", path.display()))?;
    if form == ConfigForm::Configz {
        tracing::info!(
            "{}: a configz answer, the kubelet's effective configuration: read as it is, no \
             defaults applied",
            path.display()
        );
    }
    Ok((config, written))
}

fn read(path: &Path) -> anyhow::Result<String> {
    let metadata = std::fs::metadata(path)?;
    if !metadata.is_file() {
        bail!(
            "not a regular file ({}); give the KubeletConfiguration file",
            crate::file_kind::describe(metadata.file_type())
        );
    }
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        bail!("larger than {MAX_CONFIG_BYTES} bytes: not a KubeletConfiguration");
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_of_bounded_size_is_read() {
        let dir = std::env::temp_dir().join(format!("monitor-config-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.yaml");
        std::fs::write(
            &good,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             evictionHard:\n  memory.available: 200Mi\n",
        )
        .unwrap();
        let (config, written) = load(Some(&good)).unwrap();
        assert_eq!(config.thresholds.len(), 2, "{config:?}");
        assert_eq!(
            written.eviction_hard,
            Some(vec!["memory.available".to_string()])
        );

        let fifo = dir.join("fifo");
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let refused = format!("{:#}", load(Some(&fifo)).unwrap_err());
        assert!(refused.contains("a FIFO"), "{refused}");
        let refused = format!("{:#}", load(Some(&dir)).unwrap_err());
        assert!(refused.contains("a directory"), "{refused}");

        let big = dir.join("big.yaml");
        std::fs::write(&big, "#".repeat(MAX_CONFIG_BYTES as usize + 1)).unwrap();
        let refused = format!("{:#}", load(Some(&big)).unwrap_err());
        assert!(refused.contains("larger than"), "{refused}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
