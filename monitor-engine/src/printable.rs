//! Text from outside (pod names and namespaces, cgroup names) made safe for a line of output:
//! a control character such as a newline could otherwise end the line early and make what
//! follows read as a line of its own, a forged decision for instance.
use std::borrow::Cow;

/// `text` with every control character written as a Rust-style escape (`\n`, `\t`, `\u{1b}`)
/// and backslashes doubled, so the result is one line that maps back to the input; borrowed
/// when there is nothing to escape.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() || c == '\\') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        let cases = [
            ("plain name", "web-1", "web-1"),
            ("unicode letters", "café", "café"),
            (
                "newline forging a line",
                "x\nwould evict kube-system/etcd: forged",
                "x\\nwould evict kube-system/etcd: forged",
            ),
            ("carriage return and tab", "a\r\tb", "a\\r\\tb"),
            ("terminal escape", "a\u{1b}[2Jb", "a\\u{1b}[2Jb"),
            (
                "backslash doubled so escapes stay unambiguous",
                "a\\nb",
                "a\\\\nb",
            ),
            ("next line (C1 control)", "a\u{85}b", "a\\u{85}b"),
        ];
        for (name, input, want) in cases {
            let got = printable(input);
            assert_eq!(got, want, "{name}");
            assert!(!got.contains('\n') && !got.contains('\r'), "{name}");
        }
        assert!(matches!(printable("web-1"), Cow::Borrowed(_)));
    }
}
