//! Kernel programs of the memory-pressure monitor.
//!
//! Each hook lives in its own module. Programs aggregate per cgroup in kernel maps and only
//! push a ring-buffer record when something significant happened, so userspace wakes up
//! rarely even when the kernel updates memory statistics millions of times per second.
#![no_std]
#![no_main]
// BPF atomics beyond load/store are only reachable through compiler intrinsics.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod atomic;
mod cgroup_lifecycle;
mod kswapd;
mod maps;
mod memcg_fentry;
mod memcg_id;
mod memcg_raw;
mod memcg_stat;
mod oom_victim;
mod pending;
mod reclaim_stall;
mod task_cgroups;
mod task_forks;
mod task_memcg;
mod wake;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    loop {}
}

// Tracepoint programs that use bpf_probe_read_kernel need a GPL-compatible license.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
