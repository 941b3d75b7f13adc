//! What a YAML text may hold before it is parsed. Every YAML file the agent reads (pod
//! manifests, its configuration) is untrusted and checked here first, because the parser's
//! cost is not bounded by the file's size:
//! * nesting, block (`- - -`, indented mappings) and flow (`[...]`, `{...}`) alike: the
//!   tokenizer rescans its pending keys, one per open flow collection, for every token (200 KB
//!   of `[` kept it busy for 21 s), and 1 MiB of `- - -` (520,000 block levels) took 172 MiB;
//! * tokens: the parser holds every event of a document and the pod is built as a tree of
//!   values, about 100 bytes a token, so 1 MiB of `1,` (a million tokens) took 82 MiB;
//! * aliases (`*name`): each repeats the whole collection its anchor names, so 62 KB of them
//!   took 645 MiB. Kubernetes objects do not need them; none is accepted.
//!
//! Counting with the parser's own tokenizer and stopping at a limit costs at most the nesting
//! limit per token and no memory, and agrees with what the parser would see: brackets,
//! dashes or stars in quoted strings, plain scalars and comments are neither collections nor
//! aliases, and a block collection starts where the tokenizer says it does (a new
//! indentation, or each `-` of `- - -`).
use std::mem::MaybeUninit;

/// How much a text may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The deepest nesting of collections. A sequence written without indentation below a
    /// mapping key (`key:` then `- item` at the key's column) has no token of its own, so the
    /// parser may see up to twice this.
    pub(crate) nesting: usize,
    /// The most tokens (scalars, keys, collection starts and ends, separators).
    pub(crate) tokens: usize,
}

/// The limits of every YAML file the agent reads. A pod or a KubeletConfiguration nests a
/// handful of levels and holds a few thousand tokens (a pod with 20 containers of 50
/// variables each: about 5,000); 131,072 tokens cost the parser about 13 MiB.
pub const LIMITS: Limits = Limits {
    nesting: 64,
    tokens: 1 << 17,
};

/// Why a text is refused unparsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unbounded {
    /// Collections nested deeper than the limit.
    #[error("collections nested deeper than {0} levels")]
    TooDeep(usize),
    /// More tokens than the limit.
    #[error("more than {0} YAML tokens")]
    TooManyTokens(usize),
    /// An alias, at this line (1-based).
    #[error("an alias (*name) on line {0}: aliases are not accepted")]
    Alias(usize),
}

