//! What the end-to-end tests, the benchmarks and the demo share. The tests crate and xtask
//! cannot depend on each other (the tests crate needs the kernel toolchain, xtask installs
//! it), so this crate needs nothing but std and libc.
pub mod cgroup_tree;
pub mod elf;
pub mod watched_process;
