//! `monitor config`: the eviction settings in force after the kubelet's defaulting, each with
//! where it came from, so an operator can check what the agent will act on before it acts.
use std::path::PathBuf;
use std::process::ExitCode;

use serde::Serialize;

use crate::engine::config_origin::{Setting, effective_settings};
use crate::flags::OutputFormat;

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  monitor config --config /var/lib/kubelet/config.yaml
  monitor config                       # no file: the kubelet's defaults
  monitor config --config FILE --output json | jq '.settings[] | select(.origin != \"file\")'
Origins: the file; kubelet default; the file's 0s, made 5m by the kubelet's defaulting
(kubeadm writes 0s); copied from memory.available (enforceNodeAllocatable includes pods);
agent default (the monitor: settings). A signal the file turns off (0%) shows as off;
signals without a threshold are not listed.")]
pub(crate) struct ConfigArgs {
    /// KubeletConfiguration file, as given to the agent's --config. Without it, the kubelet's
    /// defaults.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// `text`: an aligned table. `json`: `{"file": ..., "settings": [{"name", "value",
    /// "origin"}]}` with origin one of file, kubelet_default, kubeadm_zero_defaulted,
    /// node_allocatable_copy, agent_default.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
}

#[derive(Serialize)]
struct Effective<'a> {
    file: Option<String>,
    settings: &'a [Setting],
}

pub(crate) fn run(args: &ConfigArgs) -> anyhow::Result<ExitCode> {
    let (config, written) = crate::config_file::load(args.config.as_deref())?;
    let settings = effective_settings(&config, &written);
    let file = args.config.as_ref().map(|p| p.display().to_string());
    let output = match args.output {
        OutputFormat::Json => {
            serde_json::to_string_pretty(&Effective {
                file,
                settings: &settings,
            })? + "\n"
        }
        OutputFormat::Text => render_text(file.as_deref(), &settings),
    };
    std::io::Write::write_all(&mut std::io::stdout().lock(), output.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

fn render_text(file: Option<&str>, settings: &[Setting]) -> String {
    let mut out = match file {
        Some(file) => format!(
            "configuration: {}\n",
            crate::engine::printable::printable(file)
        ),
        None => "configuration: none given (--config): the kubelet's defaults\n".to_string(),
    };
    if !settings
        .iter()
        .any(|s| s.name.starts_with("evictionHard.") && s.value != "off")
        && !settings.iter().any(|s| s.name.starts_with("evictionSoft."))
    {
        out.push_str("no eviction threshold is in force: the agent will evict nothing\n");
    }
    let name_width = settings.iter().map(|s| s.name.len()).max().unwrap_or(0);
    let value_width = settings.iter().map(|s| s.value.len()).max().unwrap_or(0);
    for setting in settings {
        out.push_str(&format!(
            "{:<name_width$}  {:<value_width$}  {}\n",
            setting.name,
            setting.value,
            setting.origin.describe()
        ));
    }
    out
}
