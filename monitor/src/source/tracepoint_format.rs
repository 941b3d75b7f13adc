//! A tracepoint's record layout from its tracefs `format` file, checked against the fields a
//! program reads.
//!
//! The kernel describes each field of a classic tracepoint's record as
//! `field:<type> <name>; offset:<n>; size:<n>; signed:<0|1>;`. Offsets move when a
//! kernel adds, drops or reorders fields, so the programs get them from here instead of
//! constants; a field that is missing, or has another size or signedness than the program
//! reads, means the program would read garbage, and it is not attached.
use std::{fs, io, path::Path};

use monitor_common::{FieldOffsets, MAX_FIELDS};

use super::programs::{FieldSpec, ProgramSpec};

/// Why a tracepoint's layout does not fit a program.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum LayoutError {
    /// The format file could not be read.
    #[error("reading {path}: {message}")]
    Read { path: String, message: String },
    /// A `field:` line is not of the kernel's form.
    #[error("unexpected line in the tracepoint format: {0:?}")]
    Unparsable(String),
    /// The program reads a field this kernel's record does not have.
    #[error("no field {0} in this kernel's record")]
    Missing(&'static str),
    /// The field exists with another size than the program reads.
    #[error("field {field} is {got} bytes in this kernel, the program reads {want}")]
    Size {
        field: &'static str,
        want: u32,
        got: u32,
    },
    /// The program reads a string's `__data_loc` word where the kernel has a value, or the
    /// other way round.
    #[error("field {field} is {} in this kernel, the program reads {}", kind(*.got), kind(*.want))]
    Kind {
        field: &'static str,
        want: bool,
        got: bool,
    },
    /// The field exists with another signedness than the program reads.
    #[error("field {field} is {} in this kernel, the program reads it {}", signedness(*.got), signedness(*.want))]
    Signedness {
        field: &'static str,
        want: bool,
        got: bool,
    },
    /// More fields than [`MAX_FIELDS`] (a compatibility table error, caught by a test).
    #[error("a program reads at most {MAX_FIELDS} fields")]
    TooMany,
}

fn kind(data_loc: bool) -> &'static str {
    if data_loc {
        "a __data_loc string"
    } else {
        "a value"
    }
}

fn signedness(signed: bool) -> &'static str {
    if signed { "signed" } else { "unsigned" }
}

/// One field of a record as the format file describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatField {
    pub name: String,
    pub offset: u32,
    pub size: u32,
    pub signed: bool,
    /// Declared `__data_loc`: the location of a string stored after the fixed fields.
    pub data_loc: bool,
}

/// Every field of a format file, the common header's included.
pub fn parse(format: &str) -> Result<Vec<FormatField>, LayoutError> {
    format
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("field:"))
        .map(|line| parse_field(line).ok_or_else(|| LayoutError::Unparsable(line.to_string())))
        .collect()
}

fn parse_field(line: &str) -> Option<FormatField> {
    let mut parts = line.split(';').map(str::trim);
    let decl = parts.next()?.strip_prefix("field:")?;
    let data_loc = decl.starts_with("__data_loc ");
    // The name is the declaration's last word, without an array suffix (`char comm[16]`).
    let name = decl.split_whitespace().last()?;
    let name = name.split('[').next()?.to_string();
    let mut value = |key: &str| -> Option<u32> { parts.next()?.strip_prefix(key)?.parse().ok() };
    let offset = value("offset:")?;
    let size = value("size:")?;
    let signed = value("signed:")? != 0;
    Some(FormatField {
        name,
        offset,
        size,
        signed,
        data_loc,
    })
}

/// The offsets of `wanted` in a record of `fields`, in `wanted`'s order, or why they do not fit.
pub fn offsets(fields: &[FormatField], wanted: &[FieldSpec]) -> Result<FieldOffsets, LayoutError> {
    if wanted.len() > MAX_FIELDS {
        return Err(LayoutError::TooMany);
    }
    let mut out = FieldOffsets::EMPTY;
    for (slot, want) in out.offsets.iter_mut().zip(wanted) {
        let got = fields
            .iter()
            .find(|f| f.name == want.name)
            .ok_or(LayoutError::Missing(want.name))?;
        if got.size != want.size {
            return Err(LayoutError::Size {
                field: want.name,
                want: want.size,
                got: got.size,
            });
        }
        if got.data_loc != want.data_loc {
            return Err(LayoutError::Kind {
                field: want.name,
                want: want.data_loc,
                got: got.data_loc,
            });
        }
        if !want.data_loc && got.signed != want.signed {
            return Err(LayoutError::Signedness {
                field: want.name,
                want: want.signed,
                got: got.signed,
            });
        }
        *slot = got.offset;
    }
    out.valid = 1;
    Ok(out)
}

