//! The agent's output going nowhere (root only): stdout and stderr on a full device, or on
//! pipes whose reader is gone (a restarted journald, a closed terminal). A failed write must
//! cost its line, never the eviction: the right pod still dies, the agent keeps running, and
//! `/metrics` counts the lost lines.
use std::{
    fs::File,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use tests::{AgentScene, MonitorProcess, TestPod, process_alive, running_as_root};

/// The hard grace period of 1 s, then force, on a slow VM.
const KILL: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug)]
enum Sink {
    /// `/dev/full`: every write fails with ENOSPC.
    FullDevice,
    /// Pipes whose read ends are closed: every write fails with EPIPE.
    ClosedPipe,
}

/// A loopback address with a port free a moment ago.
fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// The agent on `scene` with both output streams on `sink`, its status view every 200 ms.
fn start_blind(scene: &AgentScene, sink: Sink, rust_log: &str, addr: SocketAddr) -> Child {
    let addr_arg = addr.to_string();
    let mut command: Command = MonitorProcess::command(scene.agent_args(&[
        "--metrics-addr",
        &addr_arg,
        "--status-interval",
        "200ms",
    ]));
    command.env("RUST_LOG", rust_log).stdin(Stdio::null());
    match sink {
        Sink::FullDevice => {
            let full = || Stdio::from(File::options().write(true).open("/dev/full").unwrap());
            command.stdout(full()).stderr(full());
            command.spawn().expect("start the agent")
        }
        Sink::ClosedPipe => {
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
            let mut child = command.spawn().expect("start the agent");
            drop(child.stdout.take());
            drop(child.stderr.take());
            child
        }
    }
}

/// The answer to `GET path` once the agent answers it with 200, within `within`; fails at
/// once when the agent exits.
fn wait_for_200(agent: &mut Child, addr: SocketAddr, path: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = agent.try_wait().expect("agent status") {
            panic!("the agent exited ({status}) while {path} was awaited");
        }
        if let Ok(answer) = get(addr, path)
            && answer.starts_with("HTTP/1.1 200")
        {
            return answer;
        }
        assert!(Instant::now() < deadline, "{path} never answered 200");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

fn metric(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {body}"))
}

fn evicts_with_output_going_nowhere(name: &str, sink: Sink, rust_log: &str) {
    let scene = AgentScene::new(name, "10s", "10s");
    let addr = free_addr();
    let mut agent = start_blind(&scene, sink, rust_log, addr);
    wait_for_200(&mut agent, addr, "/readyz", Duration::from_secs(30));
    let hog = TestPod::new("hog").request_mib(20);
    let calm = TestPod::new("calm").request_mib(100);
    let calm_proc = scene.start_pod(&calm);
    let mut hog_proc = scene.start_pod(&hog);
    // No answer to wait for: the eviction may end the helper before the allocation does.
    hog_proc.command("alloc 230");

    scene.wait_until_empty(&hog, KILL);
    assert!(
        process_alive(calm_proc.pid()),
        "{sink:?}: only the hog died"
    );
    assert!(
        agent.try_wait().expect("agent status").is_none(),
        "{sink:?}, RUST_LOG={rust_log}: the agent died of its output"
    );
    let metrics = wait_for_200(&mut agent, addr, "/metrics", Duration::from_secs(10));
    assert_eq!(
        metric(
            &metrics,
            "monitor_evictions_total{eviction_signal=\"allocatableMemory.available\"}"
        ),
        1.0,
        "{metrics}"
    );
    // The status view writes to stderr every 200 ms whatever RUST_LOG says.
    assert!(
        metric(&metrics, "monitor_log_write_failures_total") > 0.0,
        "{metrics}"
    );
    let _ = agent.kill();
    let _ = agent.wait();
}

#[test]
fn a_full_device_as_stdout_and_stderr_costs_lines_not_the_eviction() {
    if !running_as_root("a_full_device_as_stdout_and_stderr_costs_lines_not_the_eviction") {
        return;
    }
    evicts_with_output_going_nowhere("log-sink-full", Sink::FullDevice, "info");
}

#[test]
fn closed_pipes_as_stdout_and_stderr_cost_lines_not_the_eviction() {
    if !running_as_root("closed_pipes_as_stdout_and_stderr_cost_lines_not_the_eviction") {
        return;
    }
    evicts_with_output_going_nowhere("log-sink-pipe", Sink::ClosedPipe, "debug");
}

#[test]
fn logging_off_with_a_broken_stderr_still_evicts() {
    if !running_as_root("logging_off_with_a_broken_stderr_still_evicts") {
        return;
    }
    evicts_with_output_going_nowhere("log-sink-off", Sink::ClosedPipe, "off");
}
