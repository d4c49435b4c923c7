//! The layer order of the crate's doc (`lib.rs`), checked on the source: every
//! `crate::<module>` path in a file names a module of its own layer or of a lower one,
//! and no capability names another. (`hack/import-graph.py` checks that the module graph
//! has no cycle; this test checks its direction.)
use std::path::Path;

/// The layer of a top-level module, lowest first.
fn layer(module: &str) -> Option<u8> {
    match module {
        "names" | "object" | "revision_message" | "pod_image_ready" | "duration_flag"
        | "metrics" | "telemetry" | "runtime" | "sync_gate" | "leader" | "testkit" => Some(0),
        "watch" | "apply" => Some(1),
        "daemonset" | "gates" | "agent" => Some(2),
        "manager" | "cli" => Some(3),
        _ => None,
    }
}

/// The top-level module a file under `src/` belongs to (`None` for `lib.rs`, `main.rs`,
/// and this test, whose examples are not imports).
fn module_of(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main" | "layers")).then(|| name.to_string())
}

/// The top-level modules a file's code names as `crate::<module>`, or inside a group
/// `crate::{<module>::X, <module>::{..}}` over any number of lines (comments left out).
fn named_modules(source: &str) -> Vec<String> {
    let code: Vec<&str> = source
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect();
    let code = code.join("\n");
    code.match_indices("crate::")
        .flat_map(|(at, prefix)| {
            let rest = &code[at + prefix.len()..];
            match rest.strip_prefix('{') {
                Some(group) => group_heads(group),
                None => leading_name(rest).into_iter().collect(),
            }
        })
        .collect()
}

/// The first name of every path in a `use` group, given the text after its `{`:
/// `a::X, b::{c, d}, e}` gives a, b, e (nested groups are inside their path).
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0_usize;
    let mut item_starts = true;
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => item_starts = true,
            c if c.is_whitespace() => {}
            _ if item_starts && depth == 0 => {
                heads.extend(leading_name(&group[at..]));
                item_starts = false;
            }
            _ => {}
        }
    }
    heads
}

/// The identifier at the start of `text`, if any.
fn leading_name(text: &str) -> Option<String> {
    let name: String = text
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable source folder") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `crate::<module>` path of the files (path under `src/`, source) that goes up a
/// layer or from one capability to another, as `file -> crate::module`, sorted.
fn imports_against_the_layers(files: &[(std::path::PathBuf, String)]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (relative, source) in files {
        let Some(from) = module_of(relative) else {
            continue;
        };
        let from_layer = layer(&from)
            .unwrap_or_else(|| panic!("{from} has no layer: add it to `layer` and lib.rs"));
        for to in named_modules(source) {
            let Some(to_layer) = layer(&to) else {
                continue; // a crate-relative path to something else, e.g. a macro
            };
            let capability_to_capability = from_layer == 2 && to_layer == 2 && from != to;
            if to_layer > from_layer || capability_to_capability {
                wrong.push(format!("{} -> crate::{to}", relative.display()));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    wrong
}

#[test]
fn every_import_goes_down_or_stays_in_its_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let files: Vec<_> = paths
        .iter()
        .map(|path| {
            let relative = path.strip_prefix(&src).unwrap().to_path_buf();
            (relative, std::fs::read_to_string(path).unwrap())
        })
        .collect();
    let wrong = imports_against_the_layers(&files);
    assert!(wrong.is_empty(), "imports against the layers: {wrong:#?}");
}

#[test]
fn a_grouped_upward_import_is_caught() {
    let file = |path: &str, source: &str| (std::path::PathBuf::from(path), source.to_string());
    let files = [
        file(
            "daemonset/x.rs",
            "use crate::{names::X, cli::{ControllerArgs, Cli}};",
        ),
        file(
            "watch/y.rs",
            "use crate::{\n    object::CachedPod,\n    gates::{\n        plan,\n    },\n};",
        ),
        file("gates/z.rs", "use crate::{apply, names::{A, B}, watch};"),
    ];
    assert_eq!(
        imports_against_the_layers(&files),
        ["daemonset/x.rs -> crate::cli", "watch/y.rs -> crate::gates"]
    );
}

#[test]
fn the_check_sees_paths_in_code_and_not_in_comments() {
    let source =
        "use crate::names::X;\n// crate::cli in a comment\nlet a = crate::watch::scoped(c);";
    assert_eq!(named_modules(source), ["names", "watch"]);
    let grouped = "use crate::{names::X, watch::{a, b::{c}}, self};\nuse crate::{\n    // crate::cli\n    cli,\n    object::{pod::P},\n};";
    assert_eq!(
        named_modules(grouped),
        ["names", "watch", "self", "cli", "object"]
    );
    assert_eq!(
        module_of(Path::new("gates/plan.rs")).as_deref(),
        Some("gates")
    );
    assert_eq!(module_of(Path::new("names.rs")).as_deref(), Some("names"));
    assert_eq!(module_of(Path::new("lib.rs")), None);
}
