//! What the agent needs from its host beyond the kernel's features, for `monitor doctor`:
//! capabilities, the host PID namespace and host paths. Each is checked from inside the
//! process, so a container missing one is told which, and what it is for.
//!
//! The set is the least the agent runs with (proven by `tests/tests/container_privileges.rs`,
//! which runs the image with exactly these): CAP_BPF and CAP_PERFMON load the kernel programs
//! and attach them to tracepoints; CAP_KILL signals pod processes that run as other users.
//! CAP_SYS_ADMIN only spares memory (the loader's private view hiding the kernel's BTF), and
//! CAP_SYS_RESOURCE is not used: since Linux 5.11 BPF memory is charged to the cgroup, not to
//! RLIMIT_MEMLOCK.
use std::{fs, path::Path};

use serde::Serialize;

use crate::{
    cgroupfs::MemoryHierarchy,
    engine::ids::CgroupRel,
    pods::{cgroup_path::KubepodsCgroup, manifest_dir},
};

/// What the host is asked to provide, from the agent's flags.
pub(crate) struct Needs<'a> {
    /// The agent kills evicted pods itself (all but `--kube --kube-hard-action api`, where
    /// the kubelet stops them).
    pub kills: bool,
    pub memory: Option<&'a MemoryHierarchy>,
    pub kubepods_cgroup: Option<&'a CgroupRel>,
    pub tracefs: Result<&'a Path, &'a str>,
    pub checkpoint_dir: &'a Path,
    pub kubelet_config: Option<&'a Path>,
    pub config: Option<&'a Path>,
    pub pods: Option<&'a Path>,
}

/// One privilege and whether this process has it.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(crate) struct Requirement {
    pub name: String,
    pub kind: Kind,
    /// Without it the agent cannot do its job (else it runs with less: more memory, polling).
    pub required: bool,
    pub granted: bool,
    /// What the agent uses it for.
    pub purpose: &'static str,
    /// Why it counts as missing, when it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

#[derive(Debug, Serialize, PartialEq, Eq, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    Capability,
    Namespace,
    Path,
}

/// A capability the agent may use: its name, bit, whether it is required, and what for.
struct CapabilitySpec {
    name: &'static str,
    bit: u32,
    required: bool,
    /// Needed only when the agent signals pod processes itself.
    for_kills: bool,
    purpose: &'static str,
}

const CAPABILITIES: &[CapabilitySpec] = &[
    CapabilitySpec {
        name: "CAP_BPF",
        for_kills: false,
        bit: 39,
        required: true,
        purpose: "load the kernel programs and create their maps",
    },
    CapabilitySpec {
        name: "CAP_PERFMON",
        for_kills: false,
        bit: 38,
        required: true,
        purpose: "attach the kernel programs to tracepoints",
    },
    CapabilitySpec {
        name: "CAP_KILL",
        for_kills: true,
        bit: 5,
        required: true,
        purpose: "signal an evicted pod's processes, which run as other users (not with --kube-hard-action api)",
    },
    CapabilitySpec {
        name: "CAP_SYS_ADMIN",
        for_kills: false,
        bit: 21,
        required: false,
        purpose: "hides the kernel's BTF from the loader, about 17 MiB less peak memory (optional)",
    },
];

