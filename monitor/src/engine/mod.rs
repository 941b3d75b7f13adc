//! The pure core: plain data and a clock in, decisions out. No tokio, no aya, no filesystem,
//! so every rule is tested without root.
pub mod checkpoint;