/// Checks `text` against `limits`, stopping at the first excess. A text the tokenizer
/// rejects passes: the parse that follows reports its error.
pub fn check(text: &str, limits: Limits) -> Result<(), Unbounded> {
    let mut parser = MaybeUninit::<unsafe_libyaml_norway::yaml_parser_t>::uninit();
    // SAFETY: the parser is initialised before use and deleted once; the input outlives it
    // (set_input_string keeps the pointer, and both end in this function); each token the
    // scanner filled is read, then deleted before the next scan.
    unsafe {
        if !unsafe_libyaml_norway::yaml_parser_initialize(parser.as_mut_ptr()).ok {
            return Ok(());
        }
        let parser = parser.as_mut_ptr();
        unsafe_libyaml_norway::yaml_parser_set_input_string(parser, text.as_ptr(), text.len() as _);
        let mut depth = 0usize;
        let mut tokens = 0usize;
        let verdict = loop {
            let mut token = MaybeUninit::<unsafe_libyaml_norway::yaml_token_t>::uninit();
            if !unsafe_libyaml_norway::yaml_parser_scan(parser, token.as_mut_ptr()).ok {
                break Ok(());
            }
            let token = token.as_mut_ptr();
            let kind = (*token).type_;
            let line = (*token).start_mark.line as usize + 1;
            unsafe_libyaml_norway::yaml_token_delete(token);
            tokens += 1;
            if tokens > limits.tokens {
                break Err(Unbounded::TooManyTokens(limits.tokens));
            }
            match kind {
                unsafe_libyaml_norway::YAML_FLOW_SEQUENCE_START_TOKEN
                | unsafe_libyaml_norway::YAML_FLOW_MAPPING_START_TOKEN
                | unsafe_libyaml_norway::YAML_BLOCK_SEQUENCE_START_TOKEN
                | unsafe_libyaml_norway::YAML_BLOCK_MAPPING_START_TOKEN => {
                    depth += 1;
                    if depth > limits.nesting {
                        break Err(Unbounded::TooDeep(limits.nesting));
                    }
                }
                unsafe_libyaml_norway::YAML_FLOW_SEQUENCE_END_TOKEN
                | unsafe_libyaml_norway::YAML_FLOW_MAPPING_END_TOKEN
                | unsafe_libyaml_norway::YAML_BLOCK_END_TOKEN => depth = depth.saturating_sub(1),
                unsafe_libyaml_norway::YAML_ALIAS_TOKEN => break Err(Unbounded::Alias(line)),
                unsafe_libyaml_norway::YAML_STREAM_END_TOKEN
                | unsafe_libyaml_norway::YAML_NO_TOKEN => {
                    break Ok(());
                }
                _ => {}
            }
        };
        unsafe_libyaml_norway::yaml_parser_delete(parser);
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `text` nests deeper than `nesting`, whatever its tokens.
    fn too_deep(text: &str, nesting: usize) -> bool {
        let limits = Limits {
            nesting,
            tokens: usize::MAX,
        };
        match check(text, limits) {
            Ok(()) => false,
            Err(Unbounded::TooDeep(_)) => true,
            Err(other) => panic!("{text:?}: {other}"),
        }
    }

    #[test]
    fn block_and_flow_collections_count_and_look_alikes_do_not() {
        let cases = [
            // (name, text, nesting limit, too deep)
            (
                "flat pod, two block mappings",
                "kind: Pod\nmetadata:\n  name: a\n",
                2,
                false,
            ),
            (
                "flat pod over a limit of one",
                "kind: Pod\nmetadata:\n  name: a\n",
                1,
                true,
            ),
            (
                "flow in a block mapping",
                "metadata: {name: a, uid: b}\n",
                2,
                false,
            ),
            (
                "two flow levels in a block mapping",
                "a: [{b: 1}]\n",
                3,
                false,
            ),
            (
                "three flow levels in a block mapping",
                "a: [{b: [1]}]\n",
                3,
                true,
            ),
            (
                "flow siblings do not add up",
                "a: [1]\nb: [2]\nc: {d: [3]}\n",
                3,
                false,
            ),
            ("dashes on one line", "- - - x\n", 3, false),
            ("dashes on one line over the limit", "- - - - x\n", 3, true),
            (
                "dashes of a block sequence, one level",
                "- a\n- b\n- c\n",
                1,
                false,
            ),
            (
                "indented mappings",
                "a:\n  b:\n    c:\n      d: 1\n",
                4,
                false,
            ),
            (
                "indented mappings over the limit",
                "a:\n  b:\n    c:\n      d: 1\n",
                3,
                true,
            ),
            (
                "indentation returning closes levels",
                "a:\n  b: 1\nc:\n  d: 1\n",
                2,
                false,
            ),
            ("mixed block and flow", "- a: [{b: 1}]\n", 4, false),
            (
                "mixed block and flow over the limit",
                "- - a: [{b: 1}]\n",
                4,
                true,
            ),
            (
                "brackets in quoted strings",
                "a: \"[[[[\"\nb: '{{{{'\n",
                1,
                false,
            ),
            ("brackets in a plain scalar", "a: x[[[[y\n", 1, false),
            (
                "brackets and dashes in a comment",
                "a: 1 # [[[[ - - - -\n",
                1,
                false,
            ),
            ("dashes in a quoted scalar", "a: \"- - - -\"\n", 1, false),
            (
                "dashes in a block scalar",
                "a: |\n  - - - -\n  - - - -\n",
                1,
                false,
            ),
            ("json", r#"{"a": [[[1]]]}"#, 3, true),
            (
                "a syntax error is left to the parser",
                "a: [unclosed\n",
                5,
                false,
            ),
        ];
        for (name, text, limit, want) in cases {
            assert_eq!(too_deep(text, limit), want, "{name}");
        }
    }

    #[test]
    fn tokens_and_aliases_are_bounded_and_anchors_alone_pass() {
        let small = Limits {
            nesting: 8,
            tokens: 16,
        };
        let cases = [
            // (name, text, verdict)
            ("a few tokens", "a: [1, 2]\n", Ok(())),
            (
                "more tokens than the limit",
                "a: [1, 2, 3, 4, 5, 6, 7, 8]\n",
                Err(Unbounded::TooManyTokens(16)),
            ),
            ("an anchor without alias", "a: &x [1]\n", Ok(())),
            ("an alias", "a: &x [1]\nb: *x\n", Err(Unbounded::Alias(2))),
            ("a star in a quoted scalar", "a: \"*x\"\n", Ok(())),
            ("a star inside a plain scalar", "a: b*x\n", Ok(())),
            ("a star in a comment", "a: 1 # *x\n", Ok(())),
        ];
        for (name, text, want) in cases {
            assert_eq!(check(text, small), want, "{name}");
        }
    }

    #[test]
    fn a_pod_manifest_is_well_within_the_limits() {
        let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  labels:\n    app: a\n\
                   spec:\n  containers:\n  - name: c\n    resources:\n      limits:\n        \
                   memory: 1Gi\n    env:\n    - name: X\n      valueFrom:\n        \
                   fieldRef:\n          fieldPath: status.podIP\n";
        assert_eq!(check(pod, LIMITS), Ok(()));
        assert!(!too_deep(pod, 6));
        assert!(too_deep(pod, 5));
    }

    #[test]
    fn costly_documents_are_refused_quickly() {
        let cases = [
            (
                "flow",
                "[".repeat(1 << 20),
                Unbounded::TooDeep(LIMITS.nesting),
            ),
            (
                "dashes on one line",
                "- ".repeat(1 << 19),
                Unbounded::TooDeep(LIMITS.nesting),
            ),
            (
                "indentation",
                (0..4096)
                    .map(|i| format!("{}a:\n", " ".repeat(i)))
                    .collect(),
                Unbounded::TooDeep(LIMITS.nesting),
            ),
            (
                "a flat list",
                format!("[{}1]", "1,".repeat(500_000)),
                Unbounded::TooManyTokens(LIMITS.tokens),
            ),
            (
                "aliases",
                format!("a: &a [1, 2]\nb: [{}*a]\n", "*a, ".repeat(20_000)),
                Unbounded::Alias(2),
            ),
        ];
        for (name, text, want) in cases {
            assert_eq!(check(&text, LIMITS), Err(want), "{name}");
        }
    }
}
