//! Function patterns: `[MODULE:]GLOB`.

use crate::{Error, Result};

/// The name weft gives the vDSO's module: `linux-vdso.so.1`, as `ldd`
/// and the dynamic linker call it.
pub const VDSO_NAME: &str = "linux-vdso.so.1";

/// A function pattern: an optional module glob and a function glob.
///
/// `work`, `str*`, `libc.so.6:malloc`, `*:free`, `libc:malloc` (a module
/// glob also matches the file name cut before `.so`). A function glob is
/// matched against the symbol name and its demangled form; an unqualified
/// pattern applies to every module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    /// Module glob, if qualified.
    pub module: Option<String>,
    /// Function glob.
    pub function: String,
    /// Instruction offset inside the function (`FUNCTION+OFFSET`).
    pub offset: Option<u64>,
}

impl Pattern {
    /// Parses `[MODULE:]FUNCTION[+OFFSET]`. C++ names with `::` stay whole.
    pub fn parse(text: &str) -> Result<Pattern> {
        let bad = |why| Error::BadPattern(text.to_string(), why);
        if text.trim().is_empty() {
            return Err(bad("empty pattern"));
        }
        // A module separator is a single ':' not part of '::'.
        let bytes = text.as_bytes();
        let mut split = None;
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b':' {
                if i + 1 < bytes.len() && bytes[i + 1] == b':' {
                    i += 2;
                    continue;
                }
                split = Some(i);
                break;
            }
            i += 1;
        }
        let (module, rest) = match split {
            Some(i) => (Some(text[..i].to_string()), &text[i + 1..]),
            None => (None, text),
        };
        if module.as_deref() == Some("") {
            return Err(bad("empty module before ':'"));
        }
        let (function, offset) = match rest.rsplit_once('+') {
            Some((f, off))
                if !f.is_empty()
                    && !off.is_empty()
                    && off.chars().all(|c| c.is_ascii_alphanumeric()) =>
            {
                let value =
                    if let Some(hex) = off.strip_prefix("0x").or_else(|| off.strip_prefix("0X")) {
                        u64::from_str_radix(hex, 16)
                    } else {
                        off.parse()
                    };
                (
                    f.to_string(),
                    Some(value.map_err(|_| bad("offset is not a number (use decimal or 0x-hex)"))?),
                )
            }
            _ => (rest.to_string(), None),
        };
        if function.is_empty() {
            return Err(bad("empty function name"));
        }
        Ok(Pattern {
            module,
            function,
            offset,
        })
    }

    /// Whether the pattern applies to a module with this file name. The
    /// vDSO ([`VDSO_NAME`]) is the kernel's code: only a pattern that
    /// names it without a wildcard (`linux-vdso.so.1:*`, `linux-vdso:*`)
    /// applies to it.
    pub fn matches_module(&self, file_name: &str) -> bool {
        if file_name == VDSO_NAME {
            return self.names_vdso();
        }
        match &self.module {
            None => true,
            Some(glob) => {
                glob_match(glob, file_name)
                    || file_name
                        .split_once(".so")
                        .is_some_and(|(stem, _)| glob_match(glob, stem))
                    // A soname names a file with more version digits:
                    // libsqlite3.so.0 -> libsqlite3.so.0.8.6.
                    || file_name.strip_prefix(glob.as_str()).is_some_and(|rest| {
                        rest.starts_with('.') && rest[1..].bytes().all(|b| b.is_ascii_digit() || b == b'.')
                    })
            }
        }
    }

    /// Whether the pattern's module is the vDSO's name (or its stem),
    /// without a wildcard.
    pub fn names_vdso(&self) -> bool {
        self.module
            .as_deref()
            .is_some_and(|m| m == VDSO_NAME || m == "linux-vdso")
    }

    /// Whether the pattern's function glob matches a name (raw or demangled).
    pub fn matches_function(&self, name: &str, demangled: Option<&str>) -> bool {
        glob_match(&self.function, name)
            || demangled.is_some_and(|d| {
                glob_match(&self.function, d)
                    || d.split_once('(')
                        .is_some_and(|(base, _)| glob_match(&self.function, base))
            })
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(m) = &self.module {
            write!(f, "{m}:")?;
        }
        write!(f, "{}", self.function)?;
        if let Some(o) = self.offset {
            write!(f, "+{o:#x}")?;
        }
        Ok(())
    }
}

/// Shell-style glob: `*`, `?` and `[...]` classes (with `!` or `^` negation).
///
/// Called for every function of every module against every pattern (a
/// C library's thousands, at each `exec` of a workload), so it allocates
/// nothing for the common cases: a lone `*`, a plain name, or ASCII text
/// (matched byte by byte; other text by characters).
pub fn glob_match(glob: &str, text: &str) -> bool {
    if glob == "*" {
        return true;
    }
    if !glob.contains(['*', '?', '[']) {
        return glob == text;
    }
    if glob.is_ascii() && text.is_ascii() {
        return glob_units(glob.as_bytes(), text.as_bytes());
    }
    let g: Vec<char> = glob.chars().collect();
    let t: Vec<char> = text.chars().collect();
    glob_units(&g, &t)
}

