//! `monitor doctor`: what this kernel offers and which event source the agent will therefore
//! use. Exits 0 when the agent can run here; the last line of the text output is the verdict.
use crate::flags::OutputFormat;
use std::{fmt::Write as _, path::PathBuf, process::ExitCode};

use super::privileges::{self, Needs, Requirement};

use serde::Serialize;

use crate::{
    action::reap::kernel_has_process_mrelease,
    agent::action_path::{HardAction, HardActionFlag},
    cgroupfs::CgroupVersion,
    engine::{
        attach_distance::{AttachDistance, GUARD_PERIOD, GUARD_WAIT_MAX},
        ids::CgroupRel,
    },
    node::read::online_cpus,
    source::{
        ebpf::MemcgHook,
        hook_plan,
        probe::{EventSource, KernelFeatures, MemcgMethod},
    },
};

#[derive(clap::Args, Debug)]
pub(crate) struct DoctorArgs {
    /// How to print the report.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// The agent's checkpoint directory, checked for being there and writable.
    #[arg(long, value_name = "DIR", default_value = crate::checkpoint::DEFAULT_CHECKPOINT_DIR)]
    pub checkpoint_dir: PathBuf,
    /// The node's kubelet configuration the agent is given, checked for being readable.
    #[arg(long, value_name = "FILE")]
    pub kubelet_config: Option<PathBuf>,
    /// The agent's KubeletConfiguration file (--config), checked for being readable.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The agent's manifests directory, checked for being readable.
    #[arg(long, value_name = "DIR")]
    pub pods: Option<PathBuf>,
    /// The kubepods cgroup the agent is given (default: detect `kubepods` or
    /// `kubepods.slice`), checked for being visible and writable.
    #[arg(long, value_name = "PATH", value_parser = CgroupRel::new)]
    pub kubepods_cgroup: Option<CgroupRel>,
    /// Check for an agent run with `--kube`. By default it still kills a pod evicted on a
    /// hard threshold on the node first, so CAP_KILL and the host PID namespace are needed;
    /// with `--kube-hard-action api` the kubelet stops every pod and they are not.
    #[arg(long)]
    pub kube: bool,
    #[command(flatten)]
    pub hard_action: HardActionFlag,
}

