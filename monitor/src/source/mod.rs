//! Event sources.
