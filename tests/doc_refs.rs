//! Every "§n" the code and docs cite points into the wire-format reference
//! that lives in this repository (`docs/mlx5-wire-format.md`): a section
//! heading `## n.` / `### n.m`, a golden example of section 9 (`§9`), or a
//! numbered fact of section 11 (`§11.k`). A citation of a section that does
//! not exist fails, naming the file and line.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const SPEC: &str = "docs/mlx5-wire-format.md";

/// The citable section numbers: "5", "5.8", and "11.k" for the facts.
fn sections(spec: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_11 = false;
    for line in spec.lines() {
        if let Some(h) = line.strip_prefix("## ").or_else(|| line.strip_prefix("### ")) {
            let num: String = h.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
            let num = num.trim_end_matches('.').to_string();
            in_11 = num == "11";
            if !num.is_empty() {
                out.insert(num);
            }
        } else if in_11 {
            let k: String = line.chars().take_while(char::is_ascii_digit).collect();
            if !k.is_empty() && line[k.len()..].starts_with(". ") {
                out.insert(format!("11.{k}"));
            }
        }
    }
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !matches!(name.as_str(), "target" | ".git" | "docs") && !name.starts_with('.') {
                walk(&p, out);
            }
        } else if matches!(
            p.extension().and_then(|x| x.to_str()),
            Some("rs" | "md" | "h" | "c" | "toml" | "snap")
        ) {
            out.push(p);
        }
    }
}

/// The "§…" citations in `text`: (line number, number cited).
fn citations(text: &str) -> Vec<(usize, String)> {
    let mut v = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for (at, _) in line.match_indices('§') {
            let rest = line[at + '§'.len_utf8()..].trim_start();
            let num: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
            let num = num.trim_end_matches('.').to_string();
            v.push((i + 1, num));
        }
    }
    v
}

#[test]
fn every_section_citation_resolves_in_docs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let spec = std::fs::read_to_string(root.join(SPEC)).expect("the wire-format reference is in docs/");
    let known = sections(&spec);
    assert!(known.contains("5.8") && known.contains("9") && known.contains("11.9"), "{known:?}");
    let mut files = Vec::new();
    walk(root, &mut files);
    let mut bad = Vec::new();
    let mut n = 0;
    for f in &files {
        if f.ends_with("tests/doc_refs.rs") {
            continue; // this file talks about citations
        }
        let Ok(text) = std::fs::read_to_string(f) else { continue };
        for (line, num) in citations(&text) {
            n += 1;
            if !known.contains(&num) {
                bad.push(format!("{}:{line}: §{num}", f.strip_prefix(root).unwrap().display()));
            }
        }
    }
    assert!(n > 100, "only {n} citations found: the scan is broken");
    assert!(bad.is_empty(), "citations of sections {SPEC} does not have:\n{}", bad.join("\n"));
}

#[test]
fn the_checker_catches_a_bad_citation() {
    let known = sections("## 5. CQ\n### 5.8 Compression\n## 11. Facts\n\n1. one\n2. two\n");
    assert_eq!(known, ["11", "11.1", "11.2", "5", "5.8"].iter().map(|s| s.to_string()).collect());
    let c = citations("see spec §5.8 and §11.2, not §5.9 or §n");
    let missing: Vec<_> = c.iter().filter(|(_, n)| !known.contains(n)).map(|(_, n)| n.as_str()).collect();
    assert_eq!(missing, vec!["5.9", ""]);
}