pub(crate) fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let features = KernelFeatures::probe();
    let needs = Needs {
        kills: !args.kube || args.hard_action.kube_hard_action == HardAction::Kill,
        memory: features.memory.as_ref().ok(),
        kubepods_cgroup: args.kubepods_cgroup.as_ref(),
        tracefs: features.tracefs.as_deref().map_err(String::as_str),
        checkpoint_dir: &args.checkpoint_dir,
        kubelet_config: args.kubelet_config.as_deref(),
        config: args.config.as_deref(),
        pods: args.pods.as_deref(),
    };
    let mut report = Report::from_features(&features).with_privileges(privileges::check(&needs));
    report.process_mrelease = Some(kernel_has_process_mrelease());
    report.checkpoint = Some(super::checkpoint::summary(&args.checkpoint_dir));
    if report.source == EventSource::Ebpf {
        report.stat_gate = Some(stat_gate(&AttachDistance::new(online_cpus())));
    }
    match args.output {
        OutputFormat::Text => print!("{}", report.to_text()),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The probed facts in the shape both outputs print.
#[derive(Debug, Serialize)]
struct Report {
    kernel: String,
    btf: bool,
    ring_buffer: bool,
    tracefs: Found<PathBuf>,
    programs: Vec<ProgramReport>,
    /// How per-cgroup memory is counted: `tracepoint`, `fentry`, or null (polled).
    memcg_hook: Option<MemcgMethod>,
    /// Each fentry program and the kernel function it would attach to, or why none.
    fentry: Found<Vec<FentryReport>>,
    /// Why memory is counted the way it is.
    memcg_reason: String,
    /// The cheaper memcg hooks passed over before the one chosen, each with why.
    memcg_passed_over: Vec<String>,
    cgroup: Found<CgroupReport>,
    psi: PsiReport,
    /// Whether the kernel has `process_mrelease` (5.15+), with which force reaps a killed
    /// pod's memory at once; unknown (null) when not probed.
    process_mrelease: Option<bool>,
    /// When the memcg stat programs run by default and what guards the node meanwhile; null
    /// when the agent polls (or not worked out, in unit tests).
    stat_gate: Option<String>,
    /// Whether the memory brake can hold the kubepods cgroup while a victim drains: cgroup v2
    /// has `memory.high`, v1 does not.
    memory_brake: bool,
    /// The checkpoint in `--checkpoint-dir`: valid, missing or damaged, and the damaged
    /// copies set aside (null in unit tests of the kernel part).
    checkpoint: Option<String>,
    /// Capabilities, namespaces and host paths (empty in unit tests of the kernel part).
    privileges: Vec<Requirement>,
    source: EventSource,
    /// The agent can run on this machine.
    ok: bool,
    summary: String,
}

/// A value, or why there is none.
#[derive(Debug, Serialize)]
#[serde(rename_all = "lowercase")]
enum Found<T> {
    Found(T),
    Missing(String),
}

#[derive(Debug, Serialize)]
struct ProgramReport {
    name: &'static str,
    hook: String,
    present: bool,
    /// Why its tracepoint's record does not fit the fields it reads; the program is skipped.
    mismatch: Option<String>,
    /// The loader attaches it for the chosen source.
    attach: bool,
    provides: &'static str,
    fallback: &'static str,
    since: &'static str,
}

#[derive(Debug, Serialize)]
struct FentryReport {
    name: &'static str,
    replaces: &'static str,
    function: Found<&'static str>,
    since: &'static str,
}

#[derive(Debug, Serialize)]
struct CgroupReport {
    version: CgroupVersion,
    memory_mount: PathBuf,
}

#[derive(Debug, Serialize)]
struct PsiReport {
    node: bool,
    cgroup: Option<PathBuf>,
}

impl Report {
    fn from_features(features: &KernelFeatures) -> Self {
        let source = features.source();
        let attached = features.programs_to_attach();
        let programs = features
            .programs
            .iter()
            .map(|p| ProgramReport {
                name: p.program.name,
                hook: p.program.hook(),
                present: p.present,
                mismatch: p.mismatch.clone(),
                attach: attached.contains(&p.program),
                provides: p.program.provides,
                fallback: p.program.fallback,
                since: p.program.since,
            })
            .collect();
        let by_fentry = features.memcg_method() == Some(MemcgMethod::Fentry);
        let fentry_count = if by_fentry {
            features.programs.len() - attached.len()
        } else {
            0
        };
        let (ok, summary) = match &features.memory {
            Ok(memory) => (
                true,
                format!(
                    "ok: agent will use {source} ({}/{} kernel programs{}), cgroup {} memory at {}",
                    attached.len() + fentry_count,
                    features.programs.len(),
                    if by_fentry { ", memcg by fentry" } else { "" },
                    memory.version,
                    memory.mount.display()
                ),
            ),
            Err(reason) => (false, format!("error: the agent cannot run here: {reason}")),
        };
        let memcg_hook = features.memcg_method();
        let fentry = found(features.fentry.clone().map(|targets| {
            targets
                .into_iter()
                .map(|t| FentryReport {
                    name: t.program.name,
                    replaces: t.program.replaces,
                    function: found(t.function),
                    since: t.program.since,
                })
                .collect::<Vec<_>>()
        }));
        let memcg_reason = memcg_reason(memcg_hook, &fentry);
        // The cheaper hooks the plan tried first, and why each could not be used.
        let memcg_passed_over =
            hook_plan::passed_over(MemcgHook::Auto, &features.hook_facts(), memcg_hook);
        Self {
            kernel: features.release.clone(),
            btf: features.btf,
            ring_buffer: features.ring_buffer,
            tracefs: found(features.tracefs.clone()),
            programs,
            memcg_hook,
            fentry,
            memcg_reason,
            memcg_passed_over,
            cgroup: found(
                features
                    .memory
                    .as_ref()
                    .map(|m| CgroupReport {
                        version: m.version,
                        memory_mount: m.mount.clone(),
                    })
                    .map_err(String::clone),
            ),
            psi: PsiReport {
                node: features.psi.node,
                cgroup: features.psi.cgroup.clone(),
            },
            process_mrelease: None,
            stat_gate: None,
            memory_brake: features
                .memory
                .as_ref()
                .is_ok_and(|m| m.version == CgroupVersion::V2),
            checkpoint: None,
            privileges: Vec::new(),
            source,
            ok,
            summary,
        }
    }

    /// Adds the privilege checks; a required one missing makes the verdict an error naming
    /// every missing one.
    fn with_privileges(mut self, privileges: Vec<Requirement>) -> Self {
        let missing: Vec<String> = privileges
            .iter()
            .filter(|r| r.required && !r.granted)
            .map(|r| format!("{} ({})", r.name, r.purpose))
            .collect();
        if !missing.is_empty() {
            let missing = format!("missing {}", missing.join(", "));
            self.summary = if self.ok {
                format!("error: the agent cannot run here: {missing}")
            } else {
                format!("{}; {missing}", self.summary)
            };
            self.ok = false;
        }
        self.privileges = privileges;
        self
    }

    fn to_text(&self) -> String {
        let yes_no = |b: bool, yes: &str, no: &str| if b { yes } else { no }.to_string();
        let mut out = String::new();
        let mut line = |label: &str, value: String| {
            let _ = writeln!(out, "{label:<14}{value}");
        };
        line("kernel", self.kernel.clone());
        line(
            "btf",
            yes_no(self.btf, "present", "missing (CONFIG_DEBUG_INFO_BTF)"),
        );
        line(
            "ring buffer",
            yes_no(self.ring_buffer, "supported", "unsupported (needs 5.8)"),
        );
        line(
            "tracefs",
            match &self.tracefs {
                Found::Found(root) => root.display().to_string(),
                Found::Missing(reason) => format!("unavailable: {reason}"),
            },
        );
        line(
            "cgroup",
            match &self.cgroup {
                Found::Found(c) => format!(
                    "{}, memory controller at {}",
                    c.version,
                    c.memory_mount.display()
                ),
                Found::Missing(reason) => format!("unusable: {reason}"),
            },
        );
        line(
            "psi",
            format!(
                "node {}, per cgroup {}",
                yes_no(self.psi.node, "yes", "no"),
                self.psi
                    .cgroup
                    .as_ref()
                    .map_or("no".into(), |root| format!("under {}", root.display()))
            ),
        );
        line("source", self.source.to_string());
        if let Some(present) = self.process_mrelease {
            line(
                "reap",
                yes_no(
                    present,
                    "process_mrelease: a forced pod's memory comes back at once",
                    "no process_mrelease (needs 5.15): a forced pod frees its memory as it exits",
                ),
            );
        }
        if let Some(gate) = &self.stat_gate {
            line("stat gate", gate.clone());
        }
        line(
            "brake",
            yes_no(
                self.memory_brake,
                "memory.high on the kubepods cgroup holds the pods' growth while a victim drains",
                "none: cgroup v1 has no memory.high; the grace projection and reap protect the \
                 node",
            ),
        );
        line("memory", self.memcg_reason.clone());
        if let Some(checkpoint) = &self.checkpoint {
            line("checkpoint", checkpoint.clone());
        }
        if !self.memcg_passed_over.is_empty() {
            line("passed over", self.memcg_passed_over.join("; "));
        }
        if !self.privileges.is_empty() {
            let _ = writeln!(out, "privileges");
        }
        for r in &self.privileges {
            let state = match (&r.problem, r.required) {
                (None, _) => "granted".to_string(),
                (Some(problem), true) => format!("MISSING ({problem})"),
                (Some(problem), false) => format!("not granted ({problem})"),
            };
            let _ = writeln!(out, "  {:<22}{state}: {}", r.name, r.purpose);
        }
        let _ = writeln!(out, "kernel programs");
        let width = self
            .programs
            .iter()
            .map(|p| p.hook.len())
            .max()
            .unwrap_or(0);
        for p in &self.programs {
            let state = match (p.present, p.attach) {
                (true, _) if p.mismatch.is_some() => format!(
                    "present, skipped: {}: {}",
                    p.mismatch.as_deref().unwrap_or_default(),
                    p.fallback
                ),
                (true, true) => format!("present, attached: {}", p.provides),
                (true, false) => format!("present, unused with {}: {}", self.source, p.fallback),
                (false, _) if matches!(self.tracefs, Found::Missing(_)) => {
                    format!("unknown without tracefs: {}", p.fallback)
                }
                (false, _) if p.hook.starts_with("memcg/") && self.memcg_hook.is_some() => {
                    format!("missing (since {}): counted with fentry instead", p.since)
                }
                (false, _) => format!("missing (since {}): {}", p.since, p.fallback),
            };
            let _ = writeln!(out, "  {:<width$}  {state}", p.hook);
        }
        let _ = writeln!(out, "{}", self.summary);
        out
    }
}

/// The default `--attach-within auto` on this node, with the guard that holds meanwhile.
fn stat_gate(distance: &AttachDistance) -> String {
    format!(
        "the memcg stat programs run only within {distance} of a memory threshold \
         (--attach-within auto; the read time is the agent's own once it runs); farther away \
         page faults run none of the agent's code, and the guard reads the node's and the \
         kubepods cgroup's memory as often as growth could bring it near (every \
         {GUARD_PERIOD:?} at that distance, at most every {GUARD_WAIT_MAX:?})"
    )
}

/// Why memory is counted with `hook`, in one line.
fn memcg_reason(hook: Option<MemcgMethod>, fentry: &Found<Vec<FentryReport>>) -> String {
    let functions = |reports: &[FentryReport]| {
        reports
            .iter()
            .filter_map(|r| match r.function {
                Found::Found(f) => Some(f),
                Found::Missing(_) => None,
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (hook, fentry) {
        (Some(MemcgMethod::RawTracepoint), _) => "counted by the kernel at the memcg \
             tracepoints, hooked as raw tracepoints (6.13+; BTF gives them the prototype the \
             programs read)"
            .into(),
        (Some(MemcgMethod::Tracepoint), _) => "counted by the kernel at the memcg \
             tracepoints, hooked as classic tracepoints (6.13+)"
            .into(),
        (Some(MemcgMethod::Fentry), Found::Found(reports)) => format!(
            "counted by the kernel with fentry on {} (no memcg tracepoints before 6.13; BTF \
             has these functions with the expected prototype)",
            functions(reports)
        ),
        (_, Found::Found(reports)) => {
            let why: Vec<String> = reports
                .iter()
                .filter_map(|r| match &r.function {
                    Found::Missing(reason) => Some(format!("{}: {reason}", r.name)),
                    Found::Found(_) => None,
                })
                .collect();
            format!(
                "polled: no memcg tracepoints, and fentry cannot stand in ({})",
                why.join("; ")
            )
        }
        (_, Found::Missing(reason)) => {
            format!("polled: no memcg tracepoints, and fentry needs BTF ({reason})")
        }
    }
}

fn found<T>(result: Result<T, String>) -> Found<T> {
    match result {
        Ok(value) => Found::Found(value),
        Err(reason) => Found::Missing(reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{probe::tests::facts, programs::PROGRAMS};

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
                "memory        polled: no memcg tracepoints, and fentry needs BTF (not probed in this test)"
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
        features.programs[1].mismatch = Some("no field val in this kernel's record".into());
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
                    "error: the agent cannot run here: missing CAP_KILL (a purpose), cgroupfs \
                     (a purpose)",
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
                    assert!(text.contains("  CAP_KILL              MISSING (not in the effective set): a purpose\n"), "{name}: {text}");
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
}
