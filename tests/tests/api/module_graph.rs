//! The library's import graph, file by file, read with `syn` as the compiler reads paths:
//! a `use` (or a `crate::`/`super::`/`self::` path in code or in a macro's tokens) is an
//! arrow from its file to the file that declares the item it names, followed through
//! re-exports (`pub use`, private `use` and globs) to where the item is declared. Test
//! code (`#[cfg(test)]` items) is left out: it may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use syn::visit::Visit;

/// A module's path from the crate root (`["domain", "runs", "ports"]`).
pub type Module = Vec<String>;

/// What one file declares and imports.
#[derive(Default)]
struct File {
    /// Items declared in the file (structs, functions, inline modules, …).
    declared: BTreeSet<String>,
    /// Child modules declared with `mod x;`.
    children: BTreeSet<String>,
    /// Names brought in by `use`: name → the path it stands for.
    imported: BTreeMap<String, Vec<String>>,
    /// Paths of `use x::*`.
    globs: Vec<Vec<String>>,
    /// Every path the file names, as written.
    paths: Vec<Vec<String>>,
}

/// The import graph of the library's files.
pub struct Graph {
    files: BTreeMap<Module, File>,
    /// File → the files it imports from.
    pub arrows: BTreeMap<Module, BTreeSet<Module>>,
}

/// The module of a source file under `root` (`domain/runs/mod.rs` → `domain::runs`).
fn module_of(root: &Path, path: &Path) -> Module {
    let relative = path.strip_prefix(root).expect("under the root").with_extension("");
    let mut module: Module = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
    if matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        module.pop();
    }
    module
}

fn is_test_only(attributes: &[syn::Attribute]) -> bool {
    attributes.iter().any(|attribute| {
        attribute.path().is_ident("cfg")
            && attribute.meta.require_list().is_ok_and(|list| list.tokens.to_string().starts_with("test"))
    })
}

/// Adds a use tree's names, globs and paths under `prefix`.
fn read_use(tree: &syn::UseTree, prefix: &mut Vec<String>, file: &mut File) {
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            read_use(&path.tree, prefix, file);
            prefix.pop();
        }
        syn::UseTree::Name(name) => {
            let mut full = prefix.clone();
            let name = name.ident.to_string();
            if name != "self" {
                full.push(name.clone());
            }
            let alias = if name == "self" { prefix.last().cloned().unwrap_or_default() } else { name };
            file.imported.insert(alias, full.clone());
            file.paths.push(full);
        }
        syn::UseTree::Rename(rename) => {
            let mut full = prefix.clone();
            if rename.ident != "self" {
                full.push(rename.ident.to_string());
            }
            file.imported.insert(rename.rename.to_string(), full.clone());
            file.paths.push(full);
        }
        syn::UseTree::Glob(_) => {
            file.globs.push(prefix.clone());
            file.paths.push(prefix.clone());
        }
        syn::UseTree::Group(group) => {
            for tree in &group.items {
                read_use(tree, prefix, file);
            }
        }
    }
}

/// Collects the paths in code that start at `crate`, `super` or `self`.
struct Paths<'a>(&'a mut File);

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|segment| segment.ident.to_string()).collect();
        // `crate::x::Y`, `super::Y`, and `child::Y` or `imported::Y` (resolved, or
        // dropped as another crate's, by `Graph::absolute`).
        if segments.len() > 1 {
            self.0.paths.push(segments);
        }
        syn::visit::visit_path(self, path);
    }

    /// A `use` anywhere in the file (in a function's body too) is an import of the file.
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        read_use(&item.tree, &mut Vec::new(), self.0);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // A macro's arguments are tokens, not syntax: find the paths in their text.
        let text = mac.tokens.to_string();
        let words: Vec<&str> = text.split_whitespace().collect();
        let mut at = 0;
        while at < words.len() {
            if matches!(words[at], "crate" | "super" | "self") && words.get(at + 1) == Some(&"::") {
                let mut segments = vec![words[at].to_owned()];
                at += 1;
                while words.get(at) == Some(&"::") && words.get(at + 1).is_some_and(|word| is_identifier(word)) {
                    segments.push(words[at + 1].to_owned());
                    at += 2;
                }
                self.0.paths.push(segments);
            } else {
                at += 1;
            }
        }
        syn::visit::visit_macro(self, mac);
    }

    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !item_is_test_only(item) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, function: &'ast syn::ImplItemFn) {
        if !is_test_only(&function.attrs) {
            syn::visit::visit_impl_item_fn(self, function);
        }
    }
}

