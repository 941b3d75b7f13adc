//! `monitor doctor`'s report from probed facts: the kernel part, the verdict and both outputs.
use super::*;
use crate::source::{probe::tests::facts, programs::PROGRAMS, tracepoint_format::LayoutError};

/// The 6.1 VM as BTF cannot offer fentry (see [`vm_features_with_fentry`]): cgroup v2,
/// BTF, ring buffer, cgroup tracepoints but no memcg ones.
fn vm_features() -> KernelFeatures {
    KernelFeatures {
        release: "6.1.0-57-cloud-amd64".into(),
        ..facts(true, true, |program| program.category != "memcg")
    }
}

/// The 6.1 and 6.12 VMs as they are: the memcg functions in BTF.
fn vm_features_with_fentry() -> KernelFeatures {
    crate::source::probe::tests::with_fentry(vm_features())
}

#[test]
fn kernels_before_6_13_say_fentry_and_why() {
    let report = Report::from_features(&vm_features_with_fentry());
    let text = report.to_text();
    assert!(
        text.lines().any(|l| l
            == "memory        counted by the kernel with fentry on __mod_memcg_lruvec_state, \
                __mod_memcg_state (no memcg tracepoints before 6.13; BTF has these \
                functions with the expected prototype)"),
        "{text}"
    );
    assert!(
        program_line(&text, "memcg/mod_memcg_state")
            .ends_with(" missing (since 6.13): counted with fentry instead"),
        "{text}"
    );
    assert_eq!(
        text.lines().last(),
        Some(
            format!(
                "ok: agent will use ebpf ({0}/{0} kernel programs, memcg by fentry), cgroup v2 memory at /sys/fs/cgroup",
                PROGRAMS.len()
            )
            .as_str()
        )
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["source"], "ebpf");
    assert_eq!(json["memcg_hook"], "fentry");
    assert_eq!(
        json["fentry"]["found"][0]["function"]["found"],
        "__mod_memcg_lruvec_state"
    );
}

#[test]
fn without_fentry_the_reason_is_given() {
    let text = Report::from_features(&vm_features()).to_text();
    assert!(
        text.contains(
            "memory        polled: no memcg tracepoints, and no fentry: not probed in this test"
        ),
        "{text}"
    );
}

/// The text line of one program.
fn program_line<'a>(text: &'a str, hook: &str) -> &'a str {
    let prefix = format!("  {hook} ");
    text.lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no line for {hook} in {text}"))
}

#[test]
fn text_ends_with_the_verdict() {
    let text = Report::from_features(&vm_features()).to_text();
    let verdict = format!(
        "ok: agent will use ebpf+poll (5/{} kernel programs), cgroup v2 memory at /sys/fs/cgroup",
        PROGRAMS.len()
    );
    assert_eq!(text.lines().last(), Some(verdict.as_str()));
    assert!(
        program_line(&text, "memcg/mod_memcg_state").ends_with(
            " missing (since 6.13): fentry on __mod_memcg_state (5.11+), else poll \
                 memory.stat at the poll interval, sooner on PSI memory stalls"
        ),
        "{text}"
    );
    assert!(
        program_line(&text, "cgroup/cgroup_mkdir")
            .ends_with(" present, attached: new cgroups as they appear"),
        "{text}"
    );
}

#[test]
fn the_brake_is_named_on_cgroup_v2_and_its_absence_explained_on_v1() {
    let line = |features: &KernelFeatures| {
        let text = Report::from_features(features).to_text();
        text.lines()
            .find(|l| l.starts_with("brake "))
            .map_or_else(|| panic!("{text}"), str::to_string)
    };
    let v2 = vm_features();
    assert!(
        line(&v2).contains("memory.high on the kubepods cgroup"),
        "{}",
        line(&v2)
    );
    let mut v1 = vm_features();
    if let Ok(memory) = &mut v1.memory {
        memory.version = CgroupVersion::V1;
    }
    assert!(
        line(&v1).contains("cgroup v1 has no memory.high"),
        "{}",
        line(&v1)
    );
}

#[test]
fn no_memory_controller_fails_with_the_reason() {
    let mut features = vm_features();
    features.memory = Err("no memory cgroup controller is mounted".into());
    let report = Report::from_features(&features);
    assert!(!report.ok);
    assert_eq!(
        report.to_text().lines().last(),
        Some("error: the agent cannot run here: no memory cgroup controller is mounted")
    );
}

#[test]
fn present_but_unused_programs_say_so() {
    let mut features = vm_features();
    features.btf = false;
    let text = Report::from_features(&features).to_text();
    assert!(
        text.contains("present, unused with poll: rescan the hierarchy"),
        "{text}"
    );
    assert!(text.ends_with("kernel programs), cgroup v2 memory at /sys/fs/cgroup\n"));
    assert!(text.contains("agent will use poll (0/"), "{text}");
}

#[test]
fn a_tracepoint_whose_fields_differ_is_skipped_with_the_reason() {
    let mut features = facts(true, true, |_| true);
    features.programs[1].mismatch = Some(LayoutError::Missing("val"));
    let report = Report::from_features(&features);
    let text = report.to_text();
    assert!(
        program_line(&text, "memcg/mod_memcg_state").ends_with(
            " present, skipped: no field val in this kernel's record: fentry on \
             __mod_memcg_state (5.11+), else poll memory.stat at the poll interval, sooner \
             on PSI memory stalls"
        ),
        "{text}"
    );
    assert!(text.contains("agent will use ebpf+poll (5/"), "{text}");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(
        json["programs"][1]["mismatch"],
        "no field val in this kernel's record"
    );
}

