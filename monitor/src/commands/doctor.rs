//! `monitor doctor`: what this kernel offers and which event source the agent will therefore
//! use, and whether the agent can run here as the flags given (the agent's own) configure it.
//! Exits 0 when it can, 1 when it cannot, naming what is missing and how to provide it; the
//! last line of the text output is the verdict.
use crate::flags::OutputFormat;
use std::{fmt::Write as _, path::PathBuf, process::ExitCode};

use super::privileges::{self, Needs, Requirement};

use serde::Serialize;

use crate::{
    action::hard_action::{HardAction, HardActionFlag},
    action::reap::kernel_has_process_mrelease,
    cgroupfs::{CgroupVersion, reclaim},
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

/// Report what this kernel and host offer the agent, which event source it will use, and
/// whether it can run here with the flags given: pass the agent's own (`--checkpoint-dir`,
/// `--config`, `--pods`, `--kubepods-cgroup`, `--kube`, `--kube-hard-action`).
///
/// Exit status: 0 when the agent can run as configured; 1 when it cannot (no memory cgroup
/// controller, no kubepods cgroup, a missing capability or host path, a configuration it would
/// refuse, a pods directory that is not one), the last line naming each with how to fix it.
#[derive(clap::Args, Debug)]
pub(crate) struct DoctorArgs {
    /// How to print the report.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// The agent's checkpoint directory, checked for being there and writable.
    #[arg(long, value_name = "DIR", default_value = crate::checkpoint::DEFAULT_CHECKPOINT_DIR)]
    pub checkpoint_dir: PathBuf,
    /// The node's kubelet configuration the agent is given, loaded as the agent loads it.
    #[arg(long, value_name = "FILE")]
    pub kubelet_config: Option<PathBuf>,
    /// The agent's KubeletConfiguration file (--config), loaded as the agent loads it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The agent's manifests directory, checked for being a directory it can list.
    #[arg(long, value_name = "DIR")]
    pub pods: Option<PathBuf>,
    /// The kubepods cgroup the agent is given (default: detect `kubepods` or
    /// `kubepods.slice`, as the agent does), checked for being there, visible and writable.
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
    /// Whether `--reclaim-first` can take page cache back here (`memory.reclaim`, cgroup v2,
    /// Linux 5.19), or why not.
    reclaim_first: Found<bool>,
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
                mismatch: p.mismatch.as_ref().map(ToString::to_string),
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
        let fentry = found(
            features
                .fentry
                .clone()
                .map_err(|e| e.to_string())
                .map(|targets| {
                    targets
                        .into_iter()
                        .map(|t| FentryReport {
                            name: t.program.name,
                            replaces: t.program.replaces,
                            function: found(t.function.map_err(|e| e.to_string())),
                            since: t.program.since,
                        })
                        .collect::<Vec<_>>()
                }),
        );
        // A stat item BTF does not name (without BTF the fentry line says why).
        let missing_item = features.stat_items.as_ref().err().filter(|_| features.btf);
        let memcg_reason = memcg_reason(memcg_hook, &fentry, missing_item);
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
            reclaim_first: found(
                features
                    .memory
                    .as_ref()
                    .map_err(String::clone)
                    .and_then(|m| reclaim::refusal(m.version, &m.mount))
                    .map(|()| true),
            ),
            checkpoint: None,
            privileges: Vec::new(),
            source,
            ok,
            summary,
        }
    }

    /// Adds the privilege checks; a required one missing makes the verdict an error naming
    /// every missing one with why, which says how to provide it.
    fn with_privileges(mut self, privileges: Vec<Requirement>) -> Self {
        let missing: Vec<String> = privileges
            .iter()
            .filter(|r| r.required && !r.granted)
            .map(|r| match &r.problem {
                Some(problem) => format!("{} ({problem})", r.name),
                None => r.name.clone(),
            })
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
        line(
            "reclaim first",
            match &self.reclaim_first {
                Found::Found(_) => {
                    "possible: --reclaim-first takes page cache back through memory.reclaim \
                     before an eviction"
                        .to_string()
                }
                Found::Missing(reason) => format!("refused here: {reason}"),
            },
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
fn memcg_reason(
    hook: Option<MemcgMethod>,
    fentry: &Found<Vec<FentryReport>>,
    missing_item: Option<&String>,
) -> String {
    if let Some(why) = missing_item {
        return format!(
            "polled, woken by PSI: the kernel programs cannot count memory on this kernel \
             ({why}; the stat items they count are all named from Linux 5.11)"
        );
    }
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
            format!("polled: no memcg tracepoints, and no fentry: {reason}")
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
mod tests;
