//! The running kernel's BTF (/sys/kernel/btf/vmlinux), read for the few facts the kernel
//! programs need and that change between kernel builds: enum values (the memcg tracepoints
//! report stats by their number in `enum node_stat_item` / `enum memcg_stat_item`), struct
//! member offsets, and function prototypes (the fentry programs attach only to a function
//! whose parameters are what they read). Only the type-section walk is implemented (layout:
//! the kernel's Documentation/bpf/btf.rst).
use std::collections::HashMap;

/// The kernel's BTF description of itself (CONFIG_DEBUG_INFO_BTF).
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Why BTF could not answer.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum BtfError {
    /// The data does not start with a little-endian BTF header.
    #[error("not BTF data (bad magic or header)")]
    BadHeader,
    /// A type or string lies outside the data.
    #[error("BTF data is truncated or inconsistent at byte {0}")]
    Truncated(usize),
    /// A type kind this parser does not know; newer kernels may add kinds.
    #[error("unknown BTF type kind {0}")]
    UnknownKind(u32),
    /// No enum of that name.
    #[error("the kernel's BTF has no enum {0}")]
    NoSuchEnum(String),
    /// The enum lacks a variant we need.
    #[error("enum {enum_name} has no item {variant} in this kernel")]
    NoSuchVariant { enum_name: String, variant: String },
}

const MAGIC: u16 = 0xeb9f;
const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
pub(crate) const KIND_STRUCT: u32 = 4;
pub(crate) const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;
/// Pointers and qualifiers followed before a type is spelled `?`.
const MAX_TYPE_DEPTH: u32 = 16;

/// One type record: kind, name, member count, kind_flag, and where its members start.
pub(crate) struct TypeRecord {
    pub kind: u32,
    pub name_off: u32,
    pub vlen: usize,
    pub kind_flag: bool,
    pub body: usize,
}

/// The type and string sections, with every type record located. Only each record's start is
/// kept (4 bytes per type, the kernel has over a hundred thousand): records are decoded when
/// asked for, which keeps the agent's peak memory low.
pub(crate) struct Types<'a> {
    pub types: &'a [u8],
    strings: &'a [u8],
    /// Start of each record, indexed by type id - 1 (id 0 is `void`).
    starts: Vec<u32>,
}

impl<'a> Types<'a> {
    pub(crate) fn parse(btf: &'a [u8]) -> Result<Self, BtfError> {
        if btf.get(0..2) != Some(&MAGIC.to_le_bytes()[..]) {
            return Err(BtfError::BadHeader);
        }
        let field = |pos| u32_at(btf, pos).map_err(|_| BtfError::BadHeader);
        let hdr_len = field(4)? as usize;
        let section = |off: u32, len: u32| {
            let start = hdr_len + off as usize;
            btf.get(start..start + len as usize)
                .ok_or(BtfError::Truncated(start))
        };
        let types = section(field(8)?, field(12)?)?;
        let strings = section(field(16)?, field(20)?)?;
        let mut starts = Vec::new();
        let mut pos = 0;
        while pos < types.len() {
            let start = u32::try_from(pos).map_err(|_| BtfError::Truncated(pos))?;
            starts.push(start);
            let record = record_at(types, pos)?;
            pos = record.body + trailing_bytes(record.kind, record.vlen)?;
        }
        Ok(Self {
            types,
            strings,
            starts,
        })
    }

