//! The architecture invariants of `ARCHITECTURE.md` ("Layers"), held by
//! reading every `crate::…` path in `src/`: no module imports a layer
//! above it or beside it, the modules form no circle, and only `lib.rs`
//! gates modules by the `mysql` feature; the inbox, the task view and the
//! operator tools send no statement of their own (the engine's are in
//! `db`), and the tools pick no engine; and no file of the binary needs a
//! scroll bar of 400 lines. No server needed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The vocabulary every part may speak (and the crate root's `BoxError`).
const VOCABULARY: &[&str] = &[
    "ids",
    "digest",
    "event",
    "delivery",
    "scope",
    "failure",
    "probe",
    "retry",
    "telemetry",
    "BoxError",
];

/// What each module above the vocabulary may know, besides the vocabulary
/// and itself. Everything not listed here is out of bounds.
const ABOVE: &[(&str, &[&str])] = &[
    ("db", &[]),
    ("source", &[]),
    // The inbox lends the outbox's recorder; the relay that sends after
    // COMMIT sits beside the consumer, and the inbox never knows it.
    ("outbox", &["db"]),
    ("inbox", &["db", "outbox"]),
    // Its RabbitMQ target publishes through the source's connection code.
    ("relay", &["db", "outbox", "rabbitmq"]),
    // The task view that notifies records its effect through the inbox.
    ("task_view", &["db", "inbox", "outbox"]),
    ("consumer", &["source"]),
    ("orbit", &["source"]),
    ("nats", &["source"]),
    ("rabbitmq", &["source"]),
    ("verify", &["db"]),
    ("stats", &["db"]),
    ("prune", &["db"]),
    ("inspect", &["db"]),
    ("diagnosis", &["db", "inbox", "task_view"]),
    ("testing", &["db", "inbox"]),
];

/// One import against the grain: in `file`, a path into `target`.
#[derive(Debug, PartialEq, Eq)]
struct Violation {
    file: String,
    module: String,
    target: String,
    line: String,
}

/// The top-level module a file of `src/` belongs to (`None` for `lib.rs`).
fn module_of(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    if first == "lib.rs" {
        return None;
    }
    Some(first.trim_end_matches(".rs").to_owned())
}

/// The code of `text` without its comments (line comments and doc
/// comments: an intra-doc link is not a dependency).
fn code_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().map(|line| match line.find("//") {
        Some(at) => &line[..at],
        None => line,
    })
}

/// The top-level modules that the `crate::…` paths of `code` name, each
/// with the line it is on. Grouped imports (`crate::{a, b::c}`) name each.
fn crate_paths(code: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let joined: Vec<&str> = code_lines(code).collect();
    let text = joined.join("\n");
    let mut rest = text.as_str();
    while let Some(at) = rest.find("crate::") {
        let line_start = rest[..at].rfind('\n').map_or(0, |n| n + 1);
        let line_end = rest[at..].find('\n').map_or(rest.len(), |n| at + n);
        let line = rest[line_start..line_end].trim().to_owned();
        let after = &rest[at + "crate::".len()..];
        // `$crate::` of a macro and `result_inbox::crate` never occur;
        // a preceding identifier character means another path's tail.
        let preceded = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$');
        if !preceded {
            if let Some(group) = after.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let name: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        found.push((name, line.clone()));
                    }
                }
            } else {
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.push((name, line.clone()));
                }
            }
        }
        rest = after;
    }
    found
}

fn allowed(module: &str, target: &str) -> bool {
    if target == module || target == "self" || VOCABULARY.contains(&target) {
        return true;
    }
    if VOCABULARY.contains(&module) {
        return false;
    }
    ABOVE
        .iter()
        .find(|(m, _)| *m == module)
        .is_some_and(|(_, may)| may.contains(&target))
}

/// Checks one file's text as the file `relative` of `src/`.
fn check_file(relative: &Path, text: &str) -> Vec<Violation> {
    let Some(module) = module_of(relative) else {
        return Vec::new();
    };
    crate_paths(text)
        .into_iter()
        .filter(|(target, _)| !allowed(&module, target))
        .map(|(target, line)| Violation {
            file: format!("src/{}", relative.display()),
            module: module.clone(),
            target,
            line,
        })
        .collect()
}

/// The `.rs` files below `dir`.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn source_files() -> Vec<(PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            (path.strip_prefix(&src).unwrap().to_path_buf(), text)
        })
        .collect()
}

