//! Prometheus metrics: the agent records into [`Metrics`], and [`server`] serves the text
//! exposition format on a loopback address.
pub mod exposition;
pub mod server;

pub use exposition::{Histogram, Metrics};
