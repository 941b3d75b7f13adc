//! FNV-1a with 32 bits, the checksum the kubelet puts in its checkpoints.
//!
//! It catches accidental damage (torn writes, flipped bits, careless hand edits); it is not a
//! defence against someone who wants to forge a checkpoint.

const OFFSET_BASIS: u32 = 0x811c_9dc5;
const PRIME: u32 = 0x0100_0193;

/// Returns the FNV-1a 32-bit hash of `bytes`.
pub(super) fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(OFFSET_BASIS, |hash, &byte| {
        (hash ^ u32::from(byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::fnv32a;

    #[test]
    fn matches_the_reference_vectors() {
        // Vectors from the FNV reference test suite.
        let cases: &[(&str, &[u8], u32)] = &[
            ("empty input is the offset basis", b"", 0x811c_9dc5),
            ("single byte", b"a", 0xe40c_292c),
            ("short word", b"foobar", 0xbf9c_f968),
        ];
        for (name, input, expected) in cases {
            assert_eq!(fnv32a(input), *expected, "{name}");
        }
    }
}
