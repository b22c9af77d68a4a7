//! A command's arguments as COMMAND DOCS describes them (name, type,
//! token, flags, nested arguments), read from the one-line syntax each
//! [`CommandSpec`](super::CommandSpec) carries, written in a notation close
//! to the usage lines of Redis's documentation:
//!
//! * `name` is an argument, of type `key` if it is called "key", else
//!   `string`; `name#type` gives another type (`integer`, `double`,
//!   `pattern`, `unix-time`, `key`);
//! * an upper-case word (`NX`, `LIB-NAME`), or one of punctuation only
//!   (`*`, `~`, `=`), is a token: alone, a `pure-token`; followed by an
//!   argument or group, that one's token;
//! * `[...]` is optional, `(...)` groups; alternatives inside either are
//!   separated by `|` (a `oneof`); several items in `[...]`, and any in
//!   `(...)`, make a `block`;
//!   `label=` before a group names it (else it takes its first item's name);
//! * `...` after an item means it may repeat.
//!
//! The syntax strings are the server's own (a unit test parses every one),
//! so a parse error is a bug in the table, reported as such.

/// One argument of a command, as COMMAND DOCS lists it.
#[derive(Debug, PartialEq, Eq)]
pub struct Arg {
    pub name: String,
    /// `key`, `string`, `integer`, `double`, `pattern`, `unix-time`,
    /// `pure-token`, `oneof` or `block`.
    pub kind: String,
    pub token: Option<String>,
    pub optional: bool,
    pub multiple: bool,
    /// The alternatives of a `oneof`, the parts of a `block`.
    pub args: Vec<Arg>,
}

/// The arguments `syntax` describes.
pub fn parse(syntax: &str) -> Result<Vec<Arg>, String> {
    let mut p = Parser { s: syntax.as_bytes(), i: 0 };
    let args = p.sequence()?;
    if p.i != p.s.len() {
        return Err(format!("unexpected '{}' at {} in {syntax:?}", p.s[p.i] as char, p.i));
    }
    Ok(args)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

/// Characters that end a word.
const SPECIAL: &[u8] = b" []()|";

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip_spaces(&mut self) {
        while self.peek() == Some(b' ') {
            self.i += 1;
        }
    }

    /// Items up to the end, a closing bracket or a `|`, with tokens merged
    /// into the item after them.
    fn sequence(&mut self) -> Result<Vec<Arg>, String> {
        let mut items: Vec<Arg> = Vec::new();
        // Whether the last item is a token written alone (not in a group).
        let mut bare_token = false;
        loop {
            self.skip_spaces();
            match self.peek() {
                None | Some(b']' | b')' | b'|') => break,
                _ => {}
            }
            let is_group = matches!(self.peek(), Some(b'[' | b'(')) || self.word_until(b'=', false).is_some();
            let item = self.item()?;
            let token_alone = !is_group && item.kind == "pure-token" && !item.multiple;
            match items.last_mut() {
                Some(prev) if bare_token && item.kind != "pure-token" => {
                    let token = prev.token.take();
                    *prev = Arg { token, ..item };
                    bare_token = false;
                }
                _ => {
                    items.push(item);
                    bare_token = token_alone;
                }
            }
        }
        Ok(items)
    }

    fn item(&mut self) -> Result<Arg, String> {
        let label = self.word_until(b'=', true);
        let mut arg = match self.peek() {
            Some(open @ (b'[' | b'(')) => {
                self.i += 1;
                let close = if open == b'[' { b']' } else { b')' };
                let mut alternatives = vec![self.sequence()?];
                while self.peek() == Some(b'|') {
                    self.i += 1;
                    alternatives.push(self.sequence()?);
                }
                if self.peek() != Some(close) {
                    return Err(format!("'{}' not closed at {}", open as char, self.i));
                }
                self.i += 1;
                let mut arg = if alternatives.len() > 1 {
                    let parts: Vec<Arg> = alternatives.into_iter().map(one).collect::<Result<_, _>>()?;
                    Arg { name: parts[0].name.clone(), kind: "oneof".into(), ..plain(parts) }
                } else if open == b'(' {
                    // A parenthesized group stays a block, even of one item.
                    let items = alternatives.pop().unwrap_or_default();
                    if items.is_empty() {
                        return Err("an empty group".into());
                    }
                    Arg { name: items[0].name.clone(), ..plain(items) }
                } else {
                    one(alternatives.pop().unwrap_or_default())?
                };
                arg.optional |= open == b'[';
                arg
            }
            _ => self.atom()?,
        };
        if let Some(label) = label {
            arg.name = label;
        }
        if self.s[self.i..].starts_with(b"...") {
            self.i += 3;
            arg.multiple = true;
        }
        Ok(arg)
    }

    /// `label=` before a group, if there is one (consumed if `take`).
    fn word_until(&mut self, end: u8, take: bool) -> Option<String> {
        let rest = &self.s[self.i..];
        let len = rest.iter().position(|c| SPECIAL.contains(c) || *c == end)?;
        if rest.get(len) != Some(&end) || len == 0 {
            return None;
        }
        if take {
            self.i += len + 1;
        }
        Some(String::from_utf8_lossy(&rest[..len]).into_owned())
    }

    fn atom(&mut self) -> Result<Arg, String> {
        let start = self.i;
        while self.peek().is_some_and(|c| !SPECIAL.contains(&c)) && !self.s[self.i..].starts_with(b"...") {
            self.i += 1;
        }
        let word = std::str::from_utf8(&self.s[start..self.i]).map_err(|e| e.to_string())?;
        if word.is_empty() {
            return Err(format!("an empty item at {start}"));
        }
        let is_token = (word.bytes().any(|c| c.is_ascii_uppercase())
            && word.bytes().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'-'))
            || word.bytes().all(|c| c.is_ascii_punctuation() && c != b'#');
        if is_token {
            return Ok(Arg {
                name: word.to_ascii_lowercase(),
                kind: "pure-token".into(),
                token: Some(word.into()),
                ..plain(Vec::new())
            });
        }
        let (name, kind) = match word.split_once('#') {
            Some((name, kind)) => (name, kind),
            None if word == "key" => (word, "key"),
            None => (word, "string"),
        };
        Ok(Arg { name: name.into(), kind: kind.into(), ..plain(Vec::new()) })
    }
}

