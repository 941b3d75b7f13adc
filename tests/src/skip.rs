//! Tests that cannot run here: a test that needs root fails without it, unless skipping is
//! asked for.

/// Set to skip the tests that need root instead of failing them.
pub const SKIP_ROOT_TESTS: &str = "MONITOR_SKIP_ROOT_TESTS";

/// True when the test may run. Not being root fails the test, so a green run means every
/// test ran; with [`SKIP_ROOT_TESTS`] set (never in CI, which runs as root) it is skipped with
/// a visible message instead.
pub fn running_as_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let opted_out = std::env::var_os(SKIP_ROOT_TESTS).is_some();
    assert!(
        opted_out && std::env::var_os("CI").is_none(),
        "{test} needs root (real cgroups and kernel programs); run the tests as root, or set \
         {SKIP_ROOT_TESTS}=1 outside CI to skip them"
    );
    eprintln!("SKIP: {test} needs root ({SKIP_ROOT_TESTS} is set)");
    false
}
