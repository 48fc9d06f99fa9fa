//! Reads criterion's results for `benches/canonical_hash.rs` and prints the
//! ratios its targets are stated in:
//!
//! * `result_inbox` ≥ 0.5× the throughput of `sha256_only` at 64 KiB and 512 KiB;
//! * `result_inbox` ≥ 10× the throughput of `serde_json_canonicalizer` at every size.
//!
//! Run after `cargo bench --bench canonical_hash` (`make bench` does both).
//! Exits 1 if a target is missed, so the miss cannot go unnoticed.

use std::path::Path;

const GROUPS: [&str; 3] = [
    "canonical_hash",
    "canonical_hash_string_heavy",
    "canonical_hash_number_heavy",
];
const SIZES: [&str; 3] = ["1KiB", "64KiB", "512KiB"];

/// Mean time per iteration in nanoseconds, from criterion's estimates.
fn mean_ns(root: &Path, group: &str, function: &str, size: &str) -> Option<f64> {
    let path = root
        .join(group)
        .join(function)
        .join(size)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["mean"]["point_estimate"].as_f64()
}

fn main() {
    let root = Path::new(&std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into()))
        .join("criterion");
    let mut missed = 0;
    println!(
        "{:<30} {:>7} {:>12} {:>12} {:>14} {:>14}",
        "group", "size", "vs_sha256", "target", "vs_canonicalizer", "target"
    );
    for group in GROUPS {
        for size in SIZES {
            let get = |f| mean_ns(&root, group, f, size);
            let (Some(ours), Some(sha), Some(jcs)) = (
                get("result_inbox"),
                get("sha256_only"),
                get("serde_json_canonicalizer"),
            ) else {
                eprintln!("bench_report: no results for {group}/{size}; run `cargo bench --bench canonical_hash` first");
                std::process::exit(2);
            };
            // Same document, so the throughput ratio is the inverse time ratio.
            let vs_sha = sha / ours;
            let vs_jcs = jcs / ours;
            let sha_target = size != "1KiB";
            let sha_ok = !sha_target || vs_sha >= 0.5;
            let jcs_ok = vs_jcs >= 10.0;
            missed += usize::from(!sha_ok) + usize::from(!jcs_ok);
            println!(
                "{group:<30} {size:>7} {vs_sha:>11.2}x {:>12} {vs_jcs:>13.1}x {:>14}",
                if sha_target {
                    if sha_ok {
                        "≥0.5 met"
                    } else {
                        "≥0.5 MISSED"
                    }
                } else {
                    "-"
                },
                if jcs_ok { "≥10 met" } else { "≥10 MISSED" },
            );
        }
    }
    if missed > 0 {
        println!("{missed} target(s) missed");
        std::process::exit(1);
    }
    println!("all targets met");
}
