//! `monitor top` for real (root only): the terminal view runs in a tmux session of the test's
//! own against a running agent on a real kubepods tree, in a network namespace of the test's
//! own, and what it shows is read back with `tmux capture-pane`; and against a server that
//! answers 256 MiB, whose answers it refuses past 4 MiB, its memory staying small. Fails,
//! saying so, where tmux is not installed (unless the skip is allowed).
use std::{
    process::Command,
    time::{Duration, Instant},
};

use tests::{
    AgentScene, Reason, TestPod, cannot_run, in_own_network_namespace, monitor_bin, running_as_root,
};

/// How long a decision may take once the threshold is crossed (a slow VM included).
const DECIDE: Duration = Duration::from_secs(20);
/// The agent's address inside the test's network namespace, where it is free.
const ADDR: &str = "127.0.0.1:9753";
/// The priority of system-node-critical pods, wider than a narrow column.
const NODE_CRITICAL: i32 = 2_000_001_000;

/// A detached tmux session on a server of its own, killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// Runs `command` on a tmux server of its own, named after the test (`name`).
    fn start(name: &str, command: &str) -> Self {
        let tmux = Self {
            socket: format!("monitor-top-test-{}-{name}", std::process::id()),
        };
        let status = tmux
            .command()
            .args(["new-session", "-d", "-s", "top", "-x", "150", "-y", "45"])
            .arg(command)
            .env("TERM", "xterm-256color")
            .status()
            .expect("starting tmux");
        assert!(status.success(), "tmux new-session: {status}");
        tmux
    }

    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command.args(["-L", &self.socket]);
        command
    }

    fn screen(&self) -> String {
        let out = self
            .command()
            .args(["capture-pane", "-p", "-t", "top"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen shows every one of `texts`; returns it.
    fn wait_for(&self, texts: &[&str], within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let screen = self.screen();
            if texts.iter().all(|t| screen.contains(t)) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "{texts:?} not all shown after {within:?}:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").status();
    }
}

fn tmux_installed() -> bool {
    Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn top_shows_the_live_ranking_and_outlives_an_agent_restart() {
    if !running_as_root("top_shows_the_live_ranking") {
        return;
    }
    if !tmux_installed() {
        cannot_run(Reason::Tmux, "needs tmux (cargo xtask setup installs it)");
        return;
    }
    let scene = AgentScene::new("top-tmux", "10s", "5s");
    let over = TestPod::new("over").request_mib(20);
    let calm = TestPod::new("calm").request_mib(100);
    let critical = TestPod::new("critical")
        .request_mib(100)
        .priority(NODE_CRITICAL);
    in_own_network_namespace(|| {
        let agent_args = ["--dry-run", "--metrics-addr", ADDR];
        let mut agent = scene.start_agent(&agent_args);
        let _calm_proc = scene.start_pod(&calm);
        let _critical_proc = scene.start_pod(&critical);
        let mut over_proc = scene.start_pod(&over);
        over_proc.alloc(230);
        let decision = agent.next_decision(DECIDE);
        assert_eq!(decision["name"], "over", "{decision:#}");

        // Started inside the namespace, the tmux server and `top` live there too; the agent is
        // named by host name, as an operator would.
        let top = Tmux::start(
            "live",
            &format!(
                "{} top --addr localhost:9753 --interval 200ms",
                monitor_bin().display()
            ),
        );
        let screen = top.wait_for(
            &[
                "allocatableMemory.available [",
                "hard <100.0Mi MET",
                "ranking for allocatableMemory.available (3 pods)",
                "default/over",
                "exceeds its request",
                "default/calm",
                " 2000001000 ",
                "after #1: pods over their request go first",
                "would evict default/over",
                "kernel events",
            ],
            Duration::from_secs(15),
        );
        let over_row = screen.lines().position(|l| l.contains("default/over"));
        let calm_row = screen.lines().position(|l| l.contains("default/calm"));
        assert!(over_row < calm_row, "over ranks first:\n{screen}");

        // The `n` key filters by namespace: the only one here.
        top.command()
            .args(["send-keys", "-t", "top", "n"])
            .status()
            .expect("tmux send-keys");
        top.wait_for(&["(3 pods, namespace default)"], Duration::from_secs(5));

        agent.stop();
        top.wait_for(&["agent unreachable, retrying"], Duration::from_secs(10));

        let mut again = scene.start_agent(&agent_args);
        let screen = top.wait_for(&["source ", "default/over"], Duration::from_secs(20));
        assert!(!screen.contains("unreachable"), "{screen}");
        top.command()
            .args(["send-keys", "-t", "top", "q"])
            .status()
            .expect("tmux send-keys");
        again.stop();
    });
}

/// The peak resident memory of process `pid` (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// Answers every connection on `addr` with a 256 MiB body, with its length said in the head
/// on odd connections and without (to the end of the stream) on even ones.
fn huge_answers(addr: &str) {
    let listener = std::net::TcpListener::bind(addr).expect("binding the stranger");
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                use std::io::{Read as _, Write as _};
                let mut request = [0u8; 1024];
                let _ = stream.read(&mut request);
                let head = if n % 2 == 1 {
                    "HTTP/1.1 200 OK\r\nContent-Length: 268435456\r\n\r\n"
                } else {
                    "HTTP/1.1 200 OK\r\n\r\n"
                };
                let _ = stream.write_all(head.as_bytes());
                let piece = vec![b'['; 1 << 20];
                for _ in 0..256 {
                    if stream.write_all(&piece).is_err() {
                        return;
                    }
                }
            });
        }
    });
}

#[test]
fn top_reads_a_bounded_answer_whatever_answers_at_its_address() {
    if !running_as_root("top_reads_a_bounded_answer") {
        return;
    }
    if !tmux_installed() {
        cannot_run(Reason::Tmux, "needs tmux (cargo xtask setup installs it)");
        return;
    }
    in_own_network_namespace(|| {
        huge_answers(ADDR);
        let top = Tmux::start(
            "bounded",
            &format!(
                "exec {} top --addr {ADDR} --interval 200ms",
                monitor_bin().display()
            ),
        );
        top.wait_for(
            &["agent unreachable, retrying (an answer body over 4194304 bytes"],
            Duration::from_secs(15),
        );
        // Several reads of each kind.
        std::thread::sleep(Duration::from_secs(3));
        let out = top
            .command()
            .args(["display-message", "-p", "-t", "top", "#{pane_pid}"])
            .output()
            .expect("tmux display-message");
        let pid: u32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("the pane's pid");
        let peak = peak_rss_kib(pid);
        eprintln!(
            "monitor top against 256 MiB answers: peak RSS {} MiB",
            peak / 1024
        );
        // Its own code and a 4 MiB answer; it grew to 263 MiB before.
        assert!(peak < 64 * 1024, "monitor top peaked at {peak} KiB");
        top.command()
            .args(["send-keys", "-t", "top", "q"])
            .status()
            .expect("tmux send-keys");
    });
}
