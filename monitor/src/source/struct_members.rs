//! Byte offsets of struct members in the running kernel, from its BTF: the kernel programs
//! that follow pointers (`bpf_probe_read_kernel`) are told where each member lies, because
//! the layout differs between kernel builds.
use crate::source::btf::{BtfError, KIND_STRUCT, KIND_UNION, TypeRecord, Types, u32_at};

/// Why the offsets could not be resolved.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum OffsetError {
    /// The BTF data is malformed, or `enum cgroup_subsys_id` lacks `memory_cgrp_id`.
    #[error(transparent)]
    Btf(#[from] BtfError),
    /// No struct of that name.
    #[error("the kernel's BTF has no struct {0}")]
    NoSuchStruct(String),
    /// The struct lacks a member we need (also when it is a bitfield).
    #[error("struct {struct_name} has no member {member} in this kernel")]
    NoSuchMember { struct_name: String, member: String },
}

/// Struct member offsets, looking into anonymous structs and unions the way C does.
pub(crate) trait MemberOffsets {
    fn member_offset(&self, struct_name: &str, member: &str) -> Result<u32, OffsetError>;
    fn find_member(&self, record: &TypeRecord, member: &str) -> Result<Option<u32>, BtfError>;
}

impl MemberOffsets for Types<'_> {
    /// Byte offset of `member` in struct `struct_name`, looking into anonymous structs and
    /// unions the way C does.
    fn member_offset(&self, struct_name: &str, member: &str) -> Result<u32, OffsetError> {
        let mut found_struct = false;
        for record in self.records() {
            let record = record?;
            if record.kind != KIND_STRUCT || self.name(record.name_off)? != struct_name {
                continue;
            }
            found_struct = true;
            if let Some(bits) = self.find_member(&record, member)? {
                return Ok(bits / 8);
            }
        }
        Err(if found_struct {
            OffsetError::NoSuchMember {
                struct_name: struct_name.into(),
                member: member.into(),
            }
        } else {
            OffsetError::NoSuchStruct(struct_name.into())
        })
    }

    /// Bit offset of a byte-aligned, non-bitfield member.
    fn find_member(&self, record: &TypeRecord, member: &str) -> Result<Option<u32>, BtfError> {
        for i in 0..record.vlen {
            let at = record.body + i * 12;
            let (name_off, type_id, raw_offset) = (
                u32_at(self.types, at)?,
                u32_at(self.types, at + 4)?,
                u32_at(self.types, at + 8)?,
            );
            // With kind_flag the high 8 bits hold a bitfield size; pointers are never bitfields.
            let (bits, bitfield) = if record.kind_flag {
                (raw_offset & 0xff_ffff, raw_offset >> 24 != 0)
            } else {
                (raw_offset, false)
            };
            if name_off == 0 {
                let nested = self
                    .record(type_id)
                    .filter(|r| matches!(r.kind, KIND_STRUCT | KIND_UNION));
                if let Some(nested) = nested
                    && let Some(inner) = self.find_member(&nested, member)?
                {
                    return Ok(Some(bits + inner));
                }
            } else if self.name(name_off)? == member && !bitfield && bits % 8 == 0 {
                return Ok(Some(bits));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::btf::testing::{build, name_offset};

    /// BTF with `struct outer { int a; union { int b; long c; }; int d:3; }` and an INT.
    fn sample() -> Vec<u8> {
        let strings: &[u8] = b"\0int\0outer\0a\0b\0c\0d\0";
        let name = |s| name_offset(strings, s);
        build(
            strings,
            &[
                // 1: INT
                &[name("int"), 1 << 24, 4, 32],
                // 2: STRUCT outer with kind_flag: a at 0, anonymous union (3) at 64, d:3 at 128.
                &[
                    name("outer"),
                    1 << 31 | 4 << 24 | 3,
                    24,
                    name("a"),
                    1,
                    0,
                    0,
                    3,
                    64,
                    name("d"),
                    1,
                    3 << 24 | 128,
                ],
                // 3: anonymous UNION { b at 0, c at 0 }.
                &[0, 5 << 24 | 2, 8, name("b"), 1, 0, name("c"), 1, 0],
            ],
        )
    }

    #[test]
    fn member_offsets_by_case() {
        let btf = sample();
        let types = Types::parse(&btf).unwrap();
        let cases: [(&str, &str, &str, Result<u32, OffsetError>); 5] = [
            ("plain member", "outer", "a", Ok(0)),
            ("member of an anonymous union", "outer", "c", Ok(8)),
            (
                "bitfields are refused",
                "outer",
                "d",
                Err(OffsetError::NoSuchMember {
                    struct_name: "outer".into(),
                    member: "d".into(),
                }),
            ),
            (
                "missing member",
                "outer",
                "zz",
                Err(OffsetError::NoSuchMember {
                    struct_name: "outer".into(),
                    member: "zz".into(),
                }),
            ),
            (
                "missing struct",
                "inner",
                "a",
                Err(OffsetError::NoSuchStruct("inner".into())),
            ),
        ];
        for (name, st, member, expected) in cases {
            assert_eq!(types.member_offset(st, member), expected, "{name}");
        }
    }
}