/// Everything in `needs`, probed now, in the order the report prints it.
pub(crate) fn check(needs: &Needs<'_>) -> Vec<Requirement> {
    let effective = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| effective_capabilities(&status));
    let mut out: Vec<Requirement> = CAPABILITIES
        .iter()
        .map(|cap| {
            let granted = effective.is_some_and(|set| set & (1 << cap.bit) != 0);
            Requirement {
                name: cap.name.into(),
                kind: Kind::Capability,
                required: cap.required && (needs.kills || !cap.for_kills),
                granted,
                purpose: cap.purpose,
                problem: (!granted).then(|| match effective {
                    Some(_) => "not in the effective set: grant it (a container's \
                                securityContext.capabilities.add, podman --cap-add)"
                        .to_string(),
                    None => "the effective set is unreadable (/proc/self/status)".to_string(),
                }),
            }
        })
        .collect();
    out.push(requirement(
        "host PID namespace",
        Kind::Namespace,
        needs.kills,
        "see and signal the processes listed in pod cgroups (not with --kube-hard-action api)",
        host_pid_namespace(),
    ));
    out.push(requirement(
        "cgroupfs",
        Kind::Path,
        // The agent refuses to start without its kubepods cgroup, detected or given.
        true,
        "read pod memory, kill pod cgroups",
        kubepods(needs.memory, needs.kubepods_cgroup),
    ));
    out.push(requirement(
        "tracefs",
        Kind::Path,
        false,
        "tracepoint ids for the kernel programs (without it the agent polls)",
        needs.tracefs.map(drop).map_err(str::to_string),
    ));
    out.push(requirement(
        "checkpoint directory",
        Kind::Path,
        true,
        "keep grace periods and the last eviction across restarts",
        writable_dir(needs.checkpoint_dir),
    ));
    if let Some(kubelet_config) = needs.kubelet_config {
        out.push(requirement(
            "kubelet config",
            Kind::Path,
            true,
            "the kubelet's eviction thresholds",
            // Loaded as the agent loads it: a file it would refuse is as good as none.
            loads(Some(kubelet_config), None),
        ));
    }
    if let Some(config) = needs.config {
        out.push(requirement(
            "configuration",
            Kind::Path,
            true,
            "the agent's settings, and thresholds laid over the kubelet's",
            loads(needs.kubelet_config, Some(config)),
        ));
    }
    if let Some(pods) = needs.pods {
        out.push(requirement(
            "pods directory",
            Kind::Path,
            true,
            "the pods to rank",
            manifest_dir::check(pods).map_err(|e| e.to_string()),
        ));
    }
    out
}

fn requirement(
    name: &str,
    kind: Kind,
    required: bool,
    purpose: &'static str,
    probe: Result<(), String>,
) -> Requirement {
    Requirement {
        name: name.into(),
        kind,
        required,
        granted: probe.is_ok(),
        purpose,
        problem: probe.err(),
    }
}

