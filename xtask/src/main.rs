//! Developer tasks: `cargo xtask <task>`. Each task that builds calls `setup` first, so a fresh
//! machine needs only one command.
mod arch;
mod bench;
mod demo;
mod disk;
mod image;
mod phases;
mod process;
mod setup;
mod skips;
mod tasks;
mod vm;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Build, run and test the memory-pressure monitor")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building needs (nightly rust-src, LLVM dev packages, bpf-linker); idempotent.
    Setup,
    /// Build the agent with its embedded kernel programs.
    Build {
        /// Build with optimizations.
        #[arg(long)]
        release: bool,
        /// Build the image's static (musl) release binary for this architecture instead,
        /// installing its Rust target and C cross compiler first; prints the binary's path.
        #[arg(long, value_name = "ARCH")]
        target: Option<arch::Arch>,
    },
    /// Build, then run `monitor` with ARGS (as root: loading kernel programs needs it).
    Run {
        /// Build with optimizations.
        #[arg(long)]
        release: bool,
        /// Arguments for `monitor`.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Run every test: the rustfmt check and clippy (warnings are errors) first, then unit
    /// tests, root integration tests against the real kernel, VM tests.
    /// A test that cannot run fails, unless MONITOR_TESTS_ALLOW_SKIP names its reason; this
    /// allows the reasons the machine gives (printed first; never `root`, which a developer
    /// may add) and lists every skip at the end.
    Test {
        /// Skip everything that boots a VM: the cgroup v2 / older-kernel tests and the
        /// benchmark smoke's VM cases.
        #[arg(long)]
        no_vm: bool,
    },
    /// Simulate a dense node (40 pods in real cgroups with real allocating processes) and run
    /// the agent on it with a live view of the ranking and its decisions; cleans up on exit.
    Demo {
        /// How long to run (seconds).
        #[arg(long, default_value_t = 60)]
        duration: u64,
        /// Let the agent really kill the demo pods' processes instead of --dry-run.
        #[arg(long)]
        enforce: bool,
    },
    /// Measure reaction latency, overhead at density, kernel cost (also tracepoints against
    /// fentry, on Linux 6.18 under qemu), ranking speed, the OOM race (win rates per margin
    /// and source, --kube included) and the reaction under the DaemonSet's CPU limit, each
    /// against a baseline measured in the same run (root, except `ranking`).
    Bench {
        /// One benchmark only (default: all).
        #[arg(value_enum)]
        name: Option<bench::Name>,
        /// A few trials a case: rough figures in minutes, not the ones docs/benchmarks.md
        /// quotes.
        #[arg(long, conflicts_with = "smoke")]
        quick: bool,
        /// Each case once on the test build, checking that its trial ran to its end and its
        /// figures parse, never their values (what `cargo xtask test` runs).
        #[arg(long)]
        smoke: bool,
        /// Also print the results as one JSON object on the last line.
        #[arg(long)]
        json: bool,
        /// A flag for every agent the benchmarks start, to measure a setting against the
        /// default in back-to-back runs (repeatable), e.g.
        /// `--agent-flag=--realtime-priority=10`.
        #[arg(long = "agent-flag", value_name = "FLAG", allow_hyphen_values = true)]
        agent_flags: Vec<String>,
        /// Measure this `monitor` binary instead of the build's, e.g. one built at an older
        /// commit, to put two versions side by side in back-to-back runs.
        #[arg(long, value_name = "PATH")]
        agent: Option<std::path::PathBuf>,
        /// The CPU limit the `starved` bench holds the agent to, in millicores (default: the
        /// DaemonSet's 100m).
        #[arg(long, value_name = "MILLICORES", default_value_t = bench::DAEMONSET_MILLICORES,
              value_parser = clap::value_parser!(u64).range(1..=64_000))]
        cpu_limit: u64,
        /// The `starved` bench's pod counts, repeatable (default: 1,000 and 10,000; 10,000
        /// with --quick).
        #[arg(long, value_name = "N",
              value_parser = clap::value_parser!(u64).range(10..=50_000))]
        pods: Vec<u64>,
    },
    /// Build the container image: for linux/amd64 and linux/arm64 each, a static (musl)
    /// `monitor` as the only file of an image made from scratch, both in one OCI index
    /// written as an archive to target/image/monitor.oci.tar (rebuilt only when a binary
    /// changed). Push it, both platforms, with
    /// `skopeo copy --all oci-archive:target/image/monitor.oci.tar docker://REGISTRY/monitor:TAG`.
    Image,
    /// Boot Debian's kernels under qemu with cgroup v2 and run the end-to-end tests there
    /// (`monitor doctor` first): x86_64 6.1, 6.12 and 5.10 (the poll tier), and arm64 6.12
    /// and 6.1 (its poll tier) with a subset of the tests, built for arm64.
    VmTest {
        /// Only these test executables of the tests crate, by file name, e.g.
        /// `trace_incidents agent_kube` (default: all of them).
        only: Vec<String>,
        /// The agent of the container image (static, release), as `cargo xtask test` runs
        /// it in the VMs, instead of the debug build (arm64 VMs always run the image's).
        #[arg(long)]
        image_agent: bool,
        /// Only the VMs of this architecture (repeatable; default: both).
        #[arg(long, value_name = "ARCH")]
        arch: Vec<arch::Arch>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Setup => setup::run(),
        Task::Build {
            target: Some(arch), ..
        } => setup::run().and_then(|()| {
            println!("{}", image::static_binary(arch)?.display());
            Ok(())
        }),
        Task::Build { release, .. } => setup::run().and_then(|()| tasks::build(release)),
        Task::Run { release, args } => setup::run().and_then(|()| tasks::run(release, &args)),
        Task::Test { no_vm } => tasks::test(!no_vm),
        Task::Demo { duration, enforce } => {
            setup::run().and_then(|()| demo::run(std::time::Duration::from_secs(duration), enforce))
        }
        Task::Bench {
            name,
            quick,
            smoke,
            json,
            agent_flags,
            agent,
            cpu_limit,
            pods,
        } => {
            let size = match (smoke, quick) {
                (true, _) => bench::Size::Smoke,
                (false, true) => bench::Size::Quick,
                (false, false) => bench::Size::Full,
            };
            let options = bench::Options {
                json,
                agent,
                agent_flags,
                cpu_limit,
                pods: pods.into_iter().map(|n| n as usize).collect(),
                machines: bench::Machines::Both,
            };
            setup::run().and_then(|()| bench::run(name, size, options))
        }
        Task::Image => setup::run().and_then(|()| image::build(|_, _| {}).map(drop)),
        Task::VmTest {
            only,
            image_agent,
            arch,
        } => setup::run().and_then(|()| {
            let agent = if image_agent {
                Some(image::static_binary(arch::Arch::X86_64)?)
            } else {
                None
            };
            let arches = if arch.is_empty() {
                arch::Arch::ALL.to_vec()
            } else {
                arch
            };
            vm::run(&only, &arches, agent.as_deref(), &mut |vm, took, failed| {
                let verdict = if failed { "failed" } else { "passed" };
                eprintln!("vm-test: {vm} {verdict} in {:.0} s", took.as_secs_f64());
            })
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}
