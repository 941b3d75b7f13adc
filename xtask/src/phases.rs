//! Where the test command's time goes: each phase's wall time, printed as a table when the
//! command ends (also when a phase failed), so a slowdown shows in the run that caused it.
use std::time::{Duration, Instant};

/// The phases timed so far.
pub(crate) struct Phases {
    started: Instant,
    done: Vec<Phase>,
}

struct Phase {
    name: String,
    took: Duration,
    failed: bool,
}

impl Phases {
    pub(crate) fn new() -> Self {
        Self {
            started: Instant::now(),
            done: Vec::new(),
        }
    }

    /// Runs `f` as the phase `name`.
    pub(crate) fn run<T>(
        &mut self,
        name: &str,
        f: impl FnOnce() -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let (took, result) = timed(f);
        self.record(name, took, result.is_err());
        result
    }

    /// A phase timed elsewhere (each VM, timed in its own thread).
    pub(crate) fn record(&mut self, name: &str, took: Duration, failed: bool) {
        self.done.push(Phase {
            name: name.to_string(),
            took,
            failed,
        });
    }

    /// One row per phase and the total since [`Phases::new`].
    pub(crate) fn table(&self) -> String {
        let width = self
            .done
            .iter()
            .map(|p| p.name.len())
            .chain([5])
            .max()
            .unwrap_or(5);
        let mut out = format!("{:<width$}  {:>8}\n", "phase", "time");
        for phase in &self.done {
            let mark = if phase.failed { "  failed" } else { "" };
            out.push_str(&format!(
                "{:<width$}  {:>8}{mark}\n",
                phase.name,
                clock(phase.took)
            ));
        }
        out.push_str(&format!(
            "{:<width$}  {:>8}",
            "total",
            clock(self.started.elapsed())
        ));
        out
    }
}

/// `m:ss`, the resolution a phase of minutes needs.
fn clock(took: Duration) -> String {
    let secs = took.as_secs();
    format!("{}:{:02}", secs / 60, secs % 60)
}

/// `f`'s result and how long it took.
pub(crate) fn timed<T>(f: impl FnOnce() -> anyhow::Result<T>) -> (Duration, anyhow::Result<T>) {
    let started = Instant::now();
    let result = f();
    (started.elapsed(), result)
}

/// What a thread gave back; a panic in it is its failure, named after `what`.
pub(crate) fn joined<T>(
    work: std::thread::ScopedJoinHandle<'_, T>,
    what: &str,
) -> anyhow::Result<T> {
    work.join().map_err(|_| anyhow::anyhow!("{what} panicked"))
}

/// What a thread that ran [`timed`] gave back: its time and result, or no time and the panic
/// as its failure.
pub(crate) fn joined_timed<T>(
    work: std::thread::ScopedJoinHandle<'_, (Duration, anyhow::Result<T>)>,
    what: &str,
) -> (Duration, anyhow::Result<T>) {
    joined(work, what).unwrap_or_else(|e| (Duration::ZERO, Err(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_phase_is_a_row_with_its_time_and_the_total_last() {
        let mut phases = Phases::new();
        phases.record("toolchain", Duration::from_secs(75), false);
        phases.record("VM Linux 6.12", Duration::from_secs(601), true);
        let ran = phases.run("lints", || Ok(7));
        assert_eq!(ran.unwrap(), 7);
        let failed: anyhow::Result<()> = phases.run("image", || anyhow::bail!("no buildah"));
        assert!(failed.is_err());
        let table = phases.table();
        let rows: Vec<&str> = table.lines().collect();
        assert_eq!(rows.len(), 6, "{table}");
        assert!(
            rows[1].starts_with("toolchain") && rows[1].ends_with("1:15"),
            "{table}"
        );
        assert!(rows[2].ends_with("10:01  failed"), "{table}");
        assert!(
            rows[3].starts_with("lints") && rows[3].ends_with("0:00"),
            "{table}"
        );
        assert!(
            rows[4].starts_with("image") && rows[4].ends_with("failed"),
            "{table}"
        );
        assert!(rows[5].starts_with("total"), "{table}");
    }
}
