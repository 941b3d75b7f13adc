//! `monitor config`: the eviction settings after the kubelet's defaulting, each with where it
//! came from and whether the agent acts on it; from the files the agent would read, or from a
//! running agent (`--agent`): what is in force there, since when, and a change it refused.
use std::path::PathBuf;
use std::process::ExitCode;

use serde::Serialize;

use crate::config_file::{ConfigSources, load};
use crate::engine::config_origin::{NOT_ACTED_ON, Setting, effective_settings};
use crate::engine::printable::printable;
use crate::flags::{HostPort, OutputFormat, host_port};
use crate::http_get;
use crate::metrics::snapshot::DebugConfig;

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  monitor config --kubelet-config /var/lib/kubelet/config.yaml
  monitor config --kubelet-config /var/lib/kubelet/config.yaml --config overlay.yaml
  monitor config                       # no file: the kubelet's defaults
  monitor config --agent               # what the agent at 127.0.0.1:9753 has in force, since when
  monitor config --config FILE --output json | jq '.settings[] | select(.origin != \"file\")'
Origins: the file (the kubelet's, under an overlay); the overlay (--config), over the
kubelet's; kubelet default; the file's 0s, made 5m by the kubelet's defaulting (kubeadm writes
0s); copied from memory.available (enforceNodeAllocatable includes pods); agent default (the
monitor: settings). A signal the file turns off (0%) shows as off; signals without a threshold
are not listed; settings of the disk signals (nodefs, imagefs, containerfs) are marked as not
acted on: the agent observes memory and PIDs, the kubelet enforces the rest.")]
pub(crate) struct ConfigArgs {
    /// The node's kubelet configuration, as given to the agent's --kubelet-config.
    #[arg(long, value_name = "FILE", conflicts_with = "agent")]
    kubelet_config: Option<PathBuf>,
    /// KubeletConfiguration file, as given to the agent's --config: laid over
    /// --kubelet-config, or alone the whole configuration. Without either, the kubelet's
    /// defaults.
    #[arg(long, value_name = "FILE", conflicts_with = "agent")]
    config: Option<PathBuf>,
    /// Ask the running agent at ADDR (its --metrics-addr) what is in force instead of
    /// reading files: its files, their checksum, since when, and a change it refused.
    #[arg(
        long,
        value_name = "ADDR",
        num_args = 0..=1,
        default_missing_value = "127.0.0.1:9753",
        value_parser = host_port
    )]
    agent: Option<HostPort>,
    /// `text`: an aligned table. `json`: `{"source", "checksum", "notes", "settings":
    /// [{"name", "value", "origin", "acted_on"}]}` with origin one of file, overlay,
    /// kubelet_default, kubeadm_zero_defaulted, node_allocatable_copy, agent_default (with
    /// --agent: the agent's `/debug/config`, with `since` and `refused`).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
}

#[derive(Serialize)]
struct FromFiles<'a> {
    source: String,
    checksum: &'a str,
    notes: &'a [String],
    settings: &'a [Setting],
}

