//! Builds the kernel programs (`monitor-ebpf`) for the BPF target and leaves the object in
//! OUT_DIR, where `source::ebpf` embeds it.
use anyhow::{Context as _, anyhow};
use aya_build::Toolchain;

fn main() -> anyhow::Result<()> {
    let cargo_metadata::Metadata { packages, .. } = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("reading workspace metadata")?;
    let ebpf = packages
        .into_iter()
        .find(|p| p.name.as_str() == "monitor-ebpf")
        .ok_or_else(|| anyhow!("package monitor-ebpf not found in the workspace"))?;
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("{} has no parent directory", ebpf.manifest_path))?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: ebpf.name.as_str(),
            root_dir: root_dir.as_str(),
            ..Default::default()
        }],
        Toolchain::default(),
    )
}
