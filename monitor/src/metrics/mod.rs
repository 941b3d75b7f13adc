//! What the agent shows outside: it records into [`Metrics`], publishes a [`snapshot`] after
//! each evaluation, and [`server`] answers the [`endpoints`] from it to the clients
//! [`access`] lets in.
pub(crate) mod access;
pub(crate) mod endpoints;
pub(crate) mod exposition;
pub(crate) mod server;
pub(crate) mod snapshot;

pub(crate) use exposition::Metrics;