pub(crate) fn run(args: &ConfigArgs) -> anyhow::Result<ExitCode> {
    let output = if let Some(addr) = &args.agent {
        from_agent(addr, args.output)?
    } else {
        from_files(args)?
    };
    std::io::Write::write_all(&mut std::io::stdout().lock(), output.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// What the files give, as the agent would read them.
fn from_files(args: &ConfigArgs) -> anyhow::Result<String> {
    let sources = ConfigSources {
        kubelet: args.kubelet_config.clone(),
        overlay: args.config.clone(),
    };
    let loaded = load(&sources)?;
    let settings = effective_settings(&loaded.config, &loaded.written);
    if args.output == OutputFormat::Json {
        return Ok(serde_json::to_string_pretty(&FromFiles {
            source: sources.describe(),
            checksum: &loaded.checksum,
            notes: &loaded.notes,
            settings: &settings,
        })? + "\n");
    }
    let mut out = format!(
        "configuration: {} ({})\n",
        sources.describe(),
        loaded.checksum
    );
    for note in &loaded.notes {
        out.push_str(&format!("warning: {}\n", printable(note)));
    }
    Ok(out + &render_settings(&settings))
}

/// How long asking the agent may take.
const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
/// The largest answer read: the configuration in force is a few KiB.
const MAX_VIEW_BYTES: usize = 1 << 20;

/// What the agent at `addr` has in force.
fn from_agent(addr: &HostPort, format: OutputFormat) -> anyhow::Result<String> {
    let asked = |e: String| anyhow::anyhow!("asking the agent at {addr} (its --metrics-addr): {e}");
    let reply = http_get::get_first(addr.addrs(), "/debug/config", READ_TIMEOUT, MAX_VIEW_BYTES)
        .map_err(|e| asked(e.to_string()))?;
    if reply.status != 200 {
        return Err(asked(format!("it answered {}", reply.status)));
    }
    let view: DebugConfig = serde_json::from_slice(&reply.body)
        .map_err(|e| anyhow::anyhow!("the agent at {addr} answered no configuration: {e}"))?;
    if format == OutputFormat::Json {
        return Ok(serde_json::to_string_pretty(&view)? + "\n");
    }
    let ago = view
        .since
        .parse::<jiff::Timestamp>()
        .ok()
        .map(|since| jiff::Timestamp::now().duration_since(since).as_secs())
        .map_or_else(String::new, |secs| format!(", {secs}s ago"));
    let mut out = format!(
        "in force at {addr} since {}{ago}: {} ({})\n",
        view.since,
        printable(&view.source),
        view.checksum
    );
    if let Some(refused) = &view.refused {
        out.push_str(&format!(
            "the files' newest content was refused: {}; the configuration below stays in \
             force\n",
            printable(refused)
        ));
    }
    Ok(out + &render_settings(&view.settings))
}

fn render_settings(settings: &[Setting]) -> String {
    let mut out = String::new();
    let evicts = settings.iter().any(|s| {
        s.acted_on
            && s.value != "off"
            && (s.name.starts_with("evictionHard.") || s.name.starts_with("evictionSoft."))
    });
    if !evicts {
        out.push_str(
            "no threshold this agent acts on is in force (memory.available, \
             allocatableMemory.available, pid.available): it will evict nothing\n",
        );
    }
    let name_width = settings.iter().map(|s| s.name.len()).max().unwrap_or(0);
    let value_width = settings.iter().map(|s| s.value.len()).max().unwrap_or(0);
    for setting in settings {
        out.push_str(&format!(
            "{:<name_width$}  {:<value_width$}  {}{}\n",
            setting.name,
            setting.value,
            setting.origin.describe(),
            if setting.acted_on {
                String::new()
            } else {
                format!("; {NOT_ACTED_ON}")
            }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::eviction_config::EvictionConfig;

    /// The kubelet's default disk thresholds are listed and each says the agent does not
    /// act on it, and why; a file whose only thresholds are on disk evicts nothing here.
    #[test]
    fn disk_thresholds_say_they_are_not_acted_on() {
        let (config, written) = EvictionConfig::from_yaml_explained("").unwrap();
        let text = render_settings(&effective_settings(&config, &written));
        for line in text.lines() {
            let disk = ["nodefs", "imagefs"].iter().any(|d| line.contains(d));
            assert_eq!(line.contains("not acted on: "), disk, "{line}");
        }
        assert!(
            text.lines()
                .any(|l| l.starts_with("evictionHard.nodefs.available")
                    && l.contains("kubelet enforces")),
            "{text}"
        );
        assert!(!text.contains("evict nothing"), "{text}");

        let (config, written) =
            EvictionConfig::from_yaml_explained("evictionHard:\n  nodefs.available: 10%\n")
                .unwrap();
        let text = render_settings(&effective_settings(&config, &written));
        assert!(
            text.starts_with("no threshold this agent acts on"),
            "{text}"
        );
    }
}
