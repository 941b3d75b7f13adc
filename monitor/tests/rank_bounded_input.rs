//! `monitor rank` reads only regular files of bounded size: an input that never ends
//! (`/dev/zero`, a FIFO no one writes) or one larger than the bound is refused at once with
//! exit 2, naming the file and why, instead of growing the command or holding it.
use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/rank")
        .join(name)
        .display()
        .to_string()
}

/// Runs `monitor rank ARGS`, killed (and the test failed) if it takes over 10 s: its exit
/// code and stderr.
fn rank_within_10s(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_monitor"))
        .arg("rank")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run monitor");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("monitor rank {args:?} still running after 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("its output");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn inputs_that_never_end_or_exceed_the_bound_are_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pods.fifo");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    // Sparse: 65 MiB that take no disk.
    let huge = dir.path().join("huge.json");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(65 << 20)
        .unwrap();
    let (pods, summary) = (fixture("pods.json"), fixture("summary.json"));
    let (fifo, huge) = (fifo.display().to_string(), huge.display().to_string());
    let cases = [
        (
            "pods from /dev/zero",
            "/dev/zero",
            summary.as_str(),
            "/dev/zero: a device, not a regular file",
        ),
        (
            "a summary from /dev/zero",
            pods.as_str(),
            "/dev/zero",
            "/dev/zero: a device, not a regular file",
        ),
        (
            "pods from a FIFO",
            fifo.as_str(),
            summary.as_str(),
            "a FIFO, not a regular file",
        ),
        (
            "a summary over 64 MiB",
            pods.as_str(),
            huge.as_str(),
            "larger than 64 MiB; not read further",
        ),
    ];
    for (name, pods, summary, said) in cases {
        let (code, stderr) = rank_within_10s(&["--pods", pods, "--summary", summary]);
        assert_eq!(code, Some(2), "{name}: {stderr}");
        assert!(stderr.contains(said), "{name}: {stderr}");
    }
    let (code, stderr) = rank_within_10s(&[
        "--pods",
        &pods,
        "--summary",
        &summary,
        "--config",
        "/dev/zero",
    ]);
    assert_eq!(code, Some(2), "--config /dev/zero: {stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");
}
