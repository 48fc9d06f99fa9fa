//! Canonical hashing against its peers and against the SHA-256 floor.
//!
//! Group `canonical_hash` runs realistic Orbit events; the groups
//! `canonical_hash_string_heavy` and `canonical_hash_number_heavy` push the
//! two extremes. Each has the parameters `1KiB`, `64KiB` and `512KiB`, and
//! four functions, measured side by side in one run:
//!
//! * `sha256_only` — SHA-256 of bytes that are already canonical: the floor.
//! * `result_inbox` — this crate's strict canonicalize + hash.
//! * `serde_json_value` — parse to `serde_json::Value`, serialize, hash: what
//!   one would write by hand (and which silently keeps the last duplicate key
//!   and rewrites numbers).
//! * `serde_json_canonicalizer` — the RFC 8785 canonicalizer crate + hash.
//!
//! `cargo run --example bench_report` turns the results into the ratios the
//! targets are stated in.

use std::fmt::Write;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sha2::{Digest, Sha256};

/// Sizes the documents are grown to (just under, never over).
const SIZES: [(&str, usize); 3] = [("1KiB", 1024), ("64KiB", 64 * 1024), ("512KiB", 512 * 1024)];

/// Text that needs escaping and is not ASCII, as real logs and messages are.
const PHRASES: [&str; 6] = [
    "Task finished: 3 files processed, 0 skipped",
    "Verarbeitung abgeschlossen – Größe: 12 MB",
    "处理完成，共计 42 条记录",
    "path=C:\\\\data\\\\input.csv \\\"quoted\\\" value",
    "line one\\nline two\\ttabbed",
    "émoji 😀 and symbols ©®™",
];

fn envelope(result: &str) -> String {
    format!(
        r#"{{"type":"task.succeeded","queue_id":"0123456789abcdef0123456789abcdef","occurred_at":"2026-11-30T16:02:44.123456+08:00","id":"fedcba9876543210fedcba9876543210","task":{{"version":3,"state":"SUCCEEDED","id":"00112233445566778899aabbccddeeff","result":{result}}}}}"#
    )
}

/// A realistic event: a result with nested records mixing text and numbers.
fn realistic_record(i: usize, out: &mut String) {
    let phrase = PHRASES[i % PHRASES.len()];
    write!(
        out,
        r#"{{"seq":{i},"status":"ok","message":"{phrase}","metrics":{{"duration_ms":{},"bytes":{},"ratio":0.{:04},"ledger":123456789012345678901234567{:03}}},"tags":["batch-{}","region-eu"],"owner":{{"name":"Zoë Müller","id":"u-{:08}"}}}}"#,
        i * 17 % 997,
        i * 4099,
        i % 10000,
        i % 1000,
        i % 13,
        i
    )
    .unwrap();
}

fn string_record(i: usize, out: &mut String) {
    write!(
        out,
        r#"{{"line":"{} {} {}"}}"#,
        PHRASES[i % 6],
        PHRASES[(i + 1) % 6],
        PHRASES[(i + 2) % 6]
    )
    .unwrap();
}

fn number_record(i: usize, out: &mut String) {
    write!(
        out,
        "[{i},{}.{:02},-{}e-3,98765432109876543210987654321{},{}]",
        i * 31,
        i % 100,
        i * 7,
        i % 10,
        i as f64 / 3.0
    )
    .unwrap();
}

/// An event whose result holds as many records as fit in `size` bytes.
fn document(size: usize, record: fn(usize, &mut String)) -> Vec<u8> {
    let wrap = |records: &str| envelope(&format!(r#"{{"summary":"done","records":[{records}]}}"#));
    let overhead = wrap("").len();
    let mut records = String::new();
    let mut one = String::new();
    for i in 0.. {
        one.clear();
        if i > 0 {
            one.push(',');
        }
        record(i, &mut one);
        if overhead + records.len() + one.len() > size {
            break;
        }
        records.push_str(&one);
    }
    wrap(&records).into_bytes()
}

fn bench_group(c: &mut Criterion, group_name: &str, record: fn(usize, &mut String)) {
    let mut group = c.benchmark_group(group_name);
    for (label, size) in SIZES {
        let raw = document(size, record);
        let canonical = result_inbox::digest::canonicalize(&raw)
            .expect("benchmark documents are valid")
            .into_bytes();
        group.throughput(Throughput::Bytes(raw.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("sha256_only", label),
            &canonical,
            |b, doc| b.iter(|| Sha256::digest(doc)),
        );
        group.bench_with_input(BenchmarkId::new("result_inbox", label), &raw, |b, doc| {
            b.iter(|| result_inbox::digest::digest(doc).unwrap())
        });
        group.bench_with_input(
            BenchmarkId::new("serde_json_value", label),
            &raw,
            |b, doc| {
                b.iter(|| {
                    let value: serde_json::Value = serde_json::from_slice(doc).unwrap();
                    Sha256::digest(serde_json::to_vec(&value).unwrap())
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("serde_json_canonicalizer", label),
            &raw,
            |b, doc| {
                b.iter(|| {
                    let value: serde_json::Value = serde_json::from_slice(doc).unwrap();
                    Sha256::digest(serde_json_canonicalizer::to_vec(&value).unwrap())
                })
            },
        );
    }
    group.finish();
}

fn canonical_hash(c: &mut Criterion) {
    bench_group(c, "canonical_hash", realistic_record);
    bench_group(c, "canonical_hash_string_heavy", string_record);
    bench_group(c, "canonical_hash_number_heavy", number_record);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = canonical_hash
}
criterion_main!(benches);
