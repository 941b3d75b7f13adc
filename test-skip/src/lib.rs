//! Tests that cannot run here fail, unless the runner allows their reason to skip them.
//!
//! A test that finds the machine lacking what it needs (root, a kernel feature, a tool) calls
//! [`cannot_run`] with the [`Reason`]. Unless [`ALLOW_VAR`] names that reason, the test fails,
//! saying what is missing and how to allow it; so a green run means that every test ran, or
//! skipped for a reason the runner named. `cargo xtask test` allows the reasons that hold on
//! the machine (probed by the tests crate's `skip_probe`, which never reports `root`) and prints
//! the skips at the end; a developer runs `MONITOR_TESTS_ALLOW_SKIP=root cargo test` when not
//! root.
//!
//! An allowed skip is written straight to stderr, past the test harness's capture, so even a
//! passing run shows it, and appended to the file [`LOG_VAR`] names, if any, for a summary.
//! Shared by the tests crate, the agent's own tests and xtask, so it needs nothing but std.
use std::{fmt, io::Write as _, str::FromStr};

/// The reasons a run allows to skip tests: names separated by commas (or spaces).
pub const ALLOW_VAR: &str = "MONITOR_TESTS_ALLOW_SKIP";
/// A file each allowed skip is appended to, one line each: `reason<TAB>test<TAB>detail`.
pub const LOG_VAR: &str = "MONITOR_TESTS_SKIP_LOG";

/// Why a test cannot run on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// Not running as root (real cgroups, kernel programs, mounts).
    Root,
    /// The kernel refuses to attach fentry programs, even to root (a security policy).
    Fentry,
    /// No memcg tracepoints (Linux before 6.13).
    MemcgTracepoints,
    /// Neither memcg tracepoints nor fentry count memory here; it is polled.
    MemcgPrograms,
    /// The memory controller is on cgroup v1; the test needs cgroup v2.
    CgroupV2,
    /// No cgroup v1 freezer holds the pods' processes; the test needs one.
    FreezerV1,
    /// The test changes the cgroup root, which only the test VM may.
    VmOnly,
    /// The test needs the host: the repository's files, or a CPU faster than the emulated VM's.
    HostOnly,
    /// Root without CAP_SYS_RESOURCE (some containers drop it).
    CapSysResource,
    /// The kernel exposes no BTF.
    Btf,
    /// Tracefs cannot be read or mounted.
    Tracefs,
    /// Pressure stall information is off in this kernel (`psi=1` turns it on).
    Psi,
    /// tmux is not installed.
    Tmux,
    /// No container image or no podman to run it.
    Image,
    /// kubernetes-validate is not installed.
    KubernetesValidate,
    /// kubectl, whose built-in kustomize renders deploy/, is not installed.
    Kubectl,
    /// Debian's Prometheus (the server and promtool) is not at hand.
    Prometheus,
}

impl Reason {
    /// Every reason, in the order of the summary.
    pub const ALL: [Reason; 17] = [
        Reason::Root,
        Reason::Fentry,
        Reason::MemcgTracepoints,
        Reason::MemcgPrograms,
        Reason::CgroupV2,
        Reason::FreezerV1,
        Reason::VmOnly,
        Reason::HostOnly,
        Reason::CapSysResource,
        Reason::Btf,
        Reason::Tracefs,
        Reason::Psi,
        Reason::Tmux,
        Reason::Image,
        Reason::KubernetesValidate,
        Reason::Kubectl,
        Reason::Prometheus,
    ];