/// The `CapEff` mask of a `/proc/PID/status` text.
fn effective_capabilities(status: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// The kernel gives the initial PID namespace a fixed inode number (PROC_PID_INIT_INO); a
/// container's own namespace has another. (On a node that itself runs in a nested PID
/// namespace, as kind's do, this reports the node's namespace as not the host's.)
fn host_pid_namespace() -> Result<(), String> {
    const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
    use std::os::unix::fs::MetadataExt as _;
    let ns = fs::metadata("/proc/self/ns/pid").map_err(|e| format!("/proc/self/ns/pid: {e}"))?;
    if ns.ino() != PROC_PID_INIT_INO {
        return Err(
            "in a PID namespace of its own (run with the host's: hostPID, --pid host)".into(),
        );
    }
    Ok(())
}

/// The kubepods cgroup is visible (the host's cgroupfs, not a container's own subtree) and
/// on a writable mount.
fn kubepods(memory: Option<&MemoryHierarchy>, given: Option<&CgroupRel>) -> Result<(), String> {
    let memory = memory.ok_or("no memory cgroup hierarchy")?;
    let rel = match given {
        Some(rel) => rel.clone(),
        None => {
            KubepodsCgroup::detect(&memory.mount)
                .map_err(|e| format!("{e}; in a container, mount the host's /sys/fs/cgroup"))?
                .rel
        }
    };
    let dir = memory.dir(&rel);
    if !dir.is_dir() {
        return Err(format!(
            "{} does not exist: give --kubepods-cgroup the kubelet's pod cgroup root; in a \
             container, mount the host's /sys/fs/cgroup",
            dir.display()
        ));
    }
    if read_only_mount(&dir)? {
        return Err(format!("{} is on a read-only mount", dir.display()));
    }
    Ok(())
}

fn read_only_mount(path: &Path) -> Result<bool, String> {
    let c_path =
        std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: statvfs fills the zeroed struct we own from a NUL-terminated path.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c_path.as_ptr(), &raw mut stat) } != 0 {
        return Err(format!(
            "{}: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(stat.f_flag & libc::ST_RDONLY != 0)
}

/// The directory is writable, or can be created: the agent makes it when missing, so the
/// nearest existing ancestor must be writable (a read-only root file system, as in a
/// container without the host directory mounted, is not).
fn writable_dir(dir: &Path) -> Result<(), String> {
    let existing = dir
        .ancestors()
        .find(|a| a.is_dir())
        .ok_or_else(|| format!("{}: no existing ancestor", dir.display()))?;
    let c_path = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes())
        .map_err(|e| e.to_string())?;
    // SAFETY: access only reads the NUL-terminated path.
    if unsafe { libc::access(c_path.as_ptr(), libc::W_OK) } != 0 {
        let error = std::io::Error::last_os_error();
        return Err(if existing == dir {
            format!("{} is not writable: {error}", dir.display())
        } else {
            format!(
                "{} does not exist and cannot be created in {}: {error} (mount a host directory there)",
                dir.display(),
                existing.display()
            )
        });
    }
    Ok(())
}

/// Whether the agent would take these configuration files.
fn loads(kubelet: Option<&Path>, overlay: Option<&Path>) -> Result<(), String> {
    let sources = crate::config_file::ConfigSources {
        kubelet: kubelet.map(Path::to_path_buf),
        overlay: overlay.map(Path::to_path_buf),
    };
    crate::config_file::load(&sources)
        .map(drop)
        .map_err(|e| format!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_set_from_status() {
        let cases = [
            (
                "root",
                "CapInh:\t0\nCapEff:\t000001ffffffffff\n",
                Some(0x1ff_ffff_ffff),
            ),
            (
                "bpf, perfmon, kill",
                "CapEff:\t000000c000000020\n",
                Some(0xc0_0000_0020),
            ),
            ("no line", "Name:\tmonitor\n", None),
            ("garbage", "CapEff:\tzz\n", None),
        ];
        for (name, status, expected) in cases {
            assert_eq!(effective_capabilities(status), expected, "{name}");
        }
    }

    #[test]
    fn capability_bits_match_linux() {
        let set = effective_capabilities("CapEff:\t000000c000000020\n").unwrap();
        let granted: Vec<_> = CAPABILITIES
            .iter()
            .filter(|c| set & (1 << c.bit) != 0)
            .map(|c| c.name)
            .collect();
        assert_eq!(granted, ["CAP_BPF", "CAP_PERFMON", "CAP_KILL"]);
    }

    /// The read-only case (a container's root without the host directory) is proven by the
    /// container test; root passes access(2) everywhere else.
    #[test]
    fn a_checkpoint_directory_that_can_be_made_counts_as_writable() {
        let below_temp = std::env::temp_dir().join("monitor-doctor/x");
        assert_eq!(writable_dir(&below_temp), Ok(()), "creatable");
        assert_eq!(writable_dir(&std::env::temp_dir()), Ok(()), "existing");
    }

    #[test]
    fn when_the_kubelet_stops_every_pod_neither_kill_nor_host_pid_is_required() {
        let tmp = std::env::temp_dir();
        let needs = |kills| Needs {
            kills,
            memory: None,
            kubepods_cgroup: None,
            tracefs: Err("none"),
            checkpoint_dir: &tmp,
            kubelet_config: None,
            config: None,
            pods: None,
        };
        let required = |kills| -> Vec<String> {
            check(&needs(kills))
                .into_iter()
                .filter(|r| r.required)
                .map(|r| r.name)
                .collect()
        };
        let all = [
            "CAP_BPF",
            "CAP_PERFMON",
            "CAP_KILL",
            "host PID namespace",
            "cgroupfs",
            "checkpoint directory",
        ];
        assert_eq!(required(true), all);
        assert_eq!(
            required(false),
            ["CAP_BPF", "CAP_PERFMON", "cgroupfs", "checkpoint directory"]
        );
    }
}
