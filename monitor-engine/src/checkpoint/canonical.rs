//! The canonical dump that checksums are computed over.
//!
//! Like the kubelet, the checksum covers the logical content, not the file's bytes: the value is
//! converted to a JSON tree and printed with object keys sorted, so neither map iteration order,
//! nor the order of fields in the file, nor whitespace changes it. A schema name is printed
//! first; it is a frozen string rather than the Rust type name, so renaming a type can never
//! change a checksum (the kubelet needed a string substitution to recover from exactly that).
use serde::Serialize;
use serde_json::Value;

use super::fnv::fnv32a;

/// Returns the FNV-32a checksum of the canonical dump of `value` under `schema`.
pub(super) fn checksum<T: Serialize>(schema: &str, value: &T) -> Result<u32, serde_json::Error> {
    Ok(fnv32a(dump(schema, value)?.as_bytes()))
}

/// Prints `value` canonically, prefixed with `schema`.
pub(super) fn dump<T: Serialize>(schema: &str, value: &T) -> Result<String, serde_json::Error> {
    let mut out = String::from(schema);
    write_value(&mut out, &serde_json::to_value(value)?);
    Ok(out)
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        // Scalars print as JSON; strings come out quoted and escaped, so no string can imitate
        // the structure around it.
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            out.push_str(&value.to_string());
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::{checksum, dump};

    #[test]
    fn dump_sorts_keys_and_prefixes_the_schema() {
        let value = serde_json::json!({"b": [1, null], "a": {"y": "q\"", "x": true}});
        assert_eq!(
            dump("schema/v9", &value).unwrap(),
            r#"schema/v9{"a":{"x":true,"y":"q\""},"b":[1,null]}"#
        );
    }

    #[test]
    fn checksum_ignores_map_insertion_order() {
        let forward: HashMap<String, u64> = (0..50).map(|i| (format!("k{i}"), i)).collect();
        let backward: HashMap<String, u64> = (0..50).rev().map(|i| (format!("k{i}"), i)).collect();
        assert_eq!(
            checksum("s", &forward).unwrap(),
            checksum("s", &backward).unwrap()
        );
    }

    #[test]
    fn checksum_depends_on_schema_and_content() {
        let base = checksum("s1", &[1, 2]).unwrap();
        let cases = [
            ("other schema", checksum("s2", &[1, 2]).unwrap()),
            ("other value", checksum("s1", &[1, 3]).unwrap()),
            ("other order in a list", checksum("s1", &[2, 1]).unwrap()),
        ];
        for (name, other) in cases {
            assert_ne!(base, other, "{name}");
        }
    }
}
