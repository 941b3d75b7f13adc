//! cgroupfs access.
