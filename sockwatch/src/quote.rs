//! Untrusted text as the text outputs write it. A socket path, a command name, a pod's name
//! come from whoever created them, and may hold a newline (a forged second line), an escape
//! sequence (a retitled terminal, a cleared screen) or bytes that are no UTF-8. As `ls
//! --quoting-style=shell-escape` and `ss` do, a string with none of those is written as it
//! is; any other in bash's `$'…'` form, which a shell reads back to the same bytes:
//!
//! - `\n` `\t` `\r` `\e` `\a` `\b` `\v` `\f` for those controls, `\\` and `\'` for the two
//!   characters that would otherwise end or bend the quoting (either one alone makes a string
//!   quoted, so that a name that looks like a quoted one is not taken for it);
//! - `\xHH` for any other control byte (below 0x20, 0x7f) and for a byte that is no UTF-8;
//! - `\uHHHH` for a C1 control (U+0080 to U+009F) and for the characters that reorder or
//!   break a line where a terminal or a viewer shows it: the bidirectional controls
//!   (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069) and the line and paragraph
//!   separators (U+2028, U+2029).
//!
//! What comes out holds none of those: no byte below 0x20, no 0x7f, no C1 control, so it
//! stays on its line and cannot drive the terminal. Pure, no allocation of its own, and
//! imports nothing of the agent: `text` and the `scan` table below it both write through it.
#![deny(clippy::string_slice, clippy::indexing_slicing)]
use std::fmt::{self, Display, Write as _};

/// `s` as the text outputs write it: as it is, or in `$'…'` form (see the module docs).
pub fn quote(s: &str) -> Quoted<'_> {
    Quoted(s.as_bytes())
}

/// As [`quote`], for bytes that may not be UTF-8 (a path as the kernel holds it): each byte
/// that is not part of a UTF-8 character is written `\xHH`.
pub fn quote_bytes(b: &[u8]) -> Quoted<'_> {
    Quoted(b)
}

/// A string that formats quoted; made by [`quote`] and [`quote_bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quoted<'a>(&'a [u8]);

impl Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(plain) = plain(self.0) {
            return f.write_str(plain);
        }
        f.write_str("$'")?;
        for chunk in self.0.utf8_chunks() {
            for c in chunk.valid().chars() {
                escaped(c, f)?;
            }
            for b in chunk.invalid() {
                write!(f, "\\x{b:02X}")?;
            }
        }
        f.write_char('\'')
    }
}

/// The bytes as they are, when they are UTF-8 with nothing to escape or quote.
fn plain(b: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(b).ok()?;
    let quoted = |c: char| c == '\\' || c == '\'' || escapes(c);
    (!s.chars().any(quoted)).then_some(s)
}

