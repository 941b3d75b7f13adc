//! Running the commands tasks are made of: cargo itself, and any command that must succeed.
//! A leaf every task and benchmark uses.
use std::process::Command;

use anyhow::{Context as _, bail};

/// Runs a command, failing with its rendering when it does not exit 0.
pub(crate) fn status(cmd: &mut Command) -> anyhow::Result<()> {
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// cargo as cargo started us (CARGO), so the same toolchain builds everything.
pub(crate) fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// The workspace's target directory (CARGO_TARGET_DIR when set).
pub(crate) fn target_dir() -> anyhow::Result<std::path::PathBuf> {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return Ok(dir.into());
    }
    // xtask lives one level below the workspace root.
    let manifest = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.parent().context("xtask has no parent directory")?;
    Ok(root.join("target"))
}
