//! The memory-pressure monitor's agent as a library; the `monitor` binary only parses the
//! command line and calls [`cli::main`].
//!
//! Data flows one way: kernel -> ring buffer ([`source`]) -> state -> rank -> decide
//! ([`engine`], pure) -> act -> checkpoint.
pub mod action;
mod agent;
pub mod cgroupfs;
pub mod checkpoint;
pub mod cli;
mod commands;
mod config_file;
mod config_watch;
pub use monitor_engine as engine;
mod file_kind;
mod flags;
mod http_get;
mod inotify;
mod kube_client;
mod logging;
mod metrics;
mod node;
mod own_process;
pub mod pods;
pub mod source;
pub mod system_clock;
mod trace;
