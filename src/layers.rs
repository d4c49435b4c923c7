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

/// Test-only files: listed in docs/architecture.md only where a reader needs them.
fn is_test_file(name: &str) -> bool {
    matches!(name, "tests.rs" | "proptests.rs" | "state_machine.rs") || name.ends_with("_tests.rs")
}

/// The production files of `roots` (relative to the repository) that docs/architecture.md
/// does not name: a file counts as named when its name and its folder (`folder/`) are
/// in the document, a `mod.rs` when its folder is.
fn unnamed_in(doc: &str, repo: &Path, roots: &[&str]) -> Vec<String> {
    let mut missing = Vec::new();
    for root in roots {
        let mut paths = Vec::new();
        rust_files(&repo.join(root), &mut paths);
        for path in paths {
            let name = path.file_name().unwrap().to_str().unwrap();
            let folder = path
                .parent()
                .unwrap()
                .file_name()
                .unwrap()
                .to_str()
                .unwrap();
            if is_test_file(name) {
                continue;
            }
            let folder_named = folder == "src" || doc.contains(&format!("{folder}/"));
            let named = folder_named && (name == "mod.rs" || doc.contains(name));
            if !named {
                missing.push(path.strip_prefix(repo).unwrap().display().to_string());
            }
        }
    }
    missing.sort();
    missing
}

/// docs/architecture.md names every production file of the three crates, so the map of
/// the code cannot fall behind it.
#[test]
fn the_architecture_names_every_production_file() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = include_str!("../docs/architecture.md");
    let roots = ["src", "crates/alibaba-lb/src", "crates/lb-emulator/src"];
    let missing = unnamed_in(doc, repo, &roots);
    assert!(
        missing.is_empty(),
        "docs/architecture.md does not name: {missing:#?}"
    );
}

/// The layer order docs/architecture.md states is the one `layer` enforces: every
/// module the numbered list names (a level's continuation lines too) is of that level,
/// and no module with a layer is left out.
#[test]
fn the_architecture_states_the_layer_order_that_is_checked() {
    let doc = include_str!("../docs/architecture.md");
    let section = doc
        .split("Layer order")
        .nth(1)
        .expect("a Layer order section");
    let list = section.split("\n\n").nth(1).expect("the numbered list");
    let mut level = None;
    let mut listed = Vec::new();
    for line in list.lines() {
        if let Some((n, _)) = line.split_once(". ") {
            level = n.trim().parse::<u8>().ok().or(level);
        }
        for module in line.split('`').skip(1).step_by(2) {
            assert_eq!(
                layer(module),
                level,
                "{module} is listed in layer {level:?}"
            );
            listed.push(module.to_string());
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let Some(module) = module_of(path.strip_prefix(&src).unwrap()) else {
            continue;
        };
        assert!(
            listed.contains(&module),
            "{module} is not in the Layer order list"
        );
    }
}
