//! The README's guide for embedders holds as written: a crate of its own,
//! with exactly the README's dependency list, builds every example the
//! guide names.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `[dependencies]` block of the README's guide for embedders.
fn readme_dependencies() -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let guide = &readme[readme
        .find("## Using the layer in your own service")
        .expect("the guide for embedders")..];
    let start = guide
        .find("```toml\n[dependencies]\n")
        .expect("its dependency list")
        + 8;
    let block = &guide[start..];
    block[..block.find("```").unwrap()].to_owned()
}

/// The examples the guide names, as `examples/NAME.rs`.
fn named_examples() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let mut names: Vec<String> = readme
        .split("`examples/")
        .skip(1)
        .filter_map(|rest| rest.split_once(".rs`").map(|(name, _)| name.to_owned()))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The repository's `[profile.*]` sections: built with them, the
/// dependencies `make check` checked in the target directory are not
/// checked again.
fn profiles() -> String {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let mut out = String::new();
    let mut in_profile = false;
    for line in manifest.lines() {
        if line.starts_with('[') {
            in_profile = line.starts_with("[profile.");
        }
        if in_profile {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

#[test]
fn a_crate_with_exactly_the_readme_s_dependencies_builds_every_example_the_guide_names() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dependencies = readme_dependencies();
    assert!(
        dependencies.starts_with("[dependencies]\nresult-inbox = \"0.1\"\n"),
        "{dependencies}"
    );
    let examples = named_examples();
    assert!(examples.len() >= 3, "{examples:?}");

    let dir = std::env::temp_dir().join(format!("result-inbox-guide-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("examples")).unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let manifest = format!(
        "[package]\nname = \"embedder\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n[workspace]\n\n{}\n{}",
        dependencies
            .replace(
                "result-inbox = \"0.1\"",
                &format!("result-inbox = {{ path = {:?} }}", repo.display().to_string()),
            )
            .replace(
                "result-inbox = { version = \"0.1\",",
                &format!("result-inbox = {{ path = {:?},", repo.display().to_string()),
            ),
        profiles()
    );
    // An example on PostgreSQL needs the feature the README's "On
    // PostgreSQL" names, in the dependency line it gives.
    let postgres_line = "result-inbox = { version = \"0.1\", features = [\"postgres\"] }";
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    assert!(
        readme.contains(postgres_line),
        "the README's line for PostgreSQL"
    );
    let manifest = if examples.iter().any(|name| name.ends_with("_postgres")) {
        manifest.replacen(
            &format!(
                "result-inbox = {{ path = {:?} }}",
                repo.display().to_string()
            ),
            &format!(
                "result-inbox = {{ path = {:?}, features = [\"postgres\"] }}",
                repo.display().to_string()
            ),
            1,
        )
    } else {
        manifest
    };
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "").unwrap();
    // The versions this repository was tested with.
    std::fs::copy(repo.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    for name in &examples {
        std::fs::copy(
            repo.join("examples").join(format!("{name}.rs")),
            dir.join("examples").join(format!("{name}.rs")),
        )
        .unwrap_or_else(|e| panic!("examples/{name}.rs: {e}"));
    }

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // The repository's target directory (and profiles): the dependencies
    // `make check` checked there are not checked again.
    let out = Command::new(cargo)
        .args(["check", "--offline", "--examples", "--quiet"])
        .env("CARGO_TARGET_DIR", target_dir())
        .current_dir(&dir)
        .output()
        .expect("cargo runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "the README's dependencies do not build {examples:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