/// Is `c` written as an escape: a C0 or C1 control, DEL, or a character that reorders or
/// breaks a line?
fn escapes(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// One character inside `$'…'`.
fn escaped(c: char, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let named = match c {
        '\\' => "\\\\",
        '\'' => "\\'",
        '\n' => "\\n",
        '\t' => "\\t",
        '\r' => "\\r",
        '\x1b' => "\\e",
        '\x07' => "\\a",
        '\x08' => "\\b",
        '\x0b' => "\\v",
        '\x0c' => "\\f",
        c if c.is_ascii_control() => return write!(f, "\\x{:02X}", u32::from(c)),
        // Every other escaped character is in the Basic Multilingual Plane: four digits.
        c if escapes(c) => return write!(f, "\\u{:04X}", u32::from(c)),
        c => return f.write_char(c),
    };
    f.write_str(named)
}

/// What every quoted string is: no byte below 0x20, no DEL, no C1 control, nothing that
/// reorders or breaks a line. The tests and the fuzz targets hold whole output lines to it.
pub fn inert(s: &str) -> bool {
    s.bytes().all(|b| b >= 0x20 && b != 0x7f) && !s.chars().any(escapes)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn q(s: &str) -> String {
        quote(s).to_string()
    }

    #[test]
    fn a_plain_string_is_written_as_it_is() {
        for s in [
            "",
            "/run/multus/multus.sock",
            "multus-daemon",
            "kube-system",
            "with space and \"double\" quotes",
            "café/пример/例え.sock",
            "\u{FFFD}",
            "🦀",
        ] {
            assert_eq!(q(s), s);
        }
    }

    #[test]
    fn control_bytes_are_escaped_the_way_bash_reads_them_back() {
        let cases = [
            ("a\nb", r"$'a\nb'"),
            ("tab\there", r"$'tab\there'"),
            ("cr\r", r"$'cr\r'"),
            ("\x1b]0;title\x07", r"$'\e]0;title\a'"),
            ("\x1b[2J", r"$'\e[2J'"),
            ("nul\0", r"$'nul\x00'"),
            ("\x01\x1f\x7f", r"$'\x01\x1F\x7F'"),
            ("\x08\x0b\x0c", r"$'\b\v\f'"),
            ("c1\u{85}\u{9b}", r"$'c1\u0085\u009B'"),
            ("bidi\u{202E}kcod", r"$'bidi\u202Ekcod'"),
            ("line\u{2028}sep", r"$'line\u2028sep'"),
            ("café\n", "$'café\\n'"),
        ];
        for (s, want) in cases {
            assert_eq!(q(s), want, "{s:?}");
        }
    }

    #[test]
    fn a_backslash_or_a_single_quote_alone_makes_a_string_quoted() {
        assert_eq!(q(r"a\b"), r"$'a\\b'");
        assert_eq!(q("it's"), r"$'it\'s'");
        // A name that looks like a quoted one is not taken for it.
        assert_eq!(q(r"$'a\nb'"), r"$'$\'a\\nb\''");
    }

    #[test]
    fn bytes_that_are_no_utf8_are_written_in_hex() {
        assert_eq!(
            quote_bytes(b"/tmp/\xff.sock").to_string(),
            r"$'/tmp/\xFF.sock'"
        );
        assert_eq!(
            quote_bytes(b"\xc3\xa9\xc3").to_string(),
            r"$'é\xC3'",
            "a cut character"
        );
        assert_eq!(quote_bytes(b"plain").to_string(), "plain");
    }

    /// What bash's `$'…'` makes of a quoted string: the inverse, to check that nothing is lost.
    fn unquote(q: &str) -> Vec<u8> {
        let Some(body) = q.strip_prefix("$'").and_then(|b| b.strip_suffix('\'')) else {
            return q.as_bytes().to_vec();
        };
        let mut out = Vec::new();
        let mut chars = body.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                continue;
            }
            let hex = |chars: &mut std::str::Chars, n| {
                let digits: String = chars.take(n).collect();
                u32::from_str_radix(&digits, 16).expect("hex digits")
            };
            match chars.next().expect("an escape") {
                'n' => out.push(b'\n'),
                't' => out.push(b'\t'),
                'r' => out.push(b'\r'),
                'e' => out.push(0x1b),
                'a' => out.push(0x07),
                'b' => out.push(0x08),
                'v' => out.push(0x0b),
                'f' => out.push(0x0c),
                '\\' => out.push(b'\\'),
                '\'' => out.push(b'\''),
                'x' => out.push(u8::try_from(hex(&mut chars, 2)).expect("a byte")),
                'u' => {
                    let c = char::from_u32(hex(&mut chars, 4)).expect("a character");
                    let mut buf = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                other => panic!("no escape \\{other} in {q:?}"),
            }
        }
        out
    }

    proptest! {
        #[test]
        fn any_string_comes_out_inert_and_reads_back_the_same(s in any::<String>()) {
            let quoted = q(&s);
            prop_assert!(inert(&quoted), "{quoted:?}");
            prop_assert_eq!(unquote(&quoted), s.as_bytes());
        }

        #[test]
        fn any_bytes_come_out_inert_and_read_back_the_same(
            b in proptest::collection::vec(any::<u8>(), 0..64)
        ) {
            let quoted = quote_bytes(&b).to_string();
            prop_assert!(inert(&quoted), "{quoted:?}");
            prop_assert_eq!(unquote(&quoted), b);
        }

        #[test]
        fn control_heavy_strings_come_out_inert(s in "[\\x00-\\x1f\\x7f\\u{80}-\\u{9f}a\\\\'é\u{FFFD}\u{2028}\u{202E}]{0,32}") {
            let quoted = q(&s);
            prop_assert!(inert(&quoted), "{quoted:?}");
            prop_assert_eq!(unquote(&quoted), s.as_bytes());
        }
    }
}