/// [`glob_match`] over bytes or characters.
fn glob_units<C: Copy + Ord + From<u8>>(g: &[C], t: &[C]) -> bool {
    let unit = C::from;
    let (mut gi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if gi < g.len() {
            let c = g[gi];
            if c == unit(b'*') {
                star = Some((gi, ti));
                gi += 1;
                continue;
            }
            if c == unit(b'?') {
                gi += 1;
                ti += 1;
                continue;
            }
            if c == unit(b'[') {
                if let Some((matched, next)) = match_class(g, gi, t[ti]) {
                    if matched {
                        gi = next;
                        ti += 1;
                        continue;
                    }
                } else if t[ti] == unit(b'[') {
                    gi += 1;
                    ti += 1;
                    continue;
                }
            } else if c == t[ti] {
                gi += 1;
                ti += 1;
                continue;
            }
        }
        match star {
            Some((sg, st)) => {
                gi = sg + 1;
                ti = st + 1;
                star = Some((sg, st + 1));
            }
            None => return false,
        }
    }
    while gi < g.len() && g[gi] == unit(b'*') {
        gi += 1;
    }
    gi == g.len()
}

/// Matches `c` against the class starting at `g[start] == '['`; returns
/// (matched, index after the class), or None if the class is unterminated.
fn match_class<C: Copy + Ord + From<u8>>(g: &[C], start: usize, c: C) -> Option<(bool, usize)> {
    let unit = C::from;
    let mut i = start + 1;
    let negate = i < g.len() && (g[i] == unit(b'!') || g[i] == unit(b'^'));
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < g.len() && (first || g[i] != unit(b']')) {
        first = false;
        if i + 2 < g.len() && g[i + 1] == unit(b'-') && g[i + 2] != unit(b']') {
            if g[i] <= c && c <= g[i + 2] {
                matched = true;
            }
            i += 3;
        } else {
            if g[i] == c {
                matched = true;
            }
            i += 1;
        }
    }
    if i >= g.len() {
        return None;
    }
    Some((matched != negate, i + 1))
}