#[test]
fn no_module_of_src_imports_a_layer_above_or_beside_it() {
    let mut modules = BTreeSet::new();
    let mut violations = Vec::new();
    for (relative, text) in source_files() {
        if let Some(module) = module_of(&relative) {
            modules.insert(module);
        }
        violations.extend(check_file(&relative, &text));
    }
    // Every module has a place in the table, so that a new one is placed
    // on purpose.
    for module in &modules {
        assert!(
            VOCABULARY.contains(&module.as_str()) || ABOVE.iter().any(|(m, _)| m == module),
            "src/{module} has no layer: add it to ARCHITECTURE.md's layers and to this test"
        );
    }
    let report: Vec<String> = violations
        .iter()
        .map(|v| {
            format!(
                "{}: `{}` may not know `{}`: {}",
                v.file, v.module, v.target, v.line
            )
        })
        .collect();
    assert!(
        report.is_empty(),
        "imports against the grain:\n{}",
        report.join("\n")
    );
}

#[test]
fn the_modules_of_src_form_no_circle() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (relative, text) in source_files() {
        let Some(module) = module_of(&relative) else {
            continue;
        };
        let edges = graph.entry(module.clone()).or_default();
        for (target, _) in crate_paths(&text) {
            if target != module && target != "BoxError" && target != "self" {
                edges.insert(target);
            }
        }
    }
    if let Some(circle) = first_circle(&graph) {
        panic!("a circle among the modules: {}", circle.join(" -> "));
    }
}

/// A circle of `graph` (each node's edges), if there is one: the nodes on
/// it, the first one again at the end.
fn first_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first search; a module met again on the current path closes a
    // circle.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_owned());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn only_lib_rs_gates_a_module_by_the_database_feature() {
    for (relative, text) in source_files() {
        if relative == Path::new("lib.rs") {
            continue;
        }
        for line in code_lines(&text) {
            assert!(
                !(line.contains("cfg(")
                    && line.contains("feature = \"mysql\"")
                    && !line.contains("allow(dead_code)")),
                "src/{} is gated by the mysql feature inside: {line}",
                relative.display()
            );
        }
    }
}

/// What in a line of code sends a statement of its own: sqlx's query
/// functions and transaction manager, or a string that starts as SQL does.
fn sends_a_statement(line: &str) -> Option<&'static str> {
    [
        "sqlx::query",
        "sqlx::raw_sql",
        "query_as(",
        "query_scalar(",
        ".execute(",
        "TransactionManager",
        "\"SELECT ",
        "\"INSERT ",
        "\"UPDATE ",
        "\"DELETE ",
        "\"SET ",
        "\"BEGIN",
        "\"COMMIT",
        "\"ROLLBACK",
        "\"SAVEPOINT",
    ]
    .into_iter()
    .find(|sign| line.contains(sign))
}

#[test]
fn the_inbox_the_task_view_and_the_outbox_send_no_statement_of_their_own() {
    for (relative, text) in source_files() {
        if !matches!(
            module_of(&relative).as_deref(),
            Some("inbox" | "task_view" | "outbox")
        ) {
            continue;
        }
        for line in code_lines(&text) {
            if let Some(sign) = sends_a_statement(line) {
                panic!(
                    "src/{} sends a statement ({sign}): the engine's statements live in db/mysql: {}",
                    relative.display(),
                    line.trim()
                );
            }
        }
    }
}

/// The operator tools of the library, written once over the engine.
const TOOLS: &[&str] = &["verify", "stats", "inspect", "prune", "diagnosis"];

#[test]
fn the_operator_tools_send_no_statement_and_ask_no_engine_of_their_own() {
    for (relative, text) in source_files() {
        if !module_of(&relative).is_some_and(|m| TOOLS.contains(&m.as_str())) {
            continue;
        }
        for line in code_lines(&text) {
            let sign = sends_a_statement(line).or_else(|| {
                [
                    "Postgres",
                    "PgConnection",
                    "EngineKind",
                    "AnyConnection::MySql",
                ]
                .into_iter()
                .find(|name| line.contains(name))
            });
            if let Some(sign) = sign {
                panic!(
                    "src/{} speaks to an engine itself ({sign}): its statements live in \
                     db/<engine>, and db::any picks the engine: {}",
                    relative.display(),
                    line.trim()
                );
            }
        }
    }
}

#[test]
fn the_statement_check_sees_a_query_and_lets_the_rest_pass() {
    for line in [
        "let n: i64 = sqlx::query_scalar(\"SELECT 1\").fetch_one(conn).await?;",
        "conn.execute(\"ROLLBACK TO SAVEPOINT delivery\")",
        "MySqlTransactionManager::begin(conn, None)",
    ] {
        assert!(sends_a_statement(line).is_some(), "{line}");
    }
    for line in [
        "inbox::insert_all(self.connection(), scope, events).await",
        "let stats = store.stats();",
    ] {
        assert_eq!(sends_a_statement(line), None, "{line}");
    }
}

