//! Crash consistency of checkpoint writes: a child process rewrites the checkpoint in a loop and
//! is killed with SIGKILL at random moments. After every kill the file must verify and hold
//! either the last acknowledged write or the one after it, never anything else.
//!
//! The child is this test binary run again with `CHILD_DIR_ENV` set. Iterations default to 20;
//! set `MONITOR_CRASH_ITERATIONS=1000` for a stress run and `MONITOR_CRASH_SEED` to replay one.
//! The directory comes from `TMPDIR`; point it at a disk-backed file system to exercise real
//! fsync.
use std::env;
use std::ffi::OsString;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use monitor::checkpoint::{AtStart, StateManager};
use monitor::engine::checkpoint::{
    AgentState, MAX_RECENT_EVICTIONS, Memory, Mode, Now, SavedPod, decode,
};

const TEST_NAME: &str = "killed_writer_leaves_the_old_or_the_new_checkpoint";
const CHILD_DIR_ENV: &str = "MONITOR_CRASH_CHILD_DIR";
const ITERATIONS_ENV: &str = "MONITOR_CRASH_ITERATIONS";
const SEED_ENV: &str = "MONITOR_CRASH_SEED";
const DEFAULT_ITERATIONS: u64 = 20;
/// The child acknowledges each completed write with this marker and the generation.
const ACK: &str = "checkpoint-written ";

/// The content of generation `n`: a full eviction history makes each write take a while, so
/// kills land inside writes.
fn state_for(generation: u64) -> AgentState {
    let now = Now {
        unix_ms: 1_767_268_800_000 + generation,
        boot_id: "crash-test".into(),
        boot_ms: generation,
    };
    let mut state = Memory::default();
    for i in 0..MAX_RECENT_EVICTIONS {
        let pod = SavedPod {
            namespace: "crash".into(),
            name: format!("pod-{generation}-{i}"),
            uid: format!("uid-{generation}-{i}"),
        };
        state.record_eviction(pod, "memory.available", i as u64, &now);
    }
    state.count_events(generation, 0);
    AgentState {
        acting: state,
        written_by: Some(Mode::Acting),
        ..AgentState::default()
    }
}

fn generation_on_disk(dir: &Path) -> u64 {
    let bytes = std::fs::read(dir.join("agent_state")).expect("checkpoint readable");
    let decoded = decode(&bytes).expect("checkpoint verifies");
    let generation = decoded.state.acting.v1.counters.events_received;
    assert_eq!(
        decoded.state,
        state_for(generation),
        "content of generation {generation}"
    );
    generation
}

/// The child: continue from what is on disk and write the next generation until killed.
fn run_writer(dir: OsString) -> ! {
    let (mut manager, state, _) = StateManager::load_or_init(dir, Mode::Acting, AtStart::Load)
        .expect("child loads the checkpoint");
    let mut generation = state.acting.v1.counters.events_received;
    let mut stdout = std::io::stdout().lock();
    loop {
        generation += 1;
        manager
            .save_if_changed(&state_for(generation))
            .expect("child writes");
        writeln!(stdout, "{ACK}{generation}").expect("child acknowledges");
        stdout.flush().expect("child flushes");
    }
}

/// xorshift64: enough randomness for kill delays without a dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

fn env_number(name: &str) -> Option<u64> {
    let value = env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
    )
}

#[test]
fn killed_writer_leaves_the_old_or_the_new_checkpoint() {
    if let Some(dir) = env::var_os(CHILD_DIR_ENV) {
        run_writer(dir);
    }
    let iterations = env_number(ITERATIONS_ENV).unwrap_or(DEFAULT_ITERATIONS);
    let seed = env_number(SEED_ENV).unwrap_or_else(|| {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        (nanos as u64) | 1
    });
    eprintln!("crash test: {iterations} iterations, {SEED_ENV}={seed}");
    let mut rng = Rng(seed);

    let dir = tempfile::tempdir().unwrap();
    let (mut manager, _, _) =
        StateManager::load_or_init(dir.path(), Mode::Acting, AtStart::Load).unwrap();
    manager.save_if_changed(&state_for(0)).unwrap();
    drop(manager);

    let (mut kept_old, mut got_new, mut acknowledged) = (0, 0, 0);
    for iteration in 0..iterations {
        let before = generation_on_disk(dir.path());
        let mut child = Command::new(env::current_exe().unwrap())
            .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = thread::spawn(move || {
            let acks = BufReader::new(stdout).lines().map_while(Result::ok);
            // libtest may print the test's name on the same line as the first acknowledgement.
            let generation = |line: &str| line.split_once(ACK)?.1.parse::<u64>().ok();
            acks.filter_map(|line| generation(&line)).last()
        });

        // Startup takes a few tens of milliseconds; past it, the child does nothing but write.
        thread::sleep(Duration::from_micros(1_000 + rng.below(100_000)));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        let mut stderr = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "iteration {iteration}: the writer stopped by itself ({status}):\n{stderr}"
        );

        let last_ack = reader.join().unwrap();
        acknowledged += last_ack.map_or(0, |ack| ack - before);
        let old = last_ack.unwrap_or(before);
        let found = generation_on_disk(dir.path());
        assert!(
            found == old || found == old + 1,
            "iteration {iteration} ({SEED_ENV}={seed}): generation {found} on disk, expected \
             {old} or {}",
            old + 1
        );
        if found == old {
            kept_old += 1;
        } else {
            got_new += 1;
        }
    }
    eprintln!(
        "crash test: {iterations} kills, {acknowledged} acknowledged writes; after a kill the \
         file held the last acknowledged write {kept_old} times and the unacknowledged next one \
         {got_new} times"
    );
}