    /// The name [`ALLOW_VAR`] uses.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Root => "root",
            Reason::Fentry => "fentry",
            Reason::MemcgTracepoints => "memcg-tracepoints",
            Reason::MemcgPrograms => "memcg-programs",
            Reason::CgroupV2 => "cgroup-v2",
            Reason::FreezerV1 => "freezer-v1",
            Reason::VmOnly => "vm-only",
            Reason::HostOnly => "host-only",
            Reason::CapSysResource => "cap-sys-resource",
            Reason::Btf => "btf",
            Reason::Tracefs => "tracefs",
            Reason::Psi => "psi",
            Reason::Tmux => "tmux",
            Reason::Image => "image",
            Reason::KubernetesValidate => "kubernetes-validate",
            Reason::Kubectl => "kubectl",
            Reason::Prometheus => "prometheus",
        }
    }

    /// What the reason means, for messages.
    pub fn meaning(self) -> &'static str {
        match self {
            Reason::Root => "not running as root",
            Reason::Fentry => "the kernel refuses fentry programs, even to root",
            Reason::MemcgTracepoints => "no memcg tracepoints in this kernel (before 6.13)",
            Reason::MemcgPrograms => "neither memcg tracepoints nor fentry count memory here",
            Reason::CgroupV2 => "the memory controller is on cgroup v1",
            Reason::FreezerV1 => {
                "no cgroup v1 freezer here (with the memory controller on cgroup v2, pods freeze \
                 with cgroup.freeze, whose frozen tasks SIGKILL ends)"
            }
            Reason::VmOnly => "changes the cgroup root: runs in `cargo xtask vm-test`",
            Reason::HostOnly => "needs the host (repository files, a fast CPU), not the VM",
            Reason::CapSysResource => "root without CAP_SYS_RESOURCE",
            Reason::Btf => "the kernel exposes no BTF",
            Reason::Tracefs => "tracefs cannot be read",
            Reason::Psi => "pressure stall information is off in this kernel",
            Reason::Tmux => "tmux is not installed",
            Reason::Image => "no container image or podman",
            Reason::KubernetesValidate => "kubernetes-validate is not installed",
            Reason::Kubectl => "kubectl (its kustomize renders the manifests) is not installed",
            Reason::Prometheus => "Debian's prometheus package (server, promtool) is not at hand",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name in [`ALLOW_VAR`] that is no [`Reason`].
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{name:?} is no skip reason; the reasons are {}", reason_names())]
pub struct UnknownReason {
    pub name: String,
}

impl FromStr for Reason {
    type Err = UnknownReason;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Reason::ALL
            .into_iter()
            .find(|r| r.name() == name)
            .ok_or_else(|| UnknownReason {
                name: name.to_string(),
            })
    }
}

fn reason_names() -> String {
    Reason::ALL.map(Reason::name).join(", ")
}

/// The reasons in a list such as `root,fentry` (commas or spaces between; empty allows none).
pub fn parse_list(list: &str) -> Result<Vec<Reason>, UnknownReason> {
    list.split([',', ' '])
        .filter(|name| !name.is_empty())
        .map(str::parse)
        .collect()
}

/// The reasons [`ALLOW_VAR`] allows here.
pub fn allowed() -> Result<Vec<Reason>, UnknownReason> {
    parse_list(&std::env::var(ALLOW_VAR).unwrap_or_default())
}

/// Joins reasons into the list [`ALLOW_VAR`] takes.
pub fn join_list(reasons: &[Reason]) -> String {
    reasons
        .iter()
        .map(|r| r.name())
        .collect::<Vec<_>>()
        .join(",")
}

/// Called by a test that cannot run here for `reason`; `detail` says what it found. Returns
/// once the skip is reported when [`ALLOW_VAR`] allows the reason (the test then returns, or
/// checks what it still can); fails the test otherwise.
#[track_caller]
pub fn cannot_run(reason: Reason, detail: &str) {
    let test = test_name();
    let allowed = allowed().unwrap_or_else(|e| panic!("{ALLOW_VAR}: {e}"));
    assert!(
        allowed.contains(&reason),
        "{test} cannot run here: {detail} ({}). Fix that, or set {ALLOW_VAR}={reason} to skip it",
        reason.meaning()
    );
    // Straight to stderr: the harness captures only the print macros.
    let _ = writeln!(std::io::stderr(), "SKIP [{reason}] {test}: {detail}");
    if let Some(log) = std::env::var_os(LOG_VAR) {
        let line = format!("{reason}\t{test}\t{}\n", detail.replace(['\t', '\n'], " "));
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(e) = appended {
            panic!("recording the skip in {}: {e}", log.to_string_lossy());
        }
    }
}

/// The running test: the harness names each test's thread after it.
fn test_name() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_string(),
        _ => "this test".to_string(),
    }
}

/// One line of the file [`LOG_VAR`] names.
#[derive(Debug, PartialEq, Eq)]
pub struct Skipped {
    pub reason: String,
    pub test: String,
    pub detail: String,
}

