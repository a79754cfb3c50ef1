//! The test that keeps the module graph free of loops: between the top-level modules of the
//! crate, and between sibling submodules inside each directory (module A uses `crate::b` or
//! `super::b` and b uses A). Test code (`tests.rs` files, `#[cfg(test)]` items and the modules
//! they declare) and comments are left out: only what the binary is built from counts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path from the crate root, e.g. `["cli", "plan"]`.
type ModPath = Vec<String>;

/// Every `.rs` file under `dir`, with its module path.
fn files(dir: &Path, module: &ModPath, out: &mut Vec<(PathBuf, ModPath)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        let stem = p.file_stem().expect("stem").to_string_lossy().to_string();
        if p.is_dir() {
            let mut m = module.clone();
            m.push(stem);
            files(&p, &m, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let mut m = module.clone();
            if !(module.is_empty() && (stem == "lib" || stem == "main")) && stem != "mod" {
                m.push(stem);
            }
            out.push((p, m));
        }
    }
}

/// The code without comments, and with each string and char literal emptied (so braces and
/// `crate::` inside them do not count).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &src[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if src[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if src[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = i + 2 + hashes;
            i = body
                + src[body..]
                    .find(&close)
                    .map_or(src.len() - body, |e| e + close.len());
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && char_literal_len(rest).is_some() {
            i += char_literal_len(rest).unwrap_or(1);
            out.push_str("' '");
        } else {
            let c = rest.chars().next().expect("a char");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `Some(number of #)` when `s` starts a raw string (`r"`, `r#"`, `br"`...).
fn raw_string_start(s: &str) -> Option<usize> {
    let s = s.strip_prefix('b').unwrap_or(s);
    let s = s.strip_prefix('r')?;
    let hashes = s.len() - s.trim_start_matches('#').len();
    s[hashes..].starts_with('"').then_some(hashes)
}

/// The length of the char literal `s` starts with, if it starts one (and not a lifetime).
fn char_literal_len(s: &str) -> Option<usize> {
    let mut it = s.char_indices().skip(1);
    let (_, c) = it.next()?;
    if c == '\\' {
        let end = s[2..].find('\'')?;
        return Some(end + 3);
    }
    let (j, close) = it.next()?;
    (close == '\'').then_some(j + 1)
}

/// The index just past the item that starts at `from`: through its `;` or its balanced `{}`,
/// whichever comes first at depth 0.
fn item_end(code: &str, from: usize) -> usize {
    let b = code.as_bytes();
    let mut depth = 0usize;
    let mut i = from;
    while i < b.len() {
        match b[i] {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth = depth.saturating_sub(1),
            b';' if depth == 0 => return i + 1,
            b'{' if depth == 0 => {
                let mut braces = 0usize;
                while i < b.len() {
                    match b[i] {
                        b'{' => braces += 1,
                        b'}' => {
                            braces -= 1;
                            if braces == 0 {
                                return i + 1;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                return b.len();
            }
            _ => {}
        }
        i += 1;
    }
    b.len()
}

/// `code` without its `#[cfg(test)]` items, and the names of the modules such items declare
/// (`#[cfg(test)] mod tests;`).
fn strip_test_items(code: &str) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut test_mods = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let end = item_end(after, 0);
        let item = after[..end].trim();
        let words: Vec<&str> = item.split_whitespace().collect();
        if let Some(pos) = words.iter().position(|w| *w == "mod")
            && let Some(name) = words.get(pos + 1)
            && item.ends_with(';')
        {
            test_mods.push(name.trim_end_matches(';').to_string());
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    (out, test_mods)
}

/// Every path in `code` that starts with `crate::` or `super::`, with `{}` groups expanded,
/// resolved to segments from the crate root (items and modules alike).
fn paths(code: &str, module: &ModPath) -> Vec<ModPath> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts_word = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let after_colons = i >= 2 && &code[i - 2..i] == "::";
        let rest = &code[i..];
        if starts_word
            && !after_colons
            && (rest.starts_with("crate::") || rest.starts_with("super::"))
        {
            let (tree, used) = path_tree(rest);
            for p in tree {
                if let Some(abs) = resolve(&p, module) {
                    found.push(abs);
                }
            }
            i += used.max(1);
        } else {
            i += 1;
        }
    }
    found
}

/// The paths of a `use` tree (or a plain path) at the start of `s`, and the bytes it spans.
fn path_tree(s: &str) -> (Vec<Vec<String>>, usize) {
    let b = s.as_bytes();
    let mut prefix = Vec::new();
    let mut i = 0;
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < b.len() && b[i] == b'{' {
            let mut all = Vec::new();
            i += 1;
            loop {
                while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b',') {
                    i += 1;
                }
                if i >= b.len() || b[i] == b'}' {
                    i += 1;
                    break;
                }
                let (sub, used) = path_tree(&s[i..]);
                for p in sub {
                    let mut full = prefix.clone();
                    full.extend(p);
                    all.push(full);
                }
                i += used.max(1);
                // Skip `as name` and anything else up to the next `,` or `}`.
                while i < b.len() && b[i] != b',' && b[i] != b'}' {
                    i += 1;
                }
            }
            return (all, i);
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        if i == start {
            return (vec![prefix], i);
        }
        prefix.push(s[start..i].to_string());
        if s[i..].starts_with("::") {
            i += 2;
        } else {
            return (vec![prefix], i);
        }
    }
}

/// `p` (starting `crate` or `super`) from the crate root.
fn resolve(p: &[String], module: &ModPath) -> Option<ModPath> {
    let mut abs = module.clone();
    let mut segs = p.iter().peekable();
    if segs.peek().is_some_and(|s| *s == "crate") {
        abs.clear();
        segs.next();
    } else {
        while segs.peek().is_some_and(|s| *s == "super") {
            abs.pop()?;
            segs.next();
        }
    }
    abs.extend(segs.cloned());
    Some(abs)
}

/// The module a path names or lies in: its longest prefix that is a module.
fn target(p: &ModPath, modules: &BTreeSet<ModPath>) -> ModPath {
    (0..=p.len())
        .rev()
        .map(|n| p[..n].to_vec())
        .find(|m| modules.contains(m))
        .unwrap_or_default()
}

/// Edges between sibling modules, per parent: `parent → (from → {to})`.
type Graph = BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>>;

/// The module graph of the non-test code under `src`.
fn graph(src: &Path) -> Graph {
    let mut all = Vec::new();
    files(src, &Vec::new(), &mut all);
    let modules: BTreeSet<ModPath> = all.iter().map(|(_, m)| m.clone()).collect();
    let mut test_only: BTreeSet<ModPath> = BTreeSet::new();
    let mut code = Vec::new();
    for (path, module) in &all {
        let text = std::fs::read_to_string(path).expect("read a source file");
        let (text, test_mods) = strip_test_items(&code_only(&text));
        for name in test_mods {
            let mut m = module.clone();
            m.push(name);
            test_only.insert(m);
        }
        code.push((path, module, text));
    }
    let mut g = Graph::new();
    for (path, module, text) in code {
        let is_test = path.file_name().is_some_and(|f| f == "tests.rs")
            || test_only.iter().any(|t| module.starts_with(t));
        if is_test {
            continue;
        }
        for p in paths(&text, module) {
            let to = target(&p, &modules);
            let common = module.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common < module.len() && common < to.len() {
                g.entry(module[..common].to_vec())
                    .or_default()
                    .entry(module[common].clone())
                    .or_default()
                    .insert(to[common].clone());
            }
        }
    }
    g
}

/// Each loop in `g`, as `parent: a → b → a`, one per pair of modules that reach each other.
fn loops(g: &Graph) -> Vec<String> {
    let mut found = Vec::new();
    for (parent, edges) in g {
        let mut seen: BTreeSet<BTreeSet<String>> = BTreeSet::new();
        for (from, tos) in edges {
            for to in tos {
                if let Some(back) = route(edges, to, from) {
                    let members: BTreeSet<String> = back.iter().cloned().collect();
                    if seen.insert(members) {
                        let dir = if parent.is_empty() {
                            "crate".to_string()
                        } else {
                            parent.join("::")
                        };
                        found.push(format!("{dir}: {from} → {}", back.join(" → ")));
                    }
                }
            }
        }
    }
    found
}

/// A shortest route `from → ... → to`, its modules after `from`.
fn route(edges: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> Option<Vec<String>> {
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([from]);
    let mut visited = BTreeSet::from([from]);
    while let Some(at) = queue.pop_front() {
        if at == to {
            let mut back = vec![to.to_string()];
            let mut cur = to;
            while let Some(p) = prev.get(cur) {
                back.push((*p).to_string());
                cur = p;
            }
            back.reverse();
            return Some(back);
        }
        for next in edges.get(at).into_iter().flatten() {
            if visited.insert(next) {
                prev.insert(next, at);
                queue.push_back(next);
            }
        }
    }
    None
}

#[test]
fn no_module_loops() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = graph(&src);
    // A scan that saw nothing would pass: it must see the fold's use of the readiness core.
    let fold = g.get(&vec![]).and_then(|top| top.get("fold"));
    assert!(fold.is_some_and(|to| to.contains("readiness")), "{g:?}");
    let found = loops(&g);
    assert!(found.is_empty(), "module loops:\n{}", found.join("\n"));
}

#[test]
fn the_scan_sees_paths_groups_supers_and_skips_tests() {
    let module: ModPath = vec!["cli".into(), "plan".into()];
    let code = code_only(
        "use crate::{probe::Attempt, sink::{self, Datum}};\n// crate::record::X\n\
         let s = \"crate::state::x\"; super::cost::grouped(1);\n\
         #[cfg(test)]\nmod tests { use crate::report::X; }\n",
    );
    let (code, _) = strip_test_items(&code);
    let got: Vec<String> = paths(&code, &module).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        got,
        [
            "probe::Attempt",
            "sink::self",
            "sink::Datum",
            "cli::cost::grouped"
        ]
    );
    let mut g = Graph::new();
    let edges = g.entry(vec![]).or_default();
    edges.entry("a".into()).or_default().insert("b".into());
    edges.entry("b".into()).or_default().insert("c".into());
    edges.entry("c".into()).or_default().insert("a".into());
    assert_eq!(loops(&g), ["crate: a → b → c → a"]);
}