/// An argument with `args` inside and nothing else set.
fn plain(args: Vec<Arg>) -> Arg {
    Arg { name: String::new(), kind: "block".into(), token: None, optional: false, multiple: false, args }
}

/// A group's items as one argument: the item itself, or a block of them.
fn one(mut items: Vec<Arg>) -> Result<Arg, String> {
    match items.len() {
        0 => Err("an empty group".into()),
        1 => Ok(items.pop().unwrap_or_else(|| plain(Vec::new()))),
        _ => Ok(Arg { name: items[0].name.clone(), ..plain(items) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(args: &[Arg]) -> Vec<(&str, &str, Option<&str>, bool, bool)> {
        args.iter().map(|a| (a.name.as_str(), a.kind.as_str(), a.token.as_deref(), a.optional, a.multiple)).collect()
    }

    #[test]
    fn parse_reads_tokens_groups_and_repeats() {
        let set = parse("key value condition=[NX|XX] [GET] [EX seconds#integer|KEEPTTL]").unwrap();
        assert_eq!(
            names(&set),
            vec![
                ("key", "key", None, false, false),
                ("value", "string", None, false, false),
                ("condition", "oneof", None, true, false),
                ("get", "pure-token", Some("GET"), true, false),
                ("seconds", "oneof", None, true, false),
            ]
        );
        assert_eq!(
            names(&set[2].args),
            vec![("nx", "pure-token", Some("NX"), false, false), ("xx", "pure-token", Some("XX"), false, false)]
        );
        assert_eq!(names(&set[4].args)[0], ("seconds", "integer", Some("EX"), false, false));
        let mset = parse("data=(key value)...").unwrap();
        assert_eq!(names(&mset), vec![("data", "block", None, false, true)]);
        let hello = parse("[AUTH (username password)]").unwrap();
        assert_eq!(names(&hello), vec![("username", "block", Some("AUTH"), true, false)]);
        let list = parse("[TYPE (NORMAL|PUBSUB)] [ID client-id#integer...]").unwrap();
        assert_eq!(list[0].token.as_deref(), Some("TYPE"));
        assert_eq!(names(&list[1..]), vec![("client-id", "integer", Some("ID"), true, true)]);
        assert_eq!(names(&parse("(parameter)...").unwrap()), vec![("parameter", "block", None, false, true)]);
        let xadd = parse("key [operator=(=|~)] id_or_auto=(*|id)").unwrap();
        assert_eq!(names(&xadd[1].args)[1], ("~", "pure-token", Some("~"), false, false));
        assert_eq!(names(&xadd[2].args)[0], ("*", "pure-token", Some("*"), false, false));
    }

    #[test]
    fn parse_reports_unbalanced_syntax() {
        assert!(parse("[NX|XX").is_err());
        assert!(parse("key)").is_err());
        assert!(parse("()").is_err());
    }

    #[test]
    fn every_command_syntax_parses() {
        fn check(spec: &super::super::CommandSpec) {
            assert!(parse(spec.syntax).is_ok(), "{}: {:?}", spec.name, parse(spec.syntax));
            spec.subcommands.iter().for_each(check);
        }
        super::super::COMMANDS.iter().for_each(|e| check(e.spec));
    }
}
