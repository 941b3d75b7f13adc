//! The floor of a raw tracepoint's cost, for `cargo xtask bench kernel` (root only).
//!
//! `hook_floor TRACEPOINT...` loads a program of two instructions (`r0 = 0; exit`) named
//! `empty_program`, attaches it to each raw tracepoint named, prints `attached` and holds
//! them until its stdin closes. What page faults cost with it attached is what any program
//! on those tracepoints costs before doing anything: the kernel's dispatch to the program.
//! It is loaded with the raw `bpf(2)` calls because it needs nothing of a loader.
use std::{
    ffi::CString,
    io::{self, Read as _, Write as _},
    os::fd::{FromRawFd as _, OwnedFd},
};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
/// `r0 = 0` (BPF_ALU64 | BPF_MOV | BPF_K) and `exit` (BPF_JMP | BPF_EXIT).
const PROGRAM: [u64; 2] = [0xb7, 0x95];
/// Large enough for every `union bpf_attr` member used here; the kernel wants the rest zero.
const ATTR_BYTES: usize = 128;

fn main() {
    let tracepoints: Vec<String> = std::env::args().skip(1).collect();
    if tracepoints.is_empty() {
        eprintln!("usage: hook_floor TRACEPOINT...");
        std::process::exit(2);
    }
    let program = load().unwrap_or_else(|e| fail("loading the floor program", e));
    let links: Vec<OwnedFd> = tracepoints
        .iter()
        .map(|name| {
            attach(&program, name).unwrap_or_else(|e| fail(&format!("attaching to {name}"), e))
        })
        .collect();
    println!("attached");
    let _ = io::stdout().flush();
    let _ = io::stdin().read_to_end(&mut Vec::new());
    drop(links);
}

fn fail(what: &str, e: io::Error) -> ! {
    eprintln!("hook_floor: {what}: {e}");
    std::process::exit(1);
}

fn load() -> io::Result<OwnedFd> {
    let license = c"GPL";
    let mut attr = [0u8; ATTR_BYTES];
    put(&mut attr, 0, &BPF_PROG_TYPE_RAW_TRACEPOINT.to_ne_bytes());
    put(&mut attr, 4, &(PROGRAM.len() as u32).to_ne_bytes());
    put(&mut attr, 8, &(PROGRAM.as_ptr() as u64).to_ne_bytes());
    put(&mut attr, 16, &(license.as_ptr() as u64).to_ne_bytes());
    put(&mut attr, 48, b"empty_program");
    bpf(BPF_PROG_LOAD, &attr)
}

fn attach(program: &OwnedFd, tracepoint: &str) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd as _;
    let name = CString::new(tracepoint).map_err(io::Error::other)?;
    let mut attr = [0u8; ATTR_BYTES];
    put(&mut attr, 0, &(name.as_ptr() as u64).to_ne_bytes());
    put(&mut attr, 8, &(program.as_raw_fd() as u32).to_ne_bytes());
    bpf(BPF_RAW_TRACEPOINT_OPEN, &attr)
}

fn put(attr: &mut [u8; ATTR_BYTES], at: usize, bytes: &[u8]) {
    attr[at..at + bytes.len()].copy_from_slice(bytes);
}

/// One `bpf(2)` command that returns a new file descriptor.
fn bpf(cmd: libc::c_long, attr: &[u8; ATTR_BYTES]) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a zero-padded `union bpf_attr` of the size passed; every pointer in it
    // (instructions, license, name) outlives the call.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_ptr(), ATTR_BYTES as u32) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
