//! One step of reclaim before eviction: a write of a byte count to a pod's `memory.reclaim`
//! (cgroup v2, Linux 5.19 and later), with the pod's file cache and refaults read around it.
//! cgroup v1 has no such file, and lowering a v1 limit instead opens a window in which the
//! pod's own charges call the OOM killer, so the agent never reclaims on v1.
use std::{
    fs::OpenOptions,
    io::{self, Write as _},
    path::Path,
    thread,
    time::Duration,
};

use super::CgroupVersion;
use crate::engine::{
    reclaim_ladder::{COUNTED_CACHE_AT_LEAST, StepAnswer, StepResult},
    reclaim_record::PodNow,
};

const RECLAIM_FILE: &str = "memory.reclaim";

/// How long after a step its refaults are counted: a pod that re-reads its cache brings it
/// back within milliseconds, which is what tells cache in use from cache that was idle.
pub(crate) const REFAULT_WINDOW: Duration = Duration::from_millis(20);

/// Why `--reclaim-first` cannot work with the memory cgroups at `dir` (the kubepods cgroup,
/// or the hierarchy's root), if it cannot.
pub fn refusal(version: CgroupVersion, dir: &Path) -> Result<(), String> {
    match version {
        CgroupVersion::V1 => Err("cgroup v1 has no memory.reclaim, and lowering a v1 limit \
                                  instead opens a window in which the pod's own charges call \
                                  the OOM killer"
            .into()),
        CgroupVersion::V2 => supported(dir),
    }
}