    /// Every type record, in type id order.
    pub(crate) fn records(&self) -> impl Iterator<Item = Result<TypeRecord, BtfError>> + '_ {
        self.starts
            .iter()
            .map(|start| record_at(self.types, *start as usize))
    }

    /// The record of a type id (0 is `void`, which has none).
    pub(crate) fn record(&self, type_id: u32) -> Option<TypeRecord> {
        let start = *self.starts.get(type_id.checked_sub(1)? as usize)?;
        record_at(self.types, start as usize).ok()
    }

    /// The string at `offset` in the string section.
    pub(crate) fn name(&self, offset: u32) -> Result<&'a str, BtfError> {
        let start = offset as usize;
        let rest = self
            .strings
            .get(start..)
            .ok_or(BtfError::Truncated(start))?;
        let end = rest
            .iter()
            .position(|b| *b == 0)
            .ok_or(BtfError::Truncated(start))?;
        std::str::from_utf8(&rest[..end]).map_err(|_| BtfError::Truncated(start))
    }

    /// Variants of the named enum, name -> value.
    pub(crate) fn enum_values(&self, enum_name: &str) -> Result<HashMap<String, i64>, BtfError> {
        for record in self.records() {
            let record = record?;
            let member_size = match record.kind {
                KIND_ENUM => 8,
                KIND_ENUM64 => 12,
                _ => continue,
            };
            if record.name_off == 0 || self.name(record.name_off)? != enum_name {
                continue;
            }
            let mut values = HashMap::with_capacity(record.vlen);
            for i in 0..record.vlen {
                let member = record.body + i * member_size;
                let value = if record.kind == KIND_ENUM {
                    i64::from(u32_at(self.types, member + 4)? as i32)
                } else {
                    let lo = u64::from(u32_at(self.types, member + 4)?);
                    let hi = u64::from(u32_at(self.types, member + 8)?);
                    (hi << 32 | lo) as i64
                };
                values.insert(self.name(u32_at(self.types, member)?)?.to_string(), value);
            }
            return Ok(values);
        }
        Err(BtfError::NoSuchEnum(enum_name.to_string()))
    }
}

impl Types<'_> {
    /// The parameter types of the function `name`, spelled as C does (`struct lruvec *`,
    /// `enum node_stat_item`, `int`; qualifiers dropped, typedefs by their name), or `None`
    /// when the BTF has no such function (never built, or inlined everywhere).
    pub(crate) fn function_params(&self, name: &str) -> Result<Option<Vec<String>>, BtfError> {
        for record in self.records() {
            let record = record?;
            if record.kind != KIND_FUNC || self.name(record.name_off)? != name {
                continue;
            }
            let proto = self
                .record(self.referenced(&record)?)
                .filter(|p| p.kind == KIND_FUNC_PROTO)
                .ok_or(BtfError::Truncated(record.body))?;
            return self.params(&proto).map(Some);
        }
        Ok(None)
    }

    /// The arguments a raw or BTF tracepoint program gets for tracepoint `name` (its
    /// `TP_PROTO` after the leading `void *`), from the kernel's `btf_trace_<name>` typedef;
    /// `None` when the BTF has no such tracepoint.
    pub(crate) fn tracepoint_params(&self, name: &str) -> Result<Option<Vec<String>>, BtfError> {
        let typedef = format!("btf_trace_{name}");
        for record in self.records() {
            let record = record?;
            if record.kind != KIND_TYPEDEF || self.name(record.name_off)? != typedef {
                continue;
            }
            let proto = self
                .record(self.referenced(&record)?)
                .filter(|p| p.kind == KIND_PTR)
                .and_then(|ptr| self.record(self.referenced(&ptr).ok()?))
                .filter(|p| p.kind == KIND_FUNC_PROTO)
                .ok_or(BtfError::Truncated(record.body))?;
            let mut params = self.params(&proto)?;
            if params.first().map(String::as_str) == Some("void *") {
                params.remove(0);
            }
            return Ok(Some(params));
        }
        Ok(None)
    }

    /// A FUNC_PROTO's parameter types, spelled as C does.
    fn params(&self, proto: &TypeRecord) -> Result<Vec<String>, BtfError> {
        (0..proto.vlen)
            .map(|i| self.spell(u32_at(self.types, proto.body + i * 8 + 4)?, 0))
            .collect()
    }

    /// The type a PTR, TYPEDEF, qualifier or FUNC refers to (the record's type/size word).
    fn referenced(&self, record: &TypeRecord) -> Result<u32, BtfError> {
        u32_at(self.types, record.body - 4)
    }

    fn spell(&self, type_id: u32, depth: u32) -> Result<String, BtfError> {
        if type_id == 0 {
            return Ok("void".into());
        }
        let record = self.record(type_id).ok_or(BtfError::Truncated(0))?;
        if depth > MAX_TYPE_DEPTH {
            return Ok("?".into());
        }
        let name = self.name(record.name_off)?;
        Ok(match record.kind {
            KIND_PTR => format!("{} *", self.spell(self.referenced(&record)?, depth + 1)?),
            KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                self.spell(self.referenced(&record)?, depth + 1)?
            }
            KIND_STRUCT => format!("struct {name}"),
            KIND_UNION => format!("union {name}"),
            KIND_ENUM | KIND_ENUM64 => format!("enum {name}"),
            KIND_INT | KIND_TYPEDEF => name.to_string(),
            _ => "?".into(),
        })
    }
}

