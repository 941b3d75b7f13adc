//! One module per subcommand. Each exposes a clap `Args` struct and
//! `run(args) -> anyhow::Result<ExitCode>`.
pub mod checkpoint;
pub mod config;
pub mod doctor;
pub mod privileges;
pub mod rank;
pub mod top;
pub mod top_view;
pub mod trace;
