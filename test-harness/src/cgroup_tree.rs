//! Cgroup trees owned by a test, the demo or a benchmark: find the memory controller, create
//! cgroups (delegating the memory controller on v2), start processes inside them, and remove a
//! whole tree, killing whatever still runs there.
use std::{
    fs, io,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command},
    thread,
    time::{Duration, Instant},
};

/// Where the memory controller is mounted, and whether it is cgroup v2.
pub fn memory_mount() -> io::Result<(PathBuf, bool)> {
    let v1 = Path::new("/sys/fs/cgroup/memory");
    if v1.join("memory.stat").exists() {
        return Ok((v1.to_path_buf(), false));
    }
    let unified = Path::new("/sys/fs/cgroup");
    let controllers = fs::read_to_string(unified.join("cgroup.controllers")).unwrap_or_default();
    if controllers.split_whitespace().any(|c| c == "memory") {
        return Ok((unified.to_path_buf(), true));
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        "no memory cgroup controller at /sys/fs/cgroup/memory or /sys/fs/cgroup",
    ))
}

/// Creates `root/rel` and the levels between. On v2 `root` and every level above the last
/// delegate the memory controller to their children, or those would have no memory files; the
/// last level does not, so processes may join it (v2 allows none where controllers are
/// delegated).
pub fn create_dirs(root: &Path, rel: &str, v2: bool) -> io::Result<PathBuf> {
    let mut dir = root.to_path_buf();
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        if v2 {
            fs::write(dir.join("cgroup.subtree_control"), "+memory")?;
        }
        dir.push(part);
        if !dir.exists() {
            fs::create_dir(&dir)?;
        }
    }
    Ok(dir)
}

/// Starts `cmd` inside the cgroup `dir`: the child joins it before exec, so everything it
/// allocates is charged there.
pub fn spawn_in(cmd: &mut Command, dir: &Path) -> io::Result<Child> {
    let procs = dir.join("cgroup.procs");
    // SAFETY: only a file write (open, write, close) happens between fork and exec.
    unsafe {
        cmd.pre_exec(move || fs::write(&procs, "0"));
    }
    cmd.spawn()
}

/// Pids listed in a cgroup's `cgroup.procs` (empty when the cgroup is gone).
pub fn pids_in(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// `dir` and every cgroup below it.
fn subtree(dir: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        if !d.is_dir() {
            continue;
        }
        for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push(entry.path());
            }
        }
        dirs.push(d);
    }
    dirs
}

/// Pids of every cgroup in the tree below `dir`.
pub fn subtree_pids(dir: &Path) -> Vec<i32> {
    subtree(dir).iter().flat_map(|d| pids_in(d)).collect()
}

/// Kills every process in the tree below `dir` and removes its cgroups, deepest first.
pub fn remove_tree(dir: &Path) {
    let kill = |pids: Vec<i32>| {
        for pid in pids {
            // SAFETY: signalling a process inside a cgroup this program created.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    };
    kill(subtree_pids(dir));
    let mut dirs = subtree(dir);
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    let deadline = Instant::now() + Duration::from_secs(20);
    for d in dirs {
        while d.exists() && fs::remove_dir(&d).is_err() && Instant::now() < deadline {
            // Processes forked meanwhile, or not yet reaped.
            kill(pids_in(&d));
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// OOM kills in the subtree at `dir`: v1 counts them in each victim's own cgroup
/// (`memory.oom_control`), v2 hierarchically (`memory.events` of `dir`). An error when `dir`
/// has no counter to read, so that a check of "no OOM kill" cannot pass on a missing file.
pub fn oom_kills_in(dir: &Path) -> io::Result<u64> {
    let counter = |file: &Path| {
        fs::read_to_string(file)?
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("no oom_kill counter in {}", file.display()),
                )
            })
    };
    let events = dir.join("memory.events");
    if events.exists() {
        return counter(&events);
    }
    let mut total = counter(&dir.join("memory.oom_control"))?;
    for entry in fs::read_dir(dir)?.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            // A child removed meanwhile took its count with it.
            total += oom_kills_in(&entry.path()).unwrap_or(0);
        }
    }
    Ok(total)
}
