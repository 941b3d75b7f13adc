//! The workspace's executables a test runs: the agent and the helper processes.
use std::path::{Path, PathBuf};

/// Path of a workspace binary: from `env_var` when set (the VM test sets it), else next to the
/// running test executable's `deps` directory, where cargo puts the workspace's binaries.
pub fn binary(name: &str, env_var: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env_var) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let target_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps");
    let path = target_dir.join(name);
    assert!(
        path.exists(),
        "{} not built; run the tests through cargo",
        path.display()
    );
    path
}

/// The `monitor` binary under test.
pub fn monitor_bin() -> PathBuf {
    binary("monitor", "MONITOR_BIN")
}
