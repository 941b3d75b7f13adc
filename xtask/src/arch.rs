//! The architectures the agent ships for, each a static musl build from this x86_64 machine
//! and one image of the index.
use std::{fs, path::Path, process::Command};

use anyhow::{Context as _, bail};
use test_harness::elf;

/// A CPU architecture of the agent's static builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Arch {
    #[value(name = "x86_64", alias = "amd64")]
    X86_64,
    #[value(name = "aarch64", alias = "arm64")]
    Aarch64,
}

impl Arch {
    /// Every architecture the image holds, the build machine's first.
    pub(crate) const ALL: [Self; 2] = [Self::X86_64, Self::Aarch64];

    /// Rust's target: musl, whose C library the standard library links statically.
    pub(crate) fn rust_target(self) -> &'static str {
        match self {
            Self::X86_64 => "x86_64-unknown-linux-musl",
            Self::Aarch64 => "aarch64-unknown-linux-musl",
        }
    }

    /// The name OCI and Kubernetes (`kubernetes.io/arch`) give it.
    pub(crate) fn oci(self) -> &'static str {
        match self {
            Self::X86_64 => "amd64",
            Self::Aarch64 => "arm64",
        }
    }

    /// The C compiler for ring's build script and, across architectures, the linker. Debian
    /// has no musl cross compiler for aarch64: its glibc one compiles ring's C, which needs
    /// no C library headers beyond the compiler's own, and links against the musl C library
    /// and start files the Rust target ships (self-contained).
    fn c_compiler(self) -> &'static str {
        match self {
            Self::X86_64 => "musl-gcc",
            Self::Aarch64 => "aarch64-linux-gnu-gcc",
        }
    }

    /// Points a cargo build for [`Self::rust_target`] at the C compiler and the linker.
    pub(crate) fn cross_env(self, cargo: &mut Command) {
        let target = self.rust_target().replace('-', "_");
        cargo.env(format!("CC_{target}"), self.c_compiler());
        if let Some(linker) = self.cross_linker() {
            cargo.env(
                format!("CARGO_TARGET_{}_LINKER", target.to_uppercase()),
                linker,
            );
        }
    }

    /// The Debian package of [`Self::c_compiler`].
    pub(crate) fn c_compiler_package(self) -> &'static str {
        match self {
            Self::X86_64 => "musl-tools",
            Self::Aarch64 => "gcc-aarch64-linux-gnu",
        }
    }

    /// The linker when it is not the machine's own `cc`.
    fn cross_linker(self) -> Option<&'static str> {
        match self {
            Self::X86_64 => None,
            Self::Aarch64 => Some("aarch64-linux-gnu-gcc"),
        }
    }

    /// ELF `e_machine`.
    fn elf_machine(self) -> u16 {
        match self {
            Self::X86_64 => elf::X86_64,
            Self::Aarch64 => elf::AARCH64,
        }
    }
}

/// Fails unless `binary` is a 64-bit little-endian ELF executable for `arch` without an ELF
/// interpreter: the image has no libc, so a dynamically linked binary would not start in it.
pub(crate) fn check_static(binary: &Path, arch: Arch) -> anyhow::Result<()> {
    let elf = fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    let shape = elf::shape(&elf).context("not a 64-bit little-endian ELF file")?;
    if shape.machine != arch.elf_machine() {
        bail!(
            "{} is built for ELF machine {}, not {} ({:?})",
            binary.display(),
            shape.machine,
            arch.elf_machine(),
            arch
        );
    }
    if shape.interpreter {
        bail!(
            "{} is dynamically linked; the image has no libc to run it",
            binary.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_takes_the_kernel_s_and_the_oci_names() {
        use clap::ValueEnum as _;
        for (name, arch) in [
            ("x86_64", Arch::X86_64),
            ("amd64", Arch::X86_64),
            ("aarch64", Arch::Aarch64),
            ("arm64", Arch::Aarch64),
        ] {
            assert_eq!(Arch::from_str(name, false), Ok(arch), "{name}");
        }
        assert!(Arch::from_str("riscv64", false).is_err());
    }
}
