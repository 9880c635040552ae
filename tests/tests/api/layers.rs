//! The layering rules of `docs/ARCHITECTURE.md`, checked on the source: the domain and
//! the core import nothing above them, `config` nothing of the wiring, only node-type modules know node type IDs, and no
//! function takes so many arguments that clippy has to be told to allow it.

use std::path::{Path, PathBuf};

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
