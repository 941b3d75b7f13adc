//! Rebuild the kernel programs when bpf-linker changes: cargo cannot see that the link step
//! depends on it.
fn main() {
    match which::which("bpf-linker") {
        Ok(linker) => println!("cargo:rerun-if-changed={}", linker.display()),
        Err(_) => println!("cargo:warning=bpf-linker not found on PATH; run `cargo xtask setup`"),
    }
}