/// The skips recorded in a log's `text`, in order; lines that are not records are left out.
pub fn read_log(text: &str) -> Vec<Skipped> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, '\t');
            Some(Skipped {
                reason: fields.next()?.to_string(),
                test: fields.next()?.to_string(),
                detail: fields.next()?.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_lists_parse_by_name() {
        struct Case {
            name: &'static str,
            list: &'static str,
            want: Result<Vec<Reason>, &'static str>,
        }
        let cases = [
            Case {
                name: "empty allows nothing",
                list: "",
                want: Ok(vec![]),
            },
            Case {
                name: "one reason",
                list: "root",
                want: Ok(vec![Reason::Root]),
            },
            Case {
                name: "commas and spaces",
                list: "fentry, cap-sys-resource,,vm-only",
                want: Ok(vec![Reason::Fentry, Reason::CapSysResource, Reason::VmOnly]),
            },
            Case {
                name: "a typo fails",
                list: "root,fentri",
                want: Err("fentri"),
            },
            Case {
                name: "names are exact",
                list: "Root",
                want: Err("Root"),
            },
        ];
        for case in cases {
            let got = parse_list(case.list).map_err(|e| e.name);
            let want = case.want.map_err(String::from);
            assert_eq!(got, want, "{}", case.name);
        }
    }

    #[test]
    fn every_reason_parses_from_its_name() {
        for reason in Reason::ALL {
            assert_eq!(reason.name().parse::<Reason>(), Ok(reason));
        }
        assert_eq!(parse_list(&join_list(&Reason::ALL)).unwrap(), Reason::ALL);
    }

    #[test]
    fn an_unknown_name_lists_the_known_ones() {
        let text = "nope".parse::<Reason>().unwrap_err().to_string();
        assert!(text.starts_with("\"nope\" is no skip reason"), "{text}");
        assert!(text.contains("root, fentry,"), "{text}");
    }

    #[test]
    fn log_lines_read_back_in_order() {
        let text = "root\ta\tneeds root\nnot a record\nfentry\tb\tEPERM: x\ty\n";
        assert_eq!(
            read_log(text),
            [
                Skipped {
                    reason: "root".into(),
                    test: "a".into(),
                    detail: "needs root".into(),
                },
                Skipped {
                    reason: "fentry".into(),
                    test: "b".into(),
                    detail: "EPERM: x\ty".into(),
                },
            ]
        );
    }

    /// Run by [`a_test_that_cannot_run_fails_unless_its_reason_is_allowed`] in a child
    /// process, with the environment it sets.
    #[test]
    #[ignore = "run in a child process by a_test_that_cannot_run_fails_unless_its_reason_is_allowed"]
    fn child_that_cannot_run() {
        assert!(
            std::env::var_os(LOG_VAR).is_some(),
            "a child of a_test_that_cannot_run_fails_unless_its_reason_is_allowed, not run alone"
        );
        cannot_run(Reason::Fentry, "EPERM from the kernel");
    }

    /// Runs [`child_that_cannot_run`] with `allow` (unset when `None`) and a fresh log; its
    /// success, output and the log's records.
    fn run_child(allow: Option<&str>) -> (bool, String, Vec<Skipped>) {
        let log = std::env::temp_dir().join(format!(
            "test-skip-{}-{}.log",
            std::process::id(),
            allow.unwrap_or("unset")
        ));
        let _ = std::fs::remove_file(&log);
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--ignored", "--exact", "tests::child_that_cannot_run"])
            .env(LOG_VAR, &log)
            .env_remove(ALLOW_VAR);
        if let Some(allow) = allow {
            cmd.env(ALLOW_VAR, allow);
        }
        let out = cmd.output().expect("running the test binary");
        let records = read_log(&std::fs::read_to_string(&log).unwrap_or_default());
        let _ = std::fs::remove_file(&log);
        // The harness prints a failure's panic on stdout; a skip goes to stderr.
        let output = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), output, records)
    }

    #[test]
    fn a_test_that_cannot_run_fails_unless_its_reason_is_allowed() {
        let (ok, output, records) = run_child(None);
        assert!(!ok, "passed with nothing allowed");
        assert!(
            output.contains(
                "tests::child_that_cannot_run cannot run here: EPERM from the kernel (the kernel \
                 refuses fentry programs, even to root). Fix that, or set \
                 MONITOR_TESTS_ALLOW_SKIP=fentry to skip it"
            ),
            "{output}"
        );
        assert_eq!(records, []);

        let (ok, _, records) = run_child(Some("root,cgroup-v2"));
        assert!(!ok, "passed with other reasons allowed");
        assert_eq!(records, []);

        let (ok, output, _) = run_child(Some("root,fentri"));
        assert!(
            !ok && output.contains("\"fentri\" is no skip reason"),
            "{output}"
        );

        let (ok, output, records) = run_child(Some("root,fentry"));
        assert!(ok, "failed although allowed: {output}");
        assert!(
            output.contains("SKIP [fentry] tests::child_that_cannot_run: EPERM from the kernel"),
            "{output}"
        );
        assert_eq!(
            records,
            [Skipped {
                reason: "fentry".into(),
                test: "tests::child_that_cannot_run".into(),
                detail: "EPERM from the kernel".into(),
            }]
        );
    }

    /// The test's thread carries its name, also with one test thread.
    #[test]
    fn the_skip_names_the_running_test() {
        assert!(test_name().ends_with("the_skip_names_the_running_test"));
    }
}
