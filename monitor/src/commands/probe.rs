//! `monitor probe`: asks a running agent's probe socket (`--probe-socket`) whether it is
//! alive or ready, as the DaemonSet's exec probes do. The socket lies in the agent's own
//! directory, so the answer comes from the agent whoever holds its metrics port; it prints
//! the answer (the kubelet shows it in the probe's event) and exits 0 on 200, 1 otherwise.
use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::{Args, ValueEnum};

use crate::{
    flags::positive_duration,
    http_get::{self, Target},
};

/// The largest answer read: `/readyz` names each missing part in a line.
const MAX_ANSWER_BYTES: usize = 64 << 10;

/// Which endpoint to ask.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum Endpoint {
    /// `/healthz`: the event loop turned within the last 5 s.
    Healthz,
    /// `/readyz`: an event source runs, the pods are known, the checkpoint is writable and
    /// the metrics address is served.
    Readyz,
}

/// Ask a running agent whether it is alive (`healthz`) or ready (`readyz`) through its probe
/// socket: exit 0 when it answers 200, 1 otherwise, printing its answer or why there was
/// none. For the kubelet's exec probes: `monitor probe healthz --socket PATH`.
#[derive(Args, Debug)]
pub(crate) struct ProbeArgs {
    #[arg(value_enum)]
    pub endpoint: Endpoint,
    /// The agent's `--probe-socket`.
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,
    /// How long the agent has to answer (Go duration).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = positive_duration)]
    pub timeout: Duration,
}

pub(crate) fn run(args: &ProbeArgs) -> ExitCode {
    let path = match args.endpoint {
        Endpoint::Healthz => "/healthz",
        Endpoint::Readyz => "/readyz",
    };
    let target = Target::Unix(args.socket.clone());
    match http_get::get(&target, path, args.timeout, MAX_ANSWER_BYTES) {
        Ok(reply) => {
            print!("{}", String::from_utf8_lossy(&reply.body));
            if reply.status == 200 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            println!(
                "no answer from the agent at {}: {error}",
                args.socket.display()
            );
            ExitCode::FAILURE
        }
    }
}
