//! Redis's glob patterns (`stringmatchlen`), for SCAN MATCH and CONFIG GET:
//! `*` any run, `?` any byte, `[abc]`, `[^abc]`, `[a-z]` classes, `\x` a
//! literal x. Matching is iterative (backtracking to the last `*` only), so
//! its time is at most |pattern| x |text| and it uses no stack per `*`.

/// Whether `text` matches `pattern`, byte for byte (case-sensitive).
pub fn matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where to resume after the last `*`: (pattern index after it, text index it absorbs up to).
    let mut star: Option<(usize, usize)> = None;
    loop {
        if p < pattern.len() && pattern[p] == b'*' {
            while p < pattern.len() && pattern[p] == b'*' {
                p += 1;
            }
            star = Some((p, t));
            continue;
        }
        if t == text.len() {
            break;
        }
        if p < pattern.len() {
            let (ok, next) = token(pattern, p, text[t]);
            if ok {
                p = next;
                t += 1;
                continue;
            }
        }
        match star {
            Some((sp, st)) if st < text.len() => {
                star = Some((sp, st + 1));
                p = sp;
                t = st + 1;
            }
            _ => return false,
        }
    }
    while p < pattern.len() && pattern[p] == b'*' {
        p += 1;
    }
    p == pattern.len()
}

/// Matches the one-byte token at `pattern[p]` (not `*`) against `c`:
/// whether it matched and the index after the token.
fn token(pattern: &[u8], p: usize, c: u8) -> (bool, usize) {
    let at = |i: usize| pattern.get(i).copied();
    match pattern[p] {
        b'?' => (true, p + 1),
        b'\\' if p + 1 < pattern.len() => (pattern[p + 1] == c, p + 2),
        b'[' => {
            let mut i = p + 1;
            let negate = at(i) == Some(b'^');
            if negate {
                i += 1;
            }
            let mut matched = false;
            loop {
                match at(i) {
                    Some(b'\\') if i + 1 < pattern.len() => {
                        i += 1;
                        matched |= pattern[i] == c;
                    }
                    Some(b']') => break,
                    // An unterminated class ends with the pattern.
                    None => {
                        i -= 1;
                        break;
                    }
                    Some(first) if i + 2 < pattern.len() && pattern[i + 1] == b'-' => {
                        let (lo, hi) = (first.min(pattern[i + 2]), first.max(pattern[i + 2]));
                        matched |= (lo..=hi).contains(&c);
                        i += 2;
                    }
                    Some(b) => matched |= b == c,
                }
                i += 1;
            }
            (matched != negate, i + 1)
        }
        b => (b == c, p + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs_match_like_redis() {
        let yes: &[(&str, &str)] = &[
            ("*", ""),
            ("*", "abc"),
            ("a*", "abc"),
            ("*c", "abc"),
            ("a*b*c", "aXbYc"),
            ("h?llo", "hello"),
            ("h[ae]llo", "hallo"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("h[b-a]llo", "hbllo"),
            ("h\\*llo", "h*llo"),
            ("key:*:x", "key:1:2:x"),
            ("[\\]]", "]"),
            ("a\\", "a\\"),
            ("[^", "z"),
        ];
        for (p, t) in yes {
            assert!(matches(p.as_bytes(), t.as_bytes()), "{p} should match {t}");
        }
        let no: &[(&str, &str)] = &[
            ("a*", "bac"),
            ("*c", "abd"),
            ("h?llo", "hllo"),
            ("h[^e]llo", "hello"),
            ("h[a-b]llo", "hcllo"),
            ("h\\*llo", "hello"),
            ("abc", "abcd"),
            ("[", "["),
            ("", "a"),
        ];
        for (p, t) in no {
            assert!(!matches(p.as_bytes(), t.as_bytes()), "{p} should not match {t}");
        }
    }

    #[test]
    fn many_stars_stay_fast() {
        let pattern = "*a".repeat(1000) + "b";
        let text = "a".repeat(4000);
        assert!(!matches(pattern.as_bytes(), text.as_bytes()));
    }
}