fn is_identifier(word: &str) -> bool {
    word.chars().next().is_some_and(|first| first.is_alphabetic() || first == '_')
        && word.chars().all(|c| c.is_alphanumeric() || c == '_')
}

fn item_is_test_only(item: &syn::Item) -> bool {
    let attributes = match item {
        syn::Item::Mod(item) => &item.attrs,
        syn::Item::Fn(item) => &item.attrs,
        syn::Item::Use(item) => &item.attrs,
        syn::Item::Impl(item) => &item.attrs,
        syn::Item::Struct(item) => &item.attrs,
        syn::Item::Enum(item) => &item.attrs,
        syn::Item::Const(item) => &item.attrs,
        syn::Item::Static(item) => &item.attrs,
        syn::Item::Trait(item) => &item.attrs,
        syn::Item::Type(item) => &item.attrs,
        _ => return false,
    };
    is_test_only(attributes)
}

/// Reads a file's declarations and uses (not those of its test-only items).
fn read_items(items: &[syn::Item], file: &mut File) {
    for item in items.iter().filter(|item| !item_is_test_only(item)) {
        let declared = match item {
            syn::Item::Use(item) => {
                read_use(&item.tree, &mut Vec::new(), file);
                None
            }
            syn::Item::Mod(module) => match &module.content {
                None => {
                    file.children.insert(module.ident.to_string());
                    None
                }
                Some(_) => Some(&module.ident),
            },
            syn::Item::Struct(item) => Some(&item.ident),
            syn::Item::Enum(item) => Some(&item.ident),
            syn::Item::Fn(item) => Some(&item.sig.ident),
            syn::Item::Trait(item) => Some(&item.ident),
            syn::Item::Type(item) => Some(&item.ident),
            syn::Item::Const(item) => Some(&item.ident),
            syn::Item::Static(item) => Some(&item.ident),
            syn::Item::Union(item) => Some(&item.ident),
            syn::Item::Macro(item) => item.ident.as_ref(),
            _ => None,
        };
        if let Some(name) = declared {
            file.declared.insert(name.to_string());
        }
    }
}

impl Graph {
    /// Reads every `.rs` file under `root` (a crate's `src`).
    pub fn read(root: &Path, sources: &[(std::path::PathBuf, String)]) -> Graph {
        let mut files = BTreeMap::new();
        for (path, text) in sources {
            let syntax = syn::parse_file(text).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            let mut file = File::default();
            read_items(&syntax.items, &mut file);
            Paths(&mut file).visit_file(&syntax);
            files.insert(module_of(root, path), file);
        }
        let mut graph = Graph { files, arrows: BTreeMap::new() };
        let modules: Vec<Module> = graph.files.keys().cloned().collect();
        for module in modules {
            let paths = graph.files[&module].paths.clone();
            let targets: BTreeSet<Module> = paths
                .iter()
                .filter_map(|path| graph.absolute(&module, path))
                .filter_map(|path| graph.declaring(&path, 0))
                .filter(|target| *target != module)
                .collect();
            graph.arrows.insert(module, targets);
        }
        graph
    }

