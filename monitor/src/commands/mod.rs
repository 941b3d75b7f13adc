//! One module per subcommand. Each exposes a clap `Args` struct and
//! `run(args) -> anyhow::Result<ExitCode>`.
pub(crate) mod checkpoint;
pub(crate) mod config;
pub(crate) mod doctor;
pub(crate) mod privileges;
pub(crate) mod probe;
pub(crate) mod rank;
pub(crate) mod shadow;
pub(crate) mod top;
pub(crate) mod top_view;
pub(crate) mod trace;
