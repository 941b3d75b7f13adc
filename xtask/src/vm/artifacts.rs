//! Building what runs in the VM and finding the executables in cargo's JSON messages.
//!
//! xtask keeps its dependencies to a minimum, so the two fields needed are read from cargo's
//! compact one-object-per-line output directly.
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

use crate::{arch::Arch, process::cargo};

/// Executables built for the VM.
pub(super) struct Artifacts {
    pub monitor: PathBuf,
    /// Test harness executables of the `tests` crate, to be run.
    pub tests: Vec<PathBuf>,
    /// Other executables the tests locate next to them (helper binaries).
    pub helpers: Vec<PathBuf>,
}

/// The `monitor` binary and the `tests` crate's test executables and helpers, from the
/// same `cargo test` build as the host tests (default members, so the same features and
/// the same artifacts: nothing is built twice).
pub(super) fn build() -> anyhow::Result<Artifacts> {
    let built = executables(&["test", "--no-run"])?;
    let monitor = built
        .iter()
        .find(|e| {
            !e.test && e.package == "monitor" && e.path.file_name().is_some_and(|n| n == "monitor")
        })
        .map(|e| e.path.clone())
        .context("cargo built no `monitor` executable")?;
    let (tests, helpers) = tests_and_helpers(built)?;
    Ok(Artifacts {
        monitor,
        tests,
        helpers,
    })
}

/// The `tests` crate's test executables named `tests` and its helpers, built for another
/// architecture's musl target (static: the VM needs no libraries of it). The agent is the
/// image's static binary of that architecture, built by the caller.
pub(super) fn build_for(
    arch: Arch,
    tests: &[&str],
) -> anyhow::Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let mut args = vec!["test", "--no-run", "--package", "tests"];
    args.extend(["--target", arch.rust_target()]);
    for test in tests {
        args.extend(["--test", test]);
    }
    let mut cmd = cargo();
    arch.cross_env(&mut cmd);
    tests_and_helpers(executables_of(cmd, &args)?)
}

/// The tests crate's test executables and its other executables (the helpers), of `built`.
fn tests_and_helpers(built: Vec<Executable>) -> anyhow::Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let (tests, helpers) = built
        .into_iter()
        .filter(|e| e.package == "tests")
        .partition::<Vec<_>, _>(|e| e.test);
    if tests.is_empty() {
        bail!("the tests crate built no test executable");
    }
    Ok((
        tests.into_iter().map(|e| e.path).collect(),
        helpers.into_iter().map(|e| e.path).collect(),
    ))
}

#[derive(Debug, PartialEq, Eq)]
struct Executable {
    path: PathBuf,
    /// The package's directory name in the workspace (`tests`, `monitor`).
    package: String,
    /// Built with the test harness.
    test: bool,
}

fn executables(args: &[&str]) -> anyhow::Result<Vec<Executable>> {
    executables_of(cargo(), args)
}

fn executables_of(mut cmd: Command, args: &[&str]) -> anyhow::Result<Vec<Executable>> {
    // Compiler errors go to stderr as text; only the artifact messages come back as JSON.
    cmd.args(args)
        .arg("--message-format=json-render-diagnostics")
        .stderr(Stdio::inherit());
    let out = cmd.output().with_context(|| format!("starting {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(executable)
        .collect())
}

/// The executable of a `compiler-artifact` message, if it produced one.
fn executable(message: &str) -> Option<Executable> {
    if !message.starts_with(r#"{"reason":"compiler-artifact""#) {
        return None;
    }
    let path = string_field(message, "executable")?;
    let manifest = string_field(message, "manifest_path")?;
    let package = Path::new(&manifest)
        .parent()?
        .file_name()?
        .to_string_lossy()
        .into_owned();
    // `target` has a `test` field too (whether `cargo test` builds it); the profile's says
    // whether this build has the harness. The profile object holds no nested objects.
    let profile = message.split_once(r#""profile":{"#)?.1.split('}').next()?;
    Some(Executable {
        path: PathBuf::from(path),
        package,
        test: profile.contains(r#""test":true"#),
    })
}

/// The first string value of `"key":` in compact JSON, unescaped; None for null.
fn string_field(json: &str, key: &str) -> Option<String> {
    let start = json.find(&format!(r#""{key}":""#))? + key.len() + 4;
    let mut value = String::new();
    let mut chars = json[start..].chars();
    loop {
        match chars.next()? {
            '"' => return Some(value),
            '\\' => match chars.next()? {
                'n' => value.push('\n'),
                't' => value.push('\t'),
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    value.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                escaped => value.push(escaped),
            },
            c => value.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST_BIN: &str = r#"{"reason":"compiler-artifact","package_id":"path+file:///src/tests#0.1.0","manifest_path":"/src/tests/Cargo.toml","target":{"kind":["test"],"name":"cgroup_v2","test":true},"profile":{"opt_level":"0","debuginfo":2,"test":true},"features":[],"filenames":["/t/debug/deps/cgroup_v2-1f2e"],"executable":"/t/debug/deps/cgroup_v2-1f2e","fresh":true}"#;
    const HELPER_BIN: &str = r#"{"reason":"compiler-artifact","manifest_path":"/src/tests/Cargo.toml","target":{"kind":["bin"],"name":"alloc","test":true},"profile":{"opt_level":"0","test":false},"executable":"/t/debug/alloc","fresh":true}"#;
    const LIB: &str = r#"{"reason":"compiler-artifact","manifest_path":"/src/monitor/Cargo.toml","target":{"kind":["lib"],"name":"monitor","test":true},"profile":{"test":false},"executable":null,"fresh":true}"#;

    #[test]
    fn test_executables_are_told_from_helpers_by_the_profile() {
        assert_eq!(
            executable(TEST_BIN),
            Some(Executable {
                path: "/t/debug/deps/cgroup_v2-1f2e".into(),
                package: "tests".into(),
                test: true
            })
        );
        assert_eq!(
            executable(HELPER_BIN),
            Some(Executable {
                path: "/t/debug/alloc".into(),
                package: "tests".into(),
                test: false
            })
        );
    }

    #[test]
    fn libraries_and_other_messages_have_none() {
        assert_eq!(executable(LIB), None);
        assert_eq!(
            executable(r#"{"reason":"build-finished","success":true}"#),
            None
        );
    }

    #[test]
    fn escapes_are_decoded() {
        let json = r#"{"executable":"/a \"b\"\\c\u00e9","x":1}"#;
        assert_eq!(
            string_field(json, "executable").as_deref(),
            Some("/a \"b\"\\cé")
        );
        assert_eq!(
            string_field(r#"{"executable":"unterminated"#, "executable"),
            None
        );
    }
}