/// Up to `max` names close to `wanted`: same letters in another case, a
/// shared substring, or a small edit distance. For "did you mean" messages.
pub fn near_misses<'a>(
    wanted: &str,
    names: impl IntoIterator<Item = &'a str>,
    max: usize,
) -> Vec<String> {
    let core: String = wanted
        .chars()
        .filter(|c| !matches!(c, '*' | '?' | '[' | ']'))
        .collect();
    let core_lower = core.to_lowercase();
    if core_lower.is_empty() {
        return vec![];
    }
    let mut scored: Vec<(usize, &str)> = names
        .into_iter()
        .filter_map(|n| {
            let lower = n.to_lowercase();
            let d = edit_distance(&core_lower, &lower);
            let limit = if core_lower.len() <= 3 {
                1
            } else {
                (core_lower.len() / 3).max(2)
            };
            if d <= limit {
                Some((d, n))
            } else if core_lower.len() >= 3 && lower.contains(&core_lower) {
                Some((limit + 1 + lower.len() - core_lower.len(), n))
            } else {
                None
            }
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored
        .into_iter()
        .take(max)
        .map(|(_, n)| n.to_string())
        .collect()
}

/// Up to `max` module names close to `wanted`, as [`near_misses`] finds
/// them, a name also matched by its stem before `.so` (`libsqlit3` finds
/// `libsqlite3.so.0.8.6`).
pub fn near_module_names<'a>(
    wanted: &str,
    names: impl IntoIterator<Item = &'a str>,
    max: usize,
) -> Vec<String> {
    let names: Vec<&str> = names.into_iter().collect();
    let stem = |n: &'a str| n.split_once(".so").map_or(n, |(s, _)| s);
    let mut near = near_misses(wanted, names.iter().copied(), max);
    for s in near_misses(wanted, names.iter().map(|&n| stem(n)), max) {
        near.extend(
            names
                .iter()
                .filter(|&&n| stem(n) == s)
                .map(|n| n.to_string()),
        );
    }
    let mut seen = std::collections::HashSet::new();
    near.retain(|n| seen.insert(n.clone()));
    near.truncate(max);
    near
}

/// Optimal string alignment distance (insertions, deletions, substitutions
/// and transpositions of neighbours: "wrok" is one edit from "work"), or
/// `usize::MAX` when the lengths differ by more than 8.
fn edit_distance(a: &str, b: &str) -> usize {
    if a.chars().count().abs_diff(b.chars().count()) > 8 {
        return usize::MAX;
    }
    strsim::osa_distance(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_library_finds_its_full_name() {
        let loaded = [
            "ld-linux-x86-64.so.2",
            "libc.so.6",
            "libsqlite3.so.0.8.6",
            "sqlite3",
        ];
        assert_eq!(
            near_module_names("libsqlit3", loaded, 3),
            ["libsqlite3.so.0.8.6"]
        );
        assert_eq!(near_module_names("libc.so.7", loaded, 3), ["libc.so.6"]);
        assert!(near_module_names("nosuchlib", loaded, 3).is_empty());
    }

    #[test]
    fn only_a_pattern_that_names_the_vdso_matches_it() {
        for glob in ["*:*", "clock_gettime", "linux*:*", "*vdso*:*"] {
            let p = Pattern::parse(glob).unwrap();
            assert!(!p.matches_module(VDSO_NAME), "{glob}");
        }
        for named in ["linux-vdso.so.1:*", "linux-vdso:__vdso_time"] {
            let p = Pattern::parse(named).unwrap();
            assert!(p.matches_module(VDSO_NAME), "{named}");
            assert!(!p.matches_module("libc.so.6"), "{named}");
        }
    }

    #[test]
    fn parses_forms() {
        let p = Pattern::parse("work").unwrap();
        assert_eq!(
            (p.module, p.function.as_str(), p.offset),
            (None, "work", None)
        );
        let p = Pattern::parse("libc.so.6:malloc").unwrap();
        assert_eq!(p.module.as_deref(), Some("libc.so.6"));
        let p = Pattern::parse("*:free").unwrap();
        assert!(p.matches_module("libfoo.so") && p.matches_function("free", None));
        let p = Pattern::parse("work+0x1c").unwrap();
        assert_eq!(p.offset, Some(0x1c));
        let p = Pattern::parse("work+12").unwrap();
        assert_eq!(p.offset, Some(12));
        let p = Pattern::parse("ns::Klass::run").unwrap();
        assert_eq!(p.module, None);
        assert!(p.matches_function("_ZN2ns5Klass3runEv", Some("ns::Klass::run()")));
        assert!(Pattern::parse("libc.so.6:").is_err());
        assert!(Pattern::parse(":x").is_err());
        assert!(Pattern::parse("work+zz").is_err());
    }

    #[test]
    fn module_stem() {
        let p = Pattern::parse("libc:malloc").unwrap();
        assert!(p.matches_module("libc.so.6"));
        assert!(!p.matches_module("libcrypt.so.1"));
        let p = Pattern::parse("libsqlite3.so.0:sqlite3_step").unwrap();
        assert!(p.matches_module("libsqlite3.so.0.8.6"));
        assert!(!p.matches_module("libsqlite3.so.0x"));
    }

    #[test]
    fn globs() {
        assert!(glob_match("str*", "strlen"));
        assert!(!glob_match("str*", "memcpy"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("f[0-9]x", "f7x"));
        assert!(!glob_match("f[!0-9]x", "f7x"));
        assert!(glob_match("*free", "cfree"));
        assert!(glob_match("*a*b*", "xxaxxbxx"));
        assert!(!glob_match("*a*b", "xxaxxbxx"));
        // Plain names, and text beyond ASCII (matched by characters).
        assert!(glob_match("malloc", "malloc"));
        assert!(!glob_match("malloc", "malloc2"));
        assert!(glob_match("caf?", "café"));
        assert!(glob_match("*é[a-z]", "xéz"));
        assert!(!glob_match("caf??", "café"));
    }

    proptest::proptest! {
        /// Byte by byte (ASCII, and the shortcuts for `*` and plain names)
        /// as character by character.
        #[test]
        fn bytes_match_as_characters(
            glob in "[ab*?!^\\[\\]-]{0,8}",
            text in "[ab\\[\\]-]{0,8}",
        ) {
            let chars = |s: &str| s.chars().collect::<Vec<char>>();
            proptest::prop_assert_eq!(
                glob_match(&glob, &text),
                glob_units(&chars(&glob), &chars(&text))
            );
        }
    }

    /// The optimal-string-alignment distance weft computed by hand before
    /// using strsim's.
    fn reference_osa(a: &str, b: &str) -> usize {
        let a: Vec<char> = a.chars().collect();
        let b: Vec<char> = b.chars().collect();
        if a.len().abs_diff(b.len()) > 8 {
            return usize::MAX;
        }
        let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
        for (i, row) in d.iter_mut().enumerate() {
            row[0] = i;
        }
        for (j, cell) in d[0].iter_mut().enumerate() {
            *cell = j;
        }
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                let cost = usize::from(a[i - 1] != b[j - 1]);
                d[i][j] = (d[i - 1][j] + 1)
                    .min(d[i][j - 1] + 1)
                    .min(d[i - 1][j - 1] + cost);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
                }
            }
        }
        d[a.len()][b.len()]
    }

    #[test]
    fn edit_distance_is_the_hand_written_one() {
        let words = [
            "",
            "work",
            "wrok",
            "worker_main",
            "main",
            "ca",
            "abc",
            "acb",
            "malloc",
            "mallco",
            "memcpy",
            "émigré",
            "emigre",
            "pthread_create",
            "pthread_mutex_lock",
            "str",
            "strlen",
        ];
        for a in words {
            for b in words {
                assert_eq!(edit_distance(a, b), reference_osa(a, b), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn misses() {
        let names = ["work", "worker_main", "main", "spin"];
        let m = near_misses("wrok", names, 3);
        assert_eq!(m.first().map(String::as_str), Some("work"));
        assert!(near_misses("zzzzzz", names, 3).is_empty());
    }
}
