//! The layering rules of `docs/ARCHITECTURE.md`, checked on the source: the domain and
//! the core import nothing above them, `config` nothing of the wiring, only node-type modules know node type IDs, and no
//! function takes so many arguments that clippy has to be told to allow it.

use std::path::{Path, PathBuf};

use crate::module_graph;

/// The library's source folder.
fn library() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/src")
}

/// Every Rust file under `folder`, with its text.
fn sources(folder: &Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    let mut pending = vec![folder.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).unwrap_or_else(|error| panic!("{}: {error}", folder.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                files.push((path, text));
            }
        }
    }
    assert!(!files.is_empty(), "no sources under {}", folder.display());
    files
}

#[test]
fn the_domain_and_the_core_import_nothing_above_them() {
    let above = [
        "crate::adapters",
        "crate::api",
        "crate::app",
        "crate::config",
        "crate::runtime",
        "crate::serve",
        "aws_sdk_",
        "aws_config",
        "aws_lambda_events",
        "lambda_http",
        "rusqlite",
        "http::",
        "hyper",
        "reqwest",
    ];
    for layer in ["domain", "core"] {
        for (path, text) in sources(&library().join(layer)) {
            for forbidden in above {
                assert!(!text.contains(forbidden), "{} names {forbidden}", path.display());
            }
        }
    }
    for (path, text) in sources(&library().join("core")) {
        assert!(!text.contains("crate::domain"), "{} names the domain", path.display());
    }
}

/// Every typed ID is declared in `domain/ids.rs`, the kernel under the contexts: a context
/// names another's things by ID without importing it.
#[test]
fn typed_ids_are_declared_in_one_module() {
    let ids = library().join("domain/ids.rs");
    let kernel = std::fs::read_to_string(&ids).unwrap();
    assert!(kernel.matches("crate::typed_id!(").count() >= 18, "the IDs are in {}", ids.display());
    for (path, text) in sources(&library().join("domain")) {
        if path == ids {
            continue;
        }
        assert!(!text.contains("typed_id!("), "{} declares a typed ID: declare it in domain/ids.rs", path.display());
    }
}

#[test]
fn settings_are_read_without_the_wiring_that_uses_them() {
    let config = std::fs::read_to_string(library().join("config.rs")).unwrap();
    for forbidden in ["crate::app", "crate::adapters", "crate::api", "crate::serve", "crate::runtime"] {
        assert!(!config.contains(forbidden), "config.rs names {forbidden}");
    }
}

#[test]
fn only_the_node_type_modules_compare_node_type_ids() {
    let nodes = library().join("domain/nodes");
    for (path, text) in sources(&library()) {
        if path.starts_with(&nodes) {
            continue;
        }
        for (number, line) in text.lines().enumerate() {
            let compares = line.contains("node_type_id ==") || line.contains("node_type_id !=");
            assert!(!compares, "{}:{}: ask the node type instead: {line}", path.display(), number + 1);
        }
    }
}

#[test]
fn no_function_needs_clippy_to_allow_its_arguments() {
    for folder in [library(), Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()] {
        for (path, text) in sources(&folder) {
            assert!(!text.contains(&format!("{}::too_many_arguments", "clippy")), "{}", path.display());
        }
    }
}

/// The domain's contexts, bottom up, as `docs/ARCHITECTURE.md` declares them: a context
/// imports only from contexts of a tier below its own, never from one beside it or above
/// (the kernel's modules may import each other, without a cycle).
const CONTEXT_TIERS: &[&[&str]] = &[
    // The kernel: what every context names.
    &["ids", "time", "labels", "work", "rejection"],
    &["media", "generation", "credits", "workspaces", "idempotency", "shared_stores", "webhooks"],
    &["identity", "uploads", "sites"],
    &["asset_manager", "nodes"],
    &["graph"],
    &["agents", "avatars"],
    &["runs"],
    &["triggers", "social"],
    // Hands each kind of work to its context.
    &["dispatch"],
];

