//! What the agent shows outside: it records into [`Metrics`], publishes a [`snapshot`] after
//! each evaluation, and [`server`] answers the [`endpoints`] from it on each [`connection`]
//! to the clients [`access`] lets in ([`token_gate`] checking bearer tokens), holding
//! connections as [`admission`] rules.
pub(crate) mod access;
pub(crate) mod admission;
pub(crate) mod connection;
pub(crate) mod endpoint_stats;
pub(crate) mod endpoints;
pub(crate) mod exposition;
pub(crate) mod pace;
pub(crate) mod server;
pub(crate) mod snapshot;
pub(crate) mod token_gate;
pub(crate) mod token_review;

pub(crate) use exposition::Metrics;