/// The offsets of a program's fields in the running kernel's record of its tracepoint.
pub fn read(tracefs: &Path, spec: &ProgramSpec) -> Result<FieldOffsets, LayoutError> {
    let path = tracefs
        .join("events")
        .join(spec.category)
        .join(spec.tracepoint)
        .join("format");
    let text = fs::read_to_string(&path).map_err(|e: io::Error| LayoutError::Read {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    offsets(&parse(&text)?, spec.fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::programs::{INCIDENT_PROGRAMS, PROGRAMS};

    /// `memcg/mod_memcg_state` as Linux 6.18 describes it.
    const MEMCG_6_18: &str = "name: mod_memcg_state
ID: 1350
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:u64 id;\toffset:8;\tsize:8;\tsigned:0;
\tfield:int item;\toffset:16;\tsize:4;\tsigned:1;
\tfield:int val;\toffset:20;\tsize:4;\tsigned:1;

print fmt: \"memcg_id=%llu item=%d val=%d\", REC->id, REC->item, REC->val
";

    fn spec(name: &str) -> &'static ProgramSpec {
        PROGRAMS
            .iter()
            .chain(INCIDENT_PROGRAMS)
            .find(|p| p.name == name)
            .unwrap()
    }

    /// The 6.18 format with `from` replaced by `to`.
    fn edited(from: &str, to: &str) -> String {
        assert!(MEMCG_6_18.contains(from), "{from}");
        MEMCG_6_18.replace(from, to)
    }

    #[test]
    fn offsets_follow_the_running_kernels_format() {
        let memcg = spec("mod_memcg_state");
        let shifted = MEMCG_6_18
            .replace(
                "\tfield:u64 id;\toffset:8;",
                "\tfield:int extra;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:u64 id;\toffset:16;",
            )
            .replace("item;\toffset:16;", "item;\toffset:24;")
            .replace("val;\toffset:20;", "val;\toffset:28;");
        let reordered = edited(
            "\tfield:int item;\toffset:16;\tsize:4;\tsigned:1;\n\tfield:int val;\toffset:20;",
            "\tfield:int val;\toffset:16;\tsize:4;\tsigned:1;\n\tfield:int item;\toffset:20;",
        );
        let cases = [
            ("6.18 as recorded", MEMCG_6_18.to_string(), [8, 16, 20]),
            ("a field added before id", shifted, [16, 24, 28]),
            ("item and val swapped", reordered, [8, 20, 16]),
        ];
        for (name, format, want) in cases {
            let got = offsets(&parse(&format).unwrap(), memcg.fields).unwrap();
            assert_eq!(&got.offsets[..3], &want, "{name}");
            assert_eq!(got.valid, 1, "{name}");
        }
    }

    #[test]
    fn a_field_that_does_not_match_is_refused_with_the_reason() {
        let memcg = spec("mod_memcg_state");
        let cases = [
            (
                "val missing",
                edited("\tfield:int val;\toffset:20;\tsize:4;\tsigned:1;\n", ""),
                LayoutError::Missing("val"),
            ),
            (
                "val widened to long",
                edited(
                    "field:int val;\toffset:20;\tsize:4;",
                    "field:long val;\toffset:24;\tsize:8;",
                ),
                LayoutError::Size {
                    field: "val",
                    want: 4,
                    got: 8,
                },
            ),
            (
                "id signed",
                edited(
                    "field:u64 id;\toffset:8;\tsize:8;\tsigned:0;",
                    "field:s64 id;\toffset:8;\tsize:8;\tsigned:1;",
                ),
                LayoutError::Signedness {
                    field: "id",
                    want: false,
                    got: true,
                },
            ),
        ];
        for (name, format, want) in cases {
            let got = offsets(&parse(&format).unwrap(), memcg.fields).unwrap_err();
            assert_eq!(got, want, "{name}");
        }
        assert_eq!(
            LayoutError::Size {
                field: "val",
                want: 4,
                got: 8
            }
            .to_string(),
            "field val is 8 bytes in this kernel, the program reads 4"
        );
    }

    #[test]
    fn format_lines_parse_with_arrays_and_data_locations() {
        let cases = [
            (
                "\tfield:__data_loc char[] path;\toffset:24;\tsize:4;\tsigned:0;",
                ("path", 24, 4, false, true),
            ),
            (
                "\tfield:char comm[16];\toffset:12;\tsize:16;\tsigned:0;",
                ("comm", 12, 16, false, false),
            ),
            (
                "\tfield:short oom_score_adj;\toffset:64;\tsize:2;\tsigned:1;",
                ("oom_score_adj", 64, 2, true, false),
            ),
        ];
        for (line, (name, offset, size, signed, data_loc)) in cases {
            let got = &parse(line).unwrap()[0];
            assert_eq!(
                got,
                &FormatField {
                    name: name.into(),
                    offset,
                    size,
                    signed,
                    data_loc,
                },
                "{line}"
            );
        }
        assert!(matches!(
            parse("\tfield:int x;\toffset:eight;\tsize:4;\tsigned:1;"),
            Err(LayoutError::Unparsable(_))
        ));
    }

    /// `cgroup/cgroup_mkdir` as Linux 6.1 and 6.18 describe its path: the signed flag of a
    /// `__data_loc` word follows the string's element type and changed, the word did not.
    #[test]
    fn a_string_location_is_checked_for_its_kind_not_its_sign() {
        let mkdir = spec("cgroup_mkdir");
        let path_index = mkdir.fields.iter().position(|f| f.name == "path").unwrap();
        let cases = [
            ("6.18: unsigned", "__data_loc char[] path", 0, Ok(24)),
            ("6.1: signed", "__data_loc char[] path", 1, Ok(24)),
            (
                "a value, not a string",
                "u32 path",
                0,
                Err(LayoutError::Kind {
                    field: "path",
                    want: true,
                    got: false,
                }),
            ),
        ];
        for (name, decl, signed, want) in cases {
            let format = format!(
                "\tfield:int root;\toffset:8;\tsize:4;\tsigned:1;
\tfield:int level;\toffset:12;\tsize:4;\tsigned:1;
\tfield:u64 id;\toffset:16;\tsize:8;\tsigned:0;
\tfield:{decl};\toffset:24;\tsize:4;\tsigned:{signed};
"
            );
            let got =
                offsets(&parse(&format).unwrap(), mkdir.fields).map(|o| o.offsets[path_index]);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn mark_victim_before_6_8_lacks_the_sizes() {
        // Linux 6.1: the record carries only the pid.
        let format = "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int pid;\toffset:8;\tsize:4;\tsigned:1;
";
        let got = offsets(&parse(format).unwrap(), spec("mark_victim").fields).unwrap_err();
        assert_eq!(got, LayoutError::Missing("comm"));
    }

    #[test]
    fn every_program_fits_the_formats_of_this_kernel() {
        let tracefs = match crate::source::tracefs::ensure_tracefs() {
            Ok(tracefs) => tracefs,
            Err(e) => {
                test_skip::cannot_run(test_skip::Reason::Tracefs, &e.to_string());
                return;
            }
        };
        for spec in PROGRAMS.iter().chain(INCIDENT_PROGRAMS) {
            if !crate::source::tracefs::tracepoint_exists(&tracefs, spec) {
                // Only the memcg tracepoints are younger than the kernels the agent supports.
                assert_eq!(spec.category, "memcg", "{} not in this kernel", spec.hook());
                test_skip::cannot_run(
                    test_skip::Reason::MemcgTracepoints,
                    &format!("{} not in this kernel", spec.hook()),
                );
                continue;
            }
            let got = read(&tracefs, spec);
            assert!(got.is_ok(), "{}: {got:?}", spec.hook());
        }
    }
}