/// Whether cgroups under `dir` take `memory.reclaim` (its presence in `dir` says so: the file
/// exists in every memory cgroup of a kernel that has it, the root's included).
fn supported(dir: &Path) -> Result<(), String> {
    let path = dir.join(RECLAIM_FILE);
    match path.metadata() {
        Ok(meta) if meta.is_file() => Ok(()),
        Ok(_) => Err(format!("{} is not a file", path.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!(
            "{} does not exist (memory.reclaim came in Linux 5.19)",
            path.display()
        )),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// What the ladder reads of a pod's cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counters {
    /// The kubelet's working set: `memory.current` less `inactive_file`.
    working_set: u64,
    /// `active_file`: the page cache the kubelet's working set counts.
    active_file: u64,
    /// `file`: all the page cache charged to the cgroup.
    file: u64,
    /// Pages brought back in soon after reclaim took them (a count, not bytes).
    refaults: u64,
}

fn read_counters(dir: &Path) -> io::Result<Counters> {
    let current: u64 = std::fs::read_to_string(dir.join("memory.current"))?
        .trim()
        .parse()
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    let text = std::fs::read_to_string(dir.join("memory.stat"))?;
    let (mut inactive_file, mut counters) = (0, Counters::default());
    for line in text.lines() {
        let Some((key, value)) = line.split_once(' ') else {
            continue;
        };
        let slot = match key {
            "inactive_file" => &mut inactive_file,
            "active_file" => &mut counters.active_file,
            "file" => &mut counters.file,
            "workingset_refault_file" => &mut counters.refaults,
            _ => continue,
        };
        *slot = value.trim().parse().unwrap_or(0);
    }
    counters.working_set = current.saturating_sub(inactive_file);
    Ok(counters)
}

/// The cgroup's refault counter in bytes of `page_size`, its working set and the page cache
/// the kubelet counts in it (`None`: unreadable or gone).
pub fn now(dir: &Path, page_size: u64) -> Option<PodNow> {
    read_counters(dir).ok().map(|c| PodNow {
        refaults: c.refaults.saturating_mul(page_size),
        working_set: c.working_set,
        counted_cache: c.active_file,
    })
}

/// Asks the kernel to reclaim `bytes` from the cgroup at `dir` and says what came of it: the
/// working set it holds less (freed cache, and cache reclaim moved to the inactive list, which
/// the kubelet no longer counts), the page cache freed, and the refaults of the
/// [`REFAULT_WINDOW`] after, in bytes of `page_size`. Blocks for the reclaim and the window.
pub fn step(dir: &Path, bytes: u64, page_size: u64) -> StepResult {
    let before = match read_counters(dir) {
        Ok(counters) => counters,
        Err(e) if super::procs::is_gone(&e) => return StepResult::nothing(StepAnswer::Gone),
        // Unreadable (EIO, EACCES): this pod is passed over, the ladder goes on.
        Err(_) => return StepResult::nothing(StepAnswer::Partial),
    };
    if before.active_file < COUNTED_CACHE_AT_LEAST {
        return StepResult::nothing(StepAnswer::NoCache);
    }
    let answer = match write_reclaim(dir, bytes) {
        Ok(()) => StepAnswer::Done,
        Err(e) => answer_to(&e, dir),
    };
    if matches!(answer, StepAnswer::Gone | StepAnswer::Refused) {
        return StepResult::nothing(answer);
    }
    thread::sleep(REFAULT_WINDOW);
    let Ok(after) = read_counters(dir) else {
        // Removed since: what it gave is no longer the node's to count.
        return StepResult::nothing(StepAnswer::Gone);
    };
    StepResult {
        answer,
        taken: before.working_set.saturating_sub(after.working_set),
        freed: before.file.saturating_sub(after.file),
        refaulted: after
            .refaults
            .saturating_sub(before.refaults)
            .saturating_mul(page_size),
        refaults_after: after.refaults.saturating_mul(page_size),
        working_set_after: after.working_set,
    }
}

fn write_reclaim(dir: &Path, bytes: u64) -> io::Result<()> {
    // No O_CREAT: where the file is absent the kernel has no such interface, and creating a
    // regular file there would hide it.
    let mut file = OpenOptions::new()
        .write(true)
        .open(dir.join(RECLAIM_FILE))?;
    file.write_all(bytes.to_string().as_bytes())
}

/// The kernel's answers: EAGAIN when it reclaimed less than asked (its retries spent), EINTR
/// when a signal cut it short, EBUSY from a cgroup being torn down; ENOENT or ENODEV for the
/// cgroup gone; anything else refuses the interface itself.
fn answer_to(error: &io::Error, dir: &Path) -> StepAnswer {
    match error.raw_os_error() {
        Some(libc::EAGAIN | libc::EINTR | libc::EBUSY) => StepAnswer::Partial,
        _ if super::procs::is_gone(error) && !dir.is_dir() => StepAnswer::Gone,
        _ => StepAnswer::Refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cgroup_like(stat: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("memory.current"), "1048576\n").unwrap();
        std::fs::write(dir.path().join("memory.stat"), stat).unwrap();
        dir
    }

    #[test]
    fn a_kernel_without_memory_reclaim_refuses_and_nothing_is_created() {
        let dir = cgroup_like("file 4194304\nactive_file 4194304\nworkingset_refault_file 0\n");
        assert_eq!(
            step(dir.path(), 1 << 20, 4096),
            StepResult::nothing(StepAnswer::Refused)
        );
        assert!(!dir.path().join(RECLAIM_FILE).exists());
        let said = refusal(CgroupVersion::V2, dir.path()).unwrap_err();
        assert!(said.contains("Linux 5.19"), "{said}");
        std::fs::write(dir.path().join(RECLAIM_FILE), "").unwrap();
        assert_eq!(refusal(CgroupVersion::V2, dir.path()), Ok(()));
        let said = refusal(CgroupVersion::V1, dir.path()).unwrap_err();
        assert!(
            said.starts_with("cgroup v1 has no memory.reclaim"),
            "{said}"
        );
    }

    #[test]
    fn a_pod_without_counted_cache_is_not_written_to() {
        let dir = cgroup_like("anon 209715200\nactive_file 1048575\ninactive_file 9999999\n");
        std::fs::write(dir.path().join(RECLAIM_FILE), "").unwrap();
        assert_eq!(
            step(dir.path(), 1 << 20, 4096),
            StepResult::nothing(StepAnswer::NoCache)
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join(RECLAIM_FILE)).unwrap(),
            ""
        );
    }

    #[test]
    fn a_vanished_cgroup_is_gone() {
        let dir = cgroup_like("file 0\n");
        let path = dir.path().join("pod");
        assert_eq!(step(&path, 1 << 20, 4096).answer, StepAnswer::Gone);
    }

    #[test]
    fn a_directory_where_the_file_should_be_is_not_supported() {
        let dir = cgroup_like("active_file 4194304\n");
        std::fs::create_dir(dir.path().join(RECLAIM_FILE)).unwrap();
        assert!(
            refusal(CgroupVersion::V2, dir.path())
                .unwrap_err()
                .contains("not a file")
        );
        assert_eq!(step(dir.path(), 1 << 20, 4096).answer, StepAnswer::Refused);
    }

    #[test]
    fn the_kernels_errors_are_told_apart() {
        let dir = cgroup_like("");
        for (errno, answer) in [
            (libc::EAGAIN, StepAnswer::Partial),
            (libc::EINTR, StepAnswer::Partial),
            (libc::EBUSY, StepAnswer::Partial),
            (libc::EINVAL, StepAnswer::Refused),
            (libc::EOPNOTSUPP, StepAnswer::Refused),
            (libc::EPERM, StepAnswer::Refused),
            (libc::ENODEV, StepAnswer::Refused),
        ] {
            let error = io::Error::from_raw_os_error(errno);
            assert_eq!(answer_to(&error, dir.path()), answer, "errno {errno}");
        }
        let gone = dir.path().join("removed");
        let error = io::Error::from_raw_os_error(libc::ENODEV);
        assert_eq!(answer_to(&error, &gone), StepAnswer::Gone);
    }

    #[test]
    fn the_working_set_is_the_kubelets_and_the_refaults_are_in_bytes() {
        let dir = cgroup_like(
            "anon 10\nfile 8192\nactive_file 4096\ninactive_file 65536\n\
             workingset_refault_anon 3\nworkingset_refault_file 7\n",
        );
        assert_eq!(
            read_counters(dir.path()).unwrap(),
            Counters {
                working_set: 1_048_576 - 65_536,
                active_file: 4096,
                file: 8192,
                refaults: 7
            }
        );
        assert_eq!(
            now(dir.path(), 4096),
            Some(PodNow {
                refaults: 7 * 4096,
                working_set: 1_048_576 - 65_536,
                counted_cache: 4096
            })
        );
        std::fs::write(dir.path().join("memory.current"), "max\n").unwrap();
        assert_eq!(now(dir.path(), 4096), None, "not a number: unreadable");
    }
}
