//! What the image build and its test read of an executable: the ELF machine it is built for
//! and whether it asks for a dynamic loader (the image has no libc to give it one).

/// ELF `e_machine` of x86_64.
pub const X86_64: u16 = 62;
/// ELF `e_machine` of aarch64.
pub const AARCH64: u16 = 183;

/// What [`shape`] reads of a 64-bit little-endian ELF file.
#[derive(Debug, PartialEq, Eq)]
pub struct ElfShape {
    pub machine: u16,
    /// Whether it has a PT_INTERP program header: dynamically linked.
    pub interpreter: bool,
}

/// The shape of `elf`, or `None` when it is no 64-bit little-endian ELF file or its program
/// headers lie outside it.
pub fn shape(elf: &[u8]) -> Option<ElfShape> {
    const PT_INTERP: u32 = 3;
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let phoff = usize::try_from(u64::from_le_bytes(elf.get(0x20..0x28)?.try_into().ok()?)).ok()?;
    let (size, count) = (usize::from(u16_at(0x36)?), usize::from(u16_at(0x38)?));
    let interpreter = (0..count)
        .map(|i| {
            let at = phoff.checked_add(i.checked_mul(size)?)?;
            Some(u32::from_le_bytes(
                elf.get(at..at.checked_add(4)?)?.try_into().ok()?,
            ))
        })
        .try_fold(false, |found, kind| Some(found || kind? == PT_INTERP))?;
    Some(ElfShape {
        machine: u16_at(0x12)?,
        interpreter,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_and_the_interpreter_are_read_from_the_elf_headers() {
        let own = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        // The test binary is built for the host's glibc target: dynamically linked.
        let host = shape(&own).unwrap();
        assert!(host.interpreter);
        assert_eq!(shape(b"#!/bin/sh\n"), None);
        let mut no_headers = own[..64].to_vec();
        no_headers[0x38] = 0;
        no_headers[0x39] = 0;
        assert_eq!(shape(&no_headers).map(|s| s.interpreter), Some(false));
        let mut arm = no_headers.clone();
        arm[0x12..0x14].copy_from_slice(&AARCH64.to_le_bytes());
        assert_eq!(shape(&arm).map(|s| s.machine), Some(AARCH64));
        // Headers said to lie beyond the file are no headers.
        let mut beyond = own[..64].to_vec();
        beyond[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(shape(&beyond), None);
    }
}