#[test]
fn the_check_names_the_file_and_the_import_that_break_a_layer() {
    let consumer =
        "use crate::source::Source;\nuse crate::inbox::InboxError; // against the grain\n";
    let found = check_file(Path::new("consumer/run.rs"), consumer);
    assert_eq!(
        found,
        [Violation {
            file: "src/consumer/run.rs".into(),
            module: "consumer".into(),
            target: "inbox".into(),
            line: "use crate::inbox::InboxError;".into(),
        }]
    );
    let grouped = "use crate::{event::Event, orbit::OrbitError};";
    let found = check_file(Path::new("nats/pull.rs"), grouped);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].target, "orbit");
    let vocabulary = "    let _ = crate::consumer::ConsumerOptions::default();";
    assert_eq!(
        check_file(Path::new("event.rs"), vocabulary)[0].target,
        "consumer"
    );
}

#[test]
fn the_inbox_may_record_effects_but_never_know_a_relay_and_the_outbox_never_the_inbox() {
    let inbox = "use crate::outbox::Recorder;\nuse crate::relay::Relay;\n";
    let found = check_file(Path::new("inbox/mod.rs"), inbox);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].target, "relay");
    let outbox = "use crate::inbox::Applying;\nuse crate::db::Engine;\n";
    let found = check_file(Path::new("outbox/record.rs"), outbox);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].target, "inbox");
    let relay = "use crate::inbox::InboxStore;";
    assert_eq!(
        check_file(Path::new("relay/mod.rs"), relay)[0].target,
        "inbox"
    );
}

#[test]
fn a_doc_link_or_a_comment_is_not_a_dependency() {
    let text =
        "/// See [`crate::consumer::Consumer`].\n//! [`crate::inbox`]\nfn f() {} // crate::nats\n";
    assert!(check_file(Path::new("db/mod.rs"), text).is_empty());
}

#[test]
fn no_file_of_the_binary_is_over_400_lines() {
    let mut files = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("bin"),
        &mut files,
    );
    assert!(!files.is_empty());
    for file in files {
        let lines = std::fs::read_to_string(&file).unwrap().lines().count();
        assert!(
            lines <= 400,
            "{} has {lines} lines: split it by concept",
            file.display()
        );
    }
}

/// The modules directly under `src/db/` (a file `x.rs` or a folder `x/`),
/// the files of each (relative to `src/db/`), and what `db/mod.rs`
/// re-exports from which of them (`pub use self::m::{A, B}`).
struct DbModules {
    files: Vec<(PathBuf, String)>,
    modules: BTreeSet<String>,
    reexports: BTreeMap<String, String>,
}

fn db_modules() -> DbModules {
    let mut files = Vec::new();
    let mut modules = BTreeSet::new();
    let mut reexports = BTreeMap::new();
    for (relative, text) in source_files() {
        let Ok(inside) = relative.strip_prefix("db") else {
            continue;
        };
        if inside == Path::new("mod.rs") {
            for line in code_lines(&text) {
                let Some(rest) = line.trim().strip_prefix("pub use self::") else {
                    continue;
                };
                let (module, names) = rest.split_once("::").unwrap_or((rest, ""));
                for name in names
                    .trim_end_matches(';')
                    .trim_matches(|c| c == '{' || c == '}')
                    .split(',')
                {
                    let name = name.trim().rsplit("::").next().unwrap_or("").trim();
                    if !name.is_empty() {
                        reexports.insert(name.to_owned(), module.to_owned());
                    }
                }
            }
        } else {
            let first = inside.components().next().unwrap().as_os_str();
            modules.insert(first.to_str().unwrap().trim_end_matches(".rs").to_owned());
        }
        files.push((inside.to_path_buf(), text));
    }
    DbModules {
        files,
        modules,
        reexports,
    }
}

