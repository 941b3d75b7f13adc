//! How deeply a manifest nests flow collections (`[...]`, `{...}`), measured before it is
//! parsed. The YAML tokenizer rescans its pending keys, one per open flow collection, for
//! every token, so its cost grows with the square of the nesting: 200 KB of `[` kept it busy
//! for 21 s. Counting with that same tokenizer and stopping at the limit costs at most the
//! limit per token, and agrees exactly with what the parser would see (brackets in quoted
//! strings, plain scalars and comments are not collections).
use std::mem::MaybeUninit;

/// Whether some flow collection in `text` lies more than `limit` levels deep. A text the
/// tokenizer rejects counts as not too deep: the parse that follows reports its error.
pub fn flow_nesting_exceeds(text: &str, limit: usize) -> bool {
    let mut parser = MaybeUninit::<unsafe_libyaml::yaml_parser_t>::uninit();
    // SAFETY: the parser is initialised before use and deleted once; the input outlives it
    // (set_input_string keeps the pointer, and both end in this function); each token the
    // scanner filled is deleted before the next scan.
    unsafe {
        if !unsafe_libyaml::yaml_parser_initialize(parser.as_mut_ptr()).ok {
            return false;
        }
        let parser = parser.as_mut_ptr();
        unsafe_libyaml::yaml_parser_set_input_string(parser, text.as_ptr(), text.len() as _);
        let mut depth = 0usize;
        let exceeded = loop {
            let mut token = MaybeUninit::<unsafe_libyaml::yaml_token_t>::uninit();
            if !unsafe_libyaml::yaml_parser_scan(parser, token.as_mut_ptr()).ok {
                break false;
            }
            let token = token.as_mut_ptr();
            let kind = (*token).type_;
            unsafe_libyaml::yaml_token_delete(token);
            match kind {
                unsafe_libyaml::YAML_FLOW_SEQUENCE_START_TOKEN
                | unsafe_libyaml::YAML_FLOW_MAPPING_START_TOKEN => {
                    depth += 1;
                    if depth > limit {
                        break true;
                    }
                }
                unsafe_libyaml::YAML_FLOW_SEQUENCE_END_TOKEN
                | unsafe_libyaml::YAML_FLOW_MAPPING_END_TOKEN => depth = depth.saturating_sub(1),
                unsafe_libyaml::YAML_STREAM_END_TOKEN | unsafe_libyaml::YAML_NO_TOKEN => {
                    break false;
                }
                _ => {}
            }
        };
        unsafe_libyaml::yaml_parser_delete(parser);
        exceeded
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn collections_count_and_brackets_in_scalars_do_not() {
        let cases = [
            (
                "flat pod",
                "kind: Pod\nmetadata: {name: a, uid: b}\n",
                1,
                false,
            ),
            (
                "two levels within a limit of two",
                "a: [{b: 1}]\n",
                2,
                false,
            ),
            (
                "three levels over a limit of two",
                "a: [{b: [1]}]\n",
                2,
                true,
            ),
            (
                "siblings do not add up",
                "a: [1]\nb: [2]\nc: {d: [3]}\n",
                2,
                false,
            ),
            (
                "brackets in quoted strings",
                "a: \"[[[[\"\nb: '{{{{'\n",
                0,
                false,
            ),
            ("brackets in a plain scalar", "a: x[[[[y\n", 0, false),
            ("brackets in a comment", "a: 1 # [[[[\n", 0, false),
            ("json", r#"{"a": [[[1]]]}"#, 3, true),
            (
                "a syntax error is left to the parser",
                "a: [unclosed\n",
                5,
                false,
            ),
        ];
        for (name, text, limit, want) in cases {
            assert_eq!(flow_nesting_exceeds(text, limit), want, "{name}");
        }
    }

    #[test]
    fn a_deep_document_is_refused_quickly() {
        let text = "[".repeat(1 << 20);
        let start = Instant::now();
        assert!(flow_nesting_exceeds(&text, 64));
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
    }
}
