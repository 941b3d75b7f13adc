//! The kernel programs as the kernel tests load them: one test at a time, on a current-thread
//! runtime, with the records collected until a condition holds; and the cgroup work they
//! watch (commands run inside a cgroup, page cache written from one).
use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use monitor::source::{
    ebpf::{KernelSource, LoadOptions, MemcgHook, cgroup_map_entries_at},
    event::KernelEvent,
};

use crate::{Reason, TestCgroup, cannot_run, cgroup_tree};

const MIB: u64 = 1 << 20;

/// Every loaded copy of the programs sees every cgroup on the machine, so one test's churn
/// fills another's ring (forcing wake-ups it asserts are absent) and moves its growth sums:
/// the tests run one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub fn load(cgroup: &TestCgroup) -> KernelSource {
    load_hooked(cgroup, MemcgHook::Auto)
}

pub fn load_hooked(cgroup: &TestCgroup, memcg_hook: MemcgHook) -> KernelSource {
    load_budgeted(cgroup, memcg_hook, None)
}

pub fn load_budgeted(
    cgroup: &TestCgroup,
    memcg_hook: MemcgHook,
    budget_pages: Option<u32>,
) -> KernelSource {
    KernelSource::load(LoadOptions {
        step_bytes: MIB,
        hierarchy_id: cgroup.hierarchy.hierarchy_id,
        memcg_hook,
        budget_pages,
        cgroup_map_entries: cgroup_map_entries_at(&cgroup.hierarchy.mount),
    })
    .expect("loading the kernel programs")
}

/// The programs, or `None` (with a note) where neither the memcg tracepoints nor fentry can
/// count memory. The VM's kernels (5.11+ with BTF) must count it.
pub fn load_tracking_memory(cgroup: &TestCgroup) -> Option<KernelSource> {
    let source = load(cgroup);
    if !source.tracks_memory() {
        let reasons = skip_reasons(&source);
        assert!(
            std::env::var_os("MONITOR_VM").is_none(),
            "the VM's kernel must count memory with tracepoints or fentry: {reasons}"
        );
        cannot_run(
            Reason::MemcgPrograms,
            &format!("memory is polled: {reasons}"),
        );
        return None;
    }
    Some(source)
}

/// The programs attached by fentry, or `None` (with a note) on a host that refuses tracing
/// programs even to root (a security policy, a BPF LSM); the VM's kernels must not.
pub fn load_fentry(cgroup: &TestCgroup) -> Option<KernelSource> {
    let source = load_hooked(cgroup, MemcgHook::Fentry);
    if !source.tracks_memory() {
        let reasons = skip_reasons(&source);
        let refused = reasons.contains("Operation not permitted");
        assert!(
            refused && std::env::var_os("MONITOR_VM").is_none(),
            "fentry programs not attached: {reasons}"
        );
        cannot_run(
            Reason::Fentry,
            &format!("this host refuses them: {reasons}"),
        );
        return None;
    }
    Some(source)
}

pub fn skip_reasons(source: &KernelSource) -> String {
    let reasons: Vec<String> = source
        .skipped()
        .iter()
        .map(|s| format!("{}: {}", s.program.name, s.reason))
        .collect();
    reasons.join("; ")
}

/// Collects events until `done` holds (then 300 ms more, to catch stragglers) or `timeout`.
pub async fn collect(
    source: &mut KernelSource,
    timeout: Duration,
    mut done: impl FnMut(&[KernelEvent]) -> bool,
) -> Vec<KernelEvent> {
    let mut events = Vec::new();
    let mut batch = Vec::new();
    let deadline = Instant::now() + timeout;
    let mut settle_until: Option<Instant> = None;
    loop {
        let until = settle_until.unwrap_or(deadline).min(deadline);
        let Some(wait) = until.checked_duration_since(Instant::now()) else {
            break;
        };
        if tokio::time::timeout(wait, source.next_batch(&mut batch))
            .await
            .is_err()
        {
            break;
        }
        events.extend(batch.drain(..).map(|r| r.expect("decodable record")));
        if settle_until.is_none() && done(&events) {
            settle_until = Some(Instant::now() + Duration::from_millis(300));
        }
    }
    events
}

/// Reads and discards what waits in the ring, so a long churn does not fill it.
pub fn discard_pending(source: &mut KernelSource) {
    let mut batch = Vec::new();
    source.read_pending(&mut batch);
}

/// Runs `script` with `sh -c` inside the cgroup `dir` and waits for it.
pub fn run_in(dir: &Path, script: &str) {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script]);
    let status = cgroup_tree::spawn_in(&mut cmd, dir)
        .and_then(|mut child| child.wait())
        .unwrap_or_else(|e| panic!("running {script} in {}: {e}", dir.display()));
    assert!(status.success(), "{script} in {}: {status}", dir.display());
}

/// Writes `mib` MiB of page cache to `file` from inside the cgroup `dir`; the pages stay
/// charged to the cgroup after it is removed, until the file goes.
pub fn write_cache(dir: &Path, file: &Path, mib: u32) {
    run_in(
        dir,
        &format!(
            "dd if=/dev/zero of={} bs=1M count={mib} conv=fsync status=none",
            file.display()
        ),
    );
}
