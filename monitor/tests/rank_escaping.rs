//! `monitor rank` prints pod names from its input files: a name holding a newline must stay
//! on its row instead of starting a line of its own.
use std::path::PathBuf;
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/rank")
        .join(name)
}

#[test]
fn a_name_with_a_newline_stays_on_its_row() {
    let forged = "hog\nforged-line";
    let mut pods: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("pods.json")).unwrap()).unwrap();
    let hog = pods["items"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["metadata"]["name"] == "hog")
        .expect("the fixture's hog");
    hog["metadata"]["name"] = forged.into();
    let dir = tempfile::tempdir().unwrap();
    let pods_file = dir.path().join("pods.json");
    std::fs::write(&pods_file, serde_json::to_vec(&pods).unwrap()).unwrap();

    let output = Command::new(env!("CARGO_BIN_EXE_monitor"))
        .arg("rank")
        .arg("--pods")
        .arg(&pods_file)
        .arg("--summary")
        .arg(fixture("summary.json"))
        .output()
        .expect("run monitor");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(
        text.lines().all(|l| !l.starts_with("forged-line")),
        "a line was forged:\n{text}"
    );
    assert!(text.contains("shop/hog\\nforged-line"), "{text}");
}