    /// `path` as written in `module`, from the crate root; `None` for another crate's.
    fn absolute(&self, module: &Module, path: &[String]) -> Option<Vec<String>> {
        let mut at = module.clone();
        let mut rest = path;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                at.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    at.pop()?;
                    rest = &rest[1..];
                }
            }
            Some(first) if self.files[module].children.contains(first) => {}
            Some(first) => {
                // A name brought in by another `use` of the file (`use ports::{self}`).
                let imported = self.files[module].imported.get(first)?;
                if imported.first().map(String::as_str) == Some(first) {
                    return None;
                }
                let mut full = self.absolute(module, imported)?;
                full.extend(rest[1..].iter().cloned());
                return Some(full);
            }
            None => return None,
        }
        at.extend(rest.iter().cloned());
        Some(at)
    }

    /// The file that declares what the absolute `path` names, following re-exports.
    fn declaring(&self, path: &[String], depth: usize) -> Option<Module> {
        let split = (0..=path.len()).rev().find(|&length| self.files.contains_key(&path[..length]))?;
        let module = path[..split].to_vec();
        let Some(name) = path.get(split) else { return Some(module) };
        let file = &self.files[&module];
        if file.declared.contains(name) || depth > 12 {
            return Some(module);
        }
        if let Some(imported) = file.imported.get(name) {
            let mut full = self.absolute(&module, imported)?;
            full.extend(path[split + 1..].iter().cloned());
            return self.declaring(&full, depth + 1).or(Some(module));
        }
        for glob in &file.globs {
            let Some(from) = self.absolute(&module, glob) else { continue };
            if self.files.contains_key(&from) && self.provides(&from, name, depth + 1) {
                let mut full = from;
                full.extend(path[split..].iter().cloned());
                return self.declaring(&full, depth + 1);
            }
        }
        Some(module)
    }

    /// True when `module` declares or brings in `name` (through a glob too).
    fn provides(&self, module: &Module, name: &str, depth: usize) -> bool {
        let file = &self.files[module];
        file.declared.contains(name)
            || file.imported.contains_key(name)
            || (depth < 12
                && file.globs.iter().any(|glob| {
                    self.absolute(module, glob)
                        .is_some_and(|from| self.files.contains_key(&from) && self.provides(&from, name, depth + 1))
                }))
    }

    /// The groups of files that import each other, directly or not, among `files`
    /// (Tarjan's strongly connected components, those of more than one file).
    pub fn cycles(&self, within: impl Fn(&Module) -> bool) -> Vec<Vec<Module>> {
        struct Search<'a> {
            arrows: BTreeMap<&'a Module, Vec<&'a Module>>,
            index: BTreeMap<&'a Module, usize>,
            low: BTreeMap<&'a Module, usize>,
            stack: Vec<&'a Module>,
            found: Vec<Vec<Module>>,
        }
        impl<'a> Search<'a> {
            fn visit(&mut self, module: &'a Module) {
                let index = self.index.len();
                self.index.insert(module, index);
                self.low.insert(module, index);
                self.stack.push(module);
                for &next in self.arrows[module].clone().iter() {
                    if !self.index.contains_key(next) {
                        self.visit(next);
                        self.low.insert(module, self.low[module].min(self.low[next]));
                    } else if self.stack.contains(&next) {
                        self.low.insert(module, self.low[module].min(self.index[next]));
                    }
                }
                if self.low[module] == self.index[module] {
                    let mut group = Vec::new();
                    while let Some(member) = self.stack.pop() {
                        group.push(member.clone());
                        if member == module {
                            break;
                        }
                    }
                    if group.len() > 1 {
                        group.sort();
                        self.found.push(group);
                    }
                }
            }
        }
        let nodes: Vec<&Module> = self.arrows.keys().filter(|module| within(module)).collect();
        let arrows = nodes
            .iter()
            .map(|&module| (module, self.arrows[module].iter().filter(|target| within(target)).collect()))
            .collect();
        let mut search =
            Search { arrows, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
        for node in nodes {
            if !search.index.contains_key(node) {
                search.visit(node);
            }
        }
        search.found
    }
}
