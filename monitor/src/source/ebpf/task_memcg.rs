//! Where the kernel keeps a task's memory cgroup, from the running kernel's BTF.
//!
//! On cgroup v1 the incident programs read `task->cgroups->subsys[memory_cgrp_id]->cgroup->kn->id`
//! with `bpf_probe_read_kernel`; the member offsets differ between kernel builds, so they are
//! resolved here from the type records [`crate::source::btf`] locates, and written into `IncidentConfig`.
use monitor_common::IncidentConfig;

use crate::source::btf::{self, BtfError, KIND_STRUCT, KIND_UNION, TypeRecord, Types, u32_at};

/// Why the offsets could not be resolved.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
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

/// `IncidentConfig` with the v1 memory cgroup offsets filled in.
pub fn v1_offsets(
    types: &Types<'_>,
    mut config: IncidentConfig,
) -> Result<IncidentConfig, OffsetError> {
    let subsys = types.enum_values("cgroup_subsys_id")?;
    let memory = btf::variant(&subsys, "cgroup_subsys_id", "memory_cgrp_id")?;
    config.memcg_v1 = 1;
    config.memory_subsys = u32::try_from(memory).map_err(|_| BtfError::Truncated(0))?;
    config.task_cgroups = types.member_offset("task_struct", "cgroups")?;
    config.css_set_subsys = types.member_offset("css_set", "subsys")?;
    config.css_cgroup = types.member_offset("cgroup_subsys_state", "cgroup")?;
    config.cgroup_kn = types.member_offset("cgroup", "kn")?;
    config.kernfs_id = types.member_offset("kernfs_node", "id")?;
    Ok(config)
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

    #[test]
    fn running_kernel_has_the_task_to_memcg_chain() {
        let Ok(btf) = std::fs::read("/sys/kernel/btf/vmlinux") else {
            test_skip::cannot_run(test_skip::Reason::Btf, "no /sys/kernel/btf/vmlinux");
            return;
        };
        let config = v1_offsets(&Types::parse(&btf).unwrap(), IncidentConfig::EMPTY).unwrap();
        assert_eq!(config.memcg_v1, 1);
        assert!(
            config.task_cgroups > 0 && config.cgroup_kn > 0,
            "{config:?}"
        );
        assert_eq!(
            config.css_cgroup, 0,
            "css->cgroup is the first member of every kernel since 3.x"
        );
    }
}