fn record_at(types: &[u8], pos: usize) -> Result<TypeRecord, BtfError> {
    let info = u32_at(types, pos + 4)?;
    Ok(TypeRecord {
        kind: (info >> 24) & 0x1f,
        name_off: u32_at(types, pos)?,
        vlen: (info & 0xffff) as usize,
        kind_flag: info >> 31 == 1,
        body: pos + 12,
    })
}

/// Variants of the named enum in raw BTF, name -> value.
pub fn enum_values(btf: &[u8], enum_name: &str) -> Result<HashMap<String, i64>, BtfError> {
    Types::parse(btf)?.enum_values(enum_name)
}

/// The value of one variant.
pub fn variant(
    values: &HashMap<String, i64>,
    enum_name: &str,
    name: &str,
) -> Result<i64, BtfError> {
    values
        .get(name)
        .copied()
        .ok_or_else(|| BtfError::NoSuchVariant {
            enum_name: enum_name.to_string(),
            variant: name.to_string(),
        })
}

/// Bytes that follow the 12-byte common type record, by kind.
fn trailing_bytes(kind: u32, vlen: usize) -> Result<usize, BtfError> {
    Ok(match kind {
        // INT, VAR, DECL_TAG: one u32.
        1 | 14 | 17 => 4,
        // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG: nothing.
        2 | 7 | 8 | 9 | 10 | 11 | 12 | 16 | 18 => 0,
        // ARRAY: element type, index type, count.
        3 => 12,
        // STRUCT, UNION, DATASEC, ENUM64: 12 bytes per member.
        4 | 5 | 15 | 19 => 12 * vlen,
        // ENUM, FUNC_PROTO: 8 bytes per member.
        6 | 13 => 8 * vlen,
        other => return Err(BtfError::UnknownKind(other)),
    })
}

