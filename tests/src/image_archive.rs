//! The image archive `cargo xtask image` writes (an OCI index of linux/amd64 and linux/arm64),
//! for the tests that read or run it on the host.
use std::path::PathBuf;

/// The archive (MONITOR_IMAGE, else `target/image/monitor.oci.tar` beside the test's own
/// target directory), or why a test cannot use it here.
pub fn image_archive() -> Result<PathBuf, String> {
    if std::env::var_os("MONITOR_VM").is_some() {
        return Err("the VM has no image tools; this test runs on the host".into());
    }
    let path = std::env::var_os("MONITOR_IMAGE").map_or_else(
        || {
            let exe = std::env::current_exe().expect("test executable path");
            // target/<profile>/deps/<test>
            let target = exe.ancestors().nth(3).expect("target directory");
            target.join("image/monitor.oci.tar")
        },
        PathBuf::from,
    );
    if !path.exists() {
        return Err(format!(
            "{} is not built (cargo xtask image; cargo xtask test builds it)",
            path.display()
        ));
    }
    Ok(path)
}