/// The modules of `db` that the file `relative` (of `src/db/`) names, each
/// with its line: its paths `crate::db::x`, and `super::x` from a file
/// whose parent is `db` (`super::super::x` one folder down). A name that
/// `db/mod.rs` re-exports counts as the module it comes from.
fn db_paths(relative: &Path, text: &str, db: &DbModules) -> Vec<(String, String)> {
    let depth = relative.components().count();
    let is_folder_root = relative.file_name().is_some_and(|f| f == "mod.rs");
    let up = match (depth, is_folder_root) {
        (1, _) | (2, true) => "super::",
        _ => "super::super::",
    };
    let resolve = |name: &str| {
        if db.modules.contains(name) {
            Some(name.to_owned())
        } else {
            db.reexports.get(name).cloned()
        }
    };
    let mut found = Vec::new();
    for line in code_lines(text) {
        for prefix in ["crate::db::", up] {
            let mut rest = line;
            while let Some(at) = rest.find(prefix) {
                let before = rest[..at].chars().next_back();
                let after = &rest[at + prefix.len()..];
                rest = after;
                // Another path's tail (`x::super::`, `other_crate::db::`).
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                // `super::super::x` seen as `super::` + `super`.
                if prefix == "super::" && after.starts_with("super::") {
                    continue;
                }
                let names: Vec<&str> = match after.strip_prefix('{') {
                    Some(group) => {
                        let mut depth = 0;
                        let end = group
                            .char_indices()
                            .find(|&(_, c)| {
                                depth += i32::from(c == '{') - i32::from(c == '}');
                                depth < 0
                            })
                            .map_or(group.len(), |(i, _)| i);
                        let mut items = Vec::new();
                        let mut depth = 0;
                        let mut start = 0;
                        for (i, c) in group[..end].char_indices() {
                            match c {
                                '{' => depth += 1,
                                '}' => depth -= 1,
                                ',' if depth == 0 => {
                                    items.push(&group[start..i]);
                                    start = i + 1;
                                }
                                _ => {}
                            }
                        }
                        items.push(&group[start..end]);
                        items
                    }
                    None => vec![after],
                };
                for name in names {
                    let name: String = name
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if let Some(module) = resolve(&name) {
                        found.push((module, line.trim().to_owned()));
                    }
                }
            }
        }
    }
    found
}

/// The engines' folders of `db`, and the one file beside them that picks
/// an engine for an address (see ARCHITECTURE.md, "Layers").
const ENGINES: &[&str] = &["mysql", "postgres"];
const PICKS_THE_ENGINE: &str = "any.rs";

/// The files directly in `src/db/` that name an engine's folder, other
/// than the one that picks the engine (and `mod.rs`, which lists them).
fn engine_neutral_files_naming_an_engine(db: &DbModules) -> Vec<String> {
    let mut found = Vec::new();
    for (relative, text) in &db.files {
        if relative.components().count() != 1
            || relative == Path::new(PICKS_THE_ENGINE)
            || relative == Path::new("mod.rs")
        {
            continue;
        }
        for (module, line) in db_paths(relative, text, db) {
            if ENGINES.contains(&module.as_str()) {
                found.push(format!(
                    "src/db/{}: names db::{module}: {line}",
                    relative.display()
                ));
            }
        }
    }
    found
}

#[test]
fn nothing_engine_neutral_in_db_names_an_engine() {
    let found = engine_neutral_files_naming_an_engine(&db_modules());
    assert!(
        found.is_empty(),
        "each engine's codes and address live in db/<engine>/, and only db/{PICKS_THE_ENGINE} \
         picks an engine:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_modules_of_db_form_no_circle() {
    let db = db_modules();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (relative, text) in &db.files {
        if relative == Path::new("mod.rs") {
            continue;
        }
        let first = relative.components().next().unwrap().as_os_str();
        let module = first.to_str().unwrap().trim_end_matches(".rs").to_owned();
        let edges = graph.entry(module.clone()).or_default();
        for (target, _) in db_paths(relative, text, &db) {
            if target != module {
                edges.insert(target);
            }
        }
    }
    if let Some(circle) = first_circle(&graph) {
        panic!("a circle among the modules of db: {}", circle.join(" -> "));
    }
}

#[test]
fn the_engine_check_sees_a_path_into_an_engine_however_written() {
    let db = DbModules {
        files: Vec::new(),
        modules: ["error", "mysql", "postgres", "schema"]
            .map(String::from)
            .into(),
        reexports: [("errno", "mysql"), ("DbError", "error")]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .into(),
    };
    let neutral = Path::new("error.rs");
    for (line, engine) in [
        ("use super::postgres::sqlstate;", "postgres"),
        ("let n = crate::db::mysql::errno::DEADLOCK;", "mysql"),
        ("use super::{errno, DbError};", "mysql"),
        (
            "use crate::db::{schema::TABLES, postgres::UNDEFINED_TABLE};",
            "postgres",
        ),
    ] {
        let found = db_paths(neutral, line, &db);
        assert!(found.iter().any(|(m, _)| m == engine), "{line}: {found:?}");
    }
    // One folder down, `super::` is the folder itself.
    let inside = Path::new("mysql/errno.rs");
    assert!(db_paths(inside, "use super::mysql::x;", &db).is_empty());
    assert_eq!(
        db_paths(inside, "use super::super::error::DbError;", &db)[0].0,
        "error"
    );
    assert_eq!(
        db_paths(Path::new("mysql/mod.rs"), "use super::{DbError, Dsn};", &db)[0].0,
        "error"
    );
}
