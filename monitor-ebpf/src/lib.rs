#![no_std]
// Empty library target so the workspace can build and lint this crate like the others.
