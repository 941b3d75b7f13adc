//! What the agent shows outside: it records into [`Metrics`], publishes a [`snapshot`] after
//! each evaluation, and [`server`] answers the [`endpoints`] from it to the clients
//! [`access`] lets in.
pub mod access;
pub mod endpoints;
pub mod exposition;
pub mod server;
pub mod snapshot;

pub use exposition::{Histogram, Metrics};
