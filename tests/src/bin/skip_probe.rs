//! Which tests may skip on this machine: prints each skip reason that holds here, one a line
//! as `reason<TAB>what was found`, or with `--allow-list` the reasons as the comma-separated
//! list `MONITOR_TESTS_ALLOW_SKIP` takes. `cargo xtask test` runs it before the tests, on the
//! host and in the VM.
//!
//! Only what the machine decides counts: the kernel, its policy, the cgroup layout and, in the
//! test VM, what the VM cannot hold. Never `root` (the developer chooses to run as root) and,
//! on the host, never a tool `cargo xtask test` installs itself.
use std::process::ExitCode;

use monitor::{
    cgroupfs::CgroupVersion,
    source::{
        ebpf::{KernelSource, LoadOptions, MemcgHook, cgroup_map_entries},
        probe::{KernelFeatures, MemcgMethod},
    },
};
use test_skip::Reason;
use tests::has_cap_sys_resource;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let list = match args.as_slice() {
        [] => false,
        [flag] if flag == "--allow-list" => true,
        _ => {
            eprintln!(
                "usage: skip_probe [--allow-list]\n\nPrints the reasons tests may skip for on \
                 this machine (`reason<TAB>why` lines), or with --allow-list the list \
                 MONITOR_TESTS_ALLOW_SKIP takes."
            );
            return ExitCode::from(2);
        }
    };
    let found = reasons_here();
    if list {
        let reasons: Vec<Reason> = found.iter().map(|(reason, _)| *reason).collect();
        println!("{}", test_skip::join_list(&reasons));
    } else {
        for (reason, why) in found {
            println!("{reason}\t{why}");
        }
    }
    ExitCode::SUCCESS
}

/// The reasons that hold here, each with what was found.
fn reasons_here() -> Vec<(Reason, String)> {
    let in_vm = std::env::var_os("MONITOR_VM").is_some();
    let features = KernelFeatures::probe();
    let mut found = Vec::new();
    if in_vm {
        found.push((Reason::HostOnly, "this is the test VM".to_string()));
        found.push((Reason::Tmux, "the VM holds no tmux".to_string()));
        found.push((Reason::Image, "the VM holds no podman".to_string()));
    } else {
        found.push((Reason::VmOnly, "this is not the test VM".to_string()));
        // Not installed by `cargo xtask test`: the machine has kubectl or has not.
        if let Err(why) = tests::deploy_files::kubectl_version() {
            found.push((Reason::Kubectl, why));
        }
    }
    match &features.memory {
        Ok(memory) if memory.version == CgroupVersion::V1 => found.push((
            Reason::CgroupV2,
            format!(
                "the memory controller is on cgroup v1 at {}",
                memory.mount.display()
            ),
        )),
        Ok(_) => {}
        Err(e) => eprintln!("skip_probe: no memory controller: {e}"),
    }
    match &features.memory {
        Ok(memory) if memory.version == CgroupVersion::V2 => found.push((
            Reason::FreezerV1,
            "the memory controller is on cgroup v2: pods freeze with cgroup.freeze".to_string(),
        )),
        _ if !std::path::Path::new(tests::V1_FREEZER)
            .join("cgroup.procs")
            .exists() =>
        {
            found.push((
                Reason::FreezerV1,
                format!("no cgroup v1 freezer is mounted at {}", tests::V1_FREEZER),
            ));
        }
        _ => {}
    }
    if !features.btf {
        found.push((Reason::Btf, "no /sys/kernel/btf/vmlinux".to_string()));
    }
    if let Err(e) = &features.tracefs {
        found.push((Reason::Tracefs, e.clone()));
    }
    let tracepoints = features.memcg_method() == Some(MemcgMethod::Tracepoint);
    // Without tracefs nothing is known of the tracepoints (and as root it would be mounted).
    if !tracepoints && features.tracefs.is_ok() {
        found.push((
            Reason::MemcgTracepoints,
            format!("Linux {} has no usable memcg tracepoints", features.release),
        ));
    }
    if !features.psi.node && features.psi.cgroup.is_none() {
        found.push((Reason::Psi, "no readable memory pressure file".to_string()));
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        if !has_cap_sys_resource() {
            found.push((
                Reason::CapSysResource,
                "CAP_SYS_RESOURCE is not in root's effective set".to_string(),
            ));
        }
        let fentry = fentry_refusal(&features);
        let polled = !tracepoints && (fentry.is_some() || features.memcg_method().is_none());
        if let Some(why) = fentry {
            found.push((Reason::Fentry, why));
        }
        if polled {
            found.push((
                Reason::MemcgPrograms,
                "memory is polled: no memcg tracepoints, and no fentry".to_string(),
            ));
        }
    }
    found
}

/// Why the kernel refuses the fentry programs to root, when it does: their attach fails with
/// EPERM (a security policy). Other failures are no reason to skip, and are not reported.
fn fentry_refusal(features: &KernelFeatures) -> Option<String> {
    let memory = features.memory.as_ref().ok()?;
    // The ring buffer's reader registers with a tokio reactor.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    let _reactor = runtime.enter();
    let source = KernelSource::load(LoadOptions {
        step_bytes: 1 << 20,
        hierarchy_id: memory.hierarchy_id,
        memcg_hook: MemcgHook::Fentry,
        budget_pages: None,
        cgroup_map_entries: cgroup_map_entries(0),
    })
    .inspect_err(|e| eprintln!("skip_probe: loading the kernel programs: {e}"))
    .ok()?;
    if source.tracks_memory() {
        return None;
    }
    let reasons: Vec<String> = source
        .skipped()
        .iter()
        .map(|s| format!("{}: {}", s.program.name, s.reason))
        .collect();
    let reasons = reasons.join("; ");
    reasons
        .contains("Operation not permitted")
        .then(|| format!("fentry attach refused: {reasons}"))
}