#[test]
fn without_tracefs_programs_are_unknown() {
    let mut features = vm_features();
    features.tracefs = Err("tracefs at /sys/kernel/tracing is readable by root only".into());
    for p in &mut features.programs {
        p.present = false;
    }
    let text = Report::from_features(&features).to_text();
    assert!(
        text.contains("tracefs       unavailable: tracefs at"),
        "{text}"
    );
    assert!(
        program_line(&text, "cgroup/cgroup_rmdir")
            .ends_with(" unknown without tracefs: rescan the hierarchy at the resync interval"),
        "{text}"
    );
    assert!(!text.contains("missing"), "{text}");
}

#[test]
fn a_missing_required_privilege_fails_the_verdict_by_name() {
    let granted = |name: &str, required: bool, problem: Option<&str>| Requirement {
        name: name.into(),
        kind: privileges::Kind::Capability,
        required,
        granted: problem.is_none(),
        purpose: "a purpose",
        problem: problem.map(String::from),
    };
    let cases = [
        ("all granted", vec![granted("CAP_BPF", true, None)], None),
        (
            "an optional one missing",
            vec![granted(
                "CAP_SYS_ADMIN",
                false,
                Some("not in the effective set"),
            )],
            None,
        ),
        (
            "two required missing",
            vec![
                granted("CAP_KILL", true, Some("not in the effective set")),
                granted("cgroupfs", true, Some("no kubepods")),
            ],
            Some(
                "error: the agent cannot run here: missing CAP_KILL (not in the effective \
                 set), cgroupfs (no kubepods)",
            ),
        ),
    ];
    for (name, privileges, error) in cases {
        let report = Report::from_features(&vm_features()).with_privileges(privileges);
        let text = report.to_text();
        match error {
            None => assert!(
                report.ok && text.lines().last().unwrap().starts_with("ok: "),
                "{name}: {text}"
            ),
            Some(error) => {
                assert!(!report.ok, "{name}");
                assert_eq!(text.lines().last(), Some(error), "{name}");
                assert!(
                    text.contains(
                        "  CAP_KILL              MISSING (not in the effective set): a purpose\n"
                    ),
                    "{name}: {text}"
                );
            }
        }
    }
}

#[test]
fn the_stat_gate_names_the_distance_its_reasons_and_the_guard() {
    let text = stat_gate(&AttachDistance::new(2));
    for part in [
        "within 819.2Mi (4.0Gi/s: 2 CPUs at 2.0Gi/s",
        "--attach-within auto",
        "the guard reads the node's and the kubepods cgroup's memory as often as growth \
         could bring it near (every 100ms at that distance, at most every 5s)",
    ] {
        assert!(text.contains(part), "{part:?} in {text}");
    }
}

#[test]
fn json_names_what_the_vm_test_reads() {
    let json = serde_json::to_value(Report::from_features(&vm_features())).unwrap();
    assert_eq!(json["source"], "ebpf+poll");
    assert_eq!(json["cgroup"]["found"]["version"], "v2");
    assert_eq!(json["tracefs"]["found"], "/sys/kernel/tracing");
    assert_eq!(json["programs"][0]["hook"], "memcg/mod_memcg_lruvec_state");
    assert_eq!(json["programs"][0]["present"], false);
    assert_eq!(json["programs"][2]["attach"], true);
    assert_eq!(json["ok"], true);
}

/// Debian 11's 5.10 as its VM showed it: fentry's functions in BTF, but no `MEMCG_KMEM`
/// (5.11): the loader cannot configure the programs, so the agent polls, and says why.
#[test]
fn a_kernel_whose_btf_lacks_a_stat_item_is_polled_and_says_why() {
    let why = "reading stat item numbers from the kernel's BTF: enum memcg_stat_item has no \
               item MEMCG_KMEM in this kernel";
    let features = KernelFeatures {
        release: "5.10.0-32-cloud-amd64".into(),
        stat_items: Err(why.into()),
        ..vm_features_with_fentry()
    };
    let report = Report::from_features(&features);
    assert_eq!(report.source, EventSource::Poll);
    let text = report.to_text();
    assert!(
        text.lines().any(|l| l.starts_with(
            "memory        polled, woken by PSI: the kernel \
                                             programs cannot count memory on this kernel"
        ) && l.contains(why)
            && l.contains("Linux 5.11")),
        "{text}"
    );
    assert!(
        text.lines()
            .last()
            .is_some_and(|l| l.starts_with("ok: agent will use poll (0/")),
        "{text}"
    );
    // Without BTF nothing is named: the line says BTF is missing, not which item.
    let without_btf = KernelFeatures {
        btf: false,
        ..features
    };
    let text = Report::from_features(&without_btf).to_text();
    assert!(
        text.lines()
            .any(|l| l.starts_with("memory        polled: no memcg tracepoints, and fentry")),
        "{text}"
    );
}