pub(crate) fn u32_at(data: &[u8], pos: usize) -> Result<u32, BtfError> {
    let bytes = data.get(pos..pos + 4).ok_or(BtfError::Truncated(pos))?;
    Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// Test builders of BTF blobs, shared with the other BTF readers' tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::MAGIC;

    /// Offset of `name` in a NUL-separated string section.
    pub(crate) fn name_offset(strings: &[u8], name: &str) -> u32 {
        let needle = format!("\0{name}\0");
        strings
            .windows(needle.len())
            .position(|w| w == needle.as_bytes())
            .expect("name in the string section") as u32
            + 1
    }

    /// A little-endian BTF blob: header, the type records (as u32 words) and the strings.
    pub(crate) fn build(strings: &[u8], records: &[&[u32]]) -> Vec<u8> {
        let types: Vec<u8> = records
            .iter()
            .flat_map(|words| words.iter().flat_map(|w| w.to_le_bytes()))
            .collect();
        let mut btf = Vec::new();
        btf.extend(MAGIC.to_le_bytes());
        btf.extend([1u8, 0]);
        let len = types.len() as u32;
        for word in [24u32, 0, len, len, strings.len() as u32] {
            btf.extend(word.to_le_bytes());
        }
        btf.extend(&types);
        btf.extend(strings);
        btf
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{build, name_offset};
    use super::*;

    /// Builds BTF with an INT, a STRUCT with one member, and an ENUM.
    fn sample() -> Vec<u8> {
        let strings: &[u8] = b"\0int\0s\0m\0colors\0RED\0BLUE\0";
        let name = |s| name_offset(strings, s);
        build(
            strings,
            &[
                &[name("int"), 1 << 24, 4, 32],                // INT
                &[name("s"), 4 << 24 | 1, 4, name("m"), 1, 0], // STRUCT, one member
                &[
                    name("colors"),
                    6 << 24 | 2,
                    4,
                    name("RED"),
                    3,
                    name("BLUE"),
                    (-2i32) as u32,
                ],
            ],
        )
    }

    #[test]
    fn finds_enum_after_other_kinds() {
        let values = enum_values(&sample(), "colors").unwrap();
        assert_eq!(values["RED"], 3);
        assert_eq!(values["BLUE"], -2);
        assert_eq!(variant(&values, "colors", "RED"), Ok(3));
        assert!(matches!(
            variant(&values, "colors", "GREEN"),
            Err(BtfError::NoSuchVariant { .. })
        ));
    }

    #[test]
    fn missing_enum_and_bad_data_are_errors() {
        assert_eq!(
            enum_values(&sample(), "shapes"),
            Err(BtfError::NoSuchEnum("shapes".into()))
        );
        assert_eq!(enum_values(b"nope", "colors"), Err(BtfError::BadHeader));
        let mut cut = sample();
        cut.truncate(40);
        assert!(matches!(
            enum_values(&cut, "colors"),
            Err(BtfError::Truncated(_))
        ));
    }

    #[test]
    fn function_parameters_are_spelled_as_in_c() {
        let strings: &[u8] = b"\0int\0lruvec\0node_stat_item\0f\0a\0b\0c\0u32\0";
        let name = |s| name_offset(strings, s);
        let btf = build(
            strings,
            &[
                &[name("int"), 1 << 24, 4, 32],        // 1: INT int
                &[name("lruvec"), 4 << 24, 8],         // 2: STRUCT lruvec
                &[0, 2 << 24, 2],                      // 3: PTR -> 2
                &[0, 10 << 24, 3],                     // 4: CONST -> 3
                &[name("node_stat_item"), 6 << 24, 4], // 5: ENUM, no values
                &[name("u32"), 8 << 24, 1],            // 6: TYPEDEF u32 -> 1
                &[0, 13 << 24 | 3, 0, name("a"), 4, name("b"), 5, name("c"), 6], // 7: FUNC_PROTO (const struct lruvec *, enum node_stat_item, u32)
                &[name("f"), 12 << 24, 7],                                       // 8: FUNC f
            ],
        );
        let types = Types::parse(&btf).unwrap();
        assert_eq!(
            types.function_params("f").unwrap(),
            Some(vec![
                "struct lruvec *".to_string(),
                "enum node_stat_item".into(),
                "u32".into()
            ])
        );
        assert_eq!(types.function_params("g").unwrap(), None);
        assert_eq!(
            types.function_params("int").unwrap(),
            None,
            "only functions"
        );
    }

    #[test]
    fn tracepoint_arguments_come_from_the_btf_trace_typedef() {
        let strings: &[u8] = b"\0int\0mem_cgroup\0btf_trace_mod_memcg_state\0btf_trace_other\0";
        let name = |s| name_offset(strings, s);
        let btf = build(
            strings,
            &[
                &[name("int"), 1 << 24, 4, 32],                   // 1: INT int
                &[name("mem_cgroup"), 4 << 24, 8],                // 2: STRUCT mem_cgroup
                &[0, 2 << 24, 2],                                 // 3: PTR -> mem_cgroup
                &[0, 2 << 24, 0],                                 // 4: PTR -> void
                &[0, 13 << 24 | 4, 0, 0, 4, 0, 3, 0, 1, 0, 1], // 5: FUNC_PROTO (void *, struct mem_cgroup *, int, int)
                &[0, 2 << 24, 5],                              // 6: PTR -> 5
                &[name("btf_trace_mod_memcg_state"), 8 << 24, 6], // 7: TYPEDEF -> 6
                &[name("btf_trace_other"), 8 << 24, 1],        // 8: TYPEDEF -> int
            ],
        );
        let types = Types::parse(&btf).unwrap();
        assert_eq!(
            types.tracepoint_params("mod_memcg_state").unwrap(),
            Some(vec![
                "struct mem_cgroup *".to_string(),
                "int".into(),
                "int".into()
            ])
        );
        assert_eq!(types.tracepoint_params("absent").unwrap(), None);
        assert!(
            types.tracepoint_params("other").is_err(),
            "not a pointer to a prototype"
        );
    }

    #[test]
    fn running_kernel_has_the_stat_items() {
        let Ok(btf) = std::fs::read("/sys/kernel/btf/vmlinux") else {
            test_skip::cannot_run(test_skip::Reason::Btf, "no /sys/kernel/btf/vmlinux");
            return;
        };
        let node = enum_values(&btf, "node_stat_item").unwrap();
        let inactive = variant(&node, "node_stat_item", "NR_INACTIVE_FILE").unwrap();
        let active = variant(&node, "node_stat_item", "NR_ACTIVE_FILE").unwrap();
        assert_eq!(
            active,
            inactive + 1,
            "LRU lists are consecutive in the kernel"
        );
        let memcg = enum_values(&btf, "memcg_stat_item").unwrap();
        assert!(variant(&memcg, "memcg_stat_item", "MEMCG_KMEM").unwrap() > 0);
    }
}