/// The tier of the context a domain module belongs to (None: the domain's root).
fn tier_of(module: &module_graph::Module) -> Option<(usize, &str)> {
    let context = module.get(1)?;
    let tier = CONTEXT_TIERS
        .iter()
        .position(|tier| tier.contains(&context.as_str()))
        .unwrap_or_else(|| panic!("the context {context} is in no tier of CONTEXT_TIERS (and docs/ARCHITECTURE.md)"));
    Some((tier, context))
}

#[test]
fn each_context_imports_only_contexts_below_it() {
    let root = library();
    let graph = module_graph::Graph::read(&root, &sources(&root));
    let in_domain = |module: &module_graph::Module| module.first().map(String::as_str) == Some("domain");
    let mut wrong = Vec::new();
    for (from, targets) in graph.arrows.iter().filter(|(from, _)| in_domain(from)) {
        for to in targets.iter().filter(|to| in_domain(to)) {
            let name = |module: &module_graph::Module| module.join("::");
            match (tier_of(from), tier_of(to)) {
                (_, None) => wrong.push(format!("{} imports the domain's root", name(from))),
                (Some((from_tier, from_context)), Some((to_tier, to_context)))
                    if from_context != to_context && to_tier >= from_tier && (to_tier, from_tier) != (0, 0) =>
                {
                    wrong.push(format!("{} imports {} (not below it)", name(from), name(to)))
                }
                _ => {}
            }
        }
    }
    assert!(wrong.is_empty(), "imports against the contexts' order:\n{}", wrong.join("\n"));
}

#[test]
fn no_files_of_the_domain_import_each_other_in_a_cycle() {
    let root = library();
    let graph = module_graph::Graph::read(&root, &sources(&root));
    let cycles: Vec<String> = graph
        .cycles(|module| module.first().map(String::as_str) == Some("domain"))
        .iter()
        .map(|cycle| cycle.iter().map(|module| module[1..].join("::")).collect::<Vec<_>>().join(" "))
        .collect();
    assert!(cycles.is_empty(), "files that import each other (a context's mod.rs included): {cycles:#?}");
}

/// The graph reader sees what it must: a cycle made of a `super::` import and a
/// re-export, an import through a `use` of a module, and none through test code.
#[test]
fn the_import_graph_follows_paths_as_the_compiler_does() {
    let root = Path::new("/virtual/src");
    let file = |path: &str, text: &str| (root.join(path), text.to_owned());
    let sources = [
        file("lib.rs", "pub mod a; pub mod b; pub mod c; mod d;"),
        file("a/mod.rs", "mod inner; pub use inner::Thing; use crate::b::Other;"),
        file("a/inner.rs", "pub struct Thing; fn f(_: super::Helper) {}"),
        file("a/helper.rs", ""),
        file("b.rs", "pub struct Other; use crate::c; fn g() { let _ = c::Third; }"),
        file("d.rs", "fn h() { use crate::c::Third; let _ = Third; }"),
        file("c.rs", "pub struct Third; #[cfg(test)] mod tests { use crate::a::Thing; }"),
    ];
    let graph = module_graph::Graph::read(root, &sources);
    let arrows = |module: &str| -> Vec<String> {
        let module: module_graph::Module =
            if module.is_empty() { Vec::new() } else { module.split("::").map(str::to_owned).collect() };
        graph.arrows[&module].iter().map(|target| target.join("::")).collect()
    };
    assert_eq!(arrows("a"), ["a::inner", "b"], "a re-export is an arrow to the file that declares the item");
    assert_eq!(arrows("a::inner"), ["a"], "super:: names the parent");
    assert_eq!(arrows("b"), ["c"]);
    assert!(arrows("c").is_empty(), "test code is left out");
    assert_eq!(arrows("d"), ["c"], "a use inside a function's body is an import of its file");
    assert_eq!(graph.cycles(|_| true), [vec![vec!["a".to_owned()], vec!["a".to_owned(), "inner".to_owned()]]]);
}
