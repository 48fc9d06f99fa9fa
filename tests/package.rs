//! The `rust-version` each workspace package declares is the newest Rust
//! that its locked dependencies need on this platform: not lower (a user of
//! that toolchain would meet a dependency that refuses to build), and not
//! higher (it would turn away a toolchain that works). The code's own use
//! of the standard library is held to the same version by clippy's
//! `incompatible_msrv` lint in `make check`.

use std::collections::{HashMap, HashSet};
use std::process::Command;

use serde_json::Value;

#[test]
fn each_package_declares_the_rust_version_its_locked_dependencies_need() {
    let metadata = metadata();
    let packages: HashMap<&str, &Value> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p))
        .collect();
    let nodes: HashMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();

    let mut wrong = Vec::new();
    for member in metadata["workspace_members"].as_array().unwrap() {
        let member = member.as_str().unwrap();
        let declared = version(&packages[member]["rust_version"])
            .unwrap_or_else(|| panic!("{} declares no rust-version", packages[member]["name"]));
        let (needed, by) = built_dependencies(member, &nodes)
            .into_iter()
            .filter_map(|id| {
                let package = packages[id];
                version(&package["rust_version"]).map(|v| (v, package_name(package)))
            })
            .max()
            .expect("a package with dependencies");
        if declared != needed {
            wrong.push(format!(
                "{} declares rust-version {} but its locked dependencies need {} ({by})",
                packages[member]["name"],
                show(declared),
                show(needed),
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The workspace's resolved graph with every feature on (the `cli` binary
/// included), for the platform the tests run on.
fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let host = String::from_utf8(
        Command::new("rustc")
            .arg("-vV")
            .output()
            .expect("rustc runs")
            .stdout,
    )
    .unwrap()
    .lines()
    .find_map(|line| line.strip_prefix("host: ").map(str::to_owned))
    .expect("rustc names its host");
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--all-features",
            "--filter-platform",
            &host,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Every package built to build `root` (normal and build dependencies, not
/// the dev-dependencies of tests and benchmarks).
fn built_dependencies<'a>(root: &'a str, nodes: &HashMap<&'a str, &'a Value>) -> HashSet<&'a str> {
    let mut seen = HashSet::new();
    let mut next = vec![root];
    while let Some(id) = next.pop() {
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let built = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|kind| kind["kind"].is_null() || kind["kind"] == "build");
            let pkg = dep["pkg"].as_str().unwrap();
            if built && seen.insert(pkg) {
                next.push(pkg);
            }
        }
    }
    seen
}

fn version(value: &Value) -> Option<(u64, u64)> {
    let mut parts = value
        .as_str()?
        .split('.')
        .map(|p| p.parse::<u64>().unwrap());
    Some((parts.next()?, parts.next().unwrap_or(0)))
}

fn package_name(package: &Value) -> String {
    format!(
        "{} {}",
        package["name"].as_str().unwrap(),
        package["version"].as_str().unwrap()
    )
}

fn show((major, minor): (u64, u64)) -> String {
    format!("{major}.{minor}")
}
