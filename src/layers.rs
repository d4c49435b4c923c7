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

/// The top-level modules a file's code names as `crate::<module>` (comments left out).
fn named_modules(source: &str) -> Vec<String> {
    source
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .flat_map(|line| {
            line.match_indices("crate::")
                .map(move |(at, _)| &line[at..])
        })
        .filter_map(|rest| {
            let name: String = rest["crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
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

#[test]
fn every_import_goes_down_or_stays_in_its_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let Some(from) = module_of(relative) else {
            continue;
        };
        let from_layer = layer(&from)
            .unwrap_or_else(|| panic!("{from} has no layer: add it to `layer` and lib.rs"));
        let source = std::fs::read_to_string(file).unwrap();
        for to in named_modules(&source) {
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
    assert!(wrong.is_empty(), "imports against the layers: {wrong:#?}");
}

#[test]
fn the_check_sees_paths_in_code_and_not_in_comments() {
    let source =
        "use crate::names::X;\n// crate::cli in a comment\nlet a = crate::watch::scoped(c);";
    assert_eq!(named_modules(source), ["names", "watch"]);
    assert_eq!(
        module_of(Path::new("gates/plan.rs")).as_deref(),
        Some("gates")
    );
    assert_eq!(module_of(Path::new("names.rs")).as_deref(), Some("names"));
    assert_eq!(module_of(Path::new("lib.rs")), None);
}
