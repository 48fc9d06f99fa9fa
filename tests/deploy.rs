//! The operator's kit in `deploy/` loads as it is: the alerting rules pass
//! `promtool check rules` and their own `promtool test rules` cases, every
//! alert says how bad it is, names the receiver and queue and points to a
//! runbook section that exists, the dashboard imports as Grafana's JSON
//! model and every query of it is PromQL, and the service unit passes
//! `systemd-analyze verify` with the settings a receiver needs. What the
//! rules and the dashboard name is held to a real scrape in
//! `deploy_metrics.rs`.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use common::deploy::{self, anchors, names, promtool, rules};

#[test]
fn the_alerting_rules_pass_promtool_s_check() {
    let (ok, out) = promtool(
        &deploy::dir().join("prometheus"),
        &["check", "rules", "receiver-rules.yml"],
    );
    assert!(ok, "{out}");
}

#[test]
fn every_alert_fires_in_its_promtool_test_when_it_should_and_not_otherwise() {
    let (ok, out) = promtool(
        &deploy::dir().join("prometheus"),
        &["test", "rules", "receiver-rules.test.yml"],
    );
    assert!(ok, "{out}");
    // Each alert has a case where it fires and one where it must not.
    let tests = std::fs::read_to_string(deploy::rules_tests_file()).unwrap();
    let mut cases: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let lines: Vec<&str> = tests.lines().collect();
    for (n, line) in lines.iter().enumerate() {
        if let Some(alert) = line.trim_start().strip_prefix("alertname:") {
            let expected = lines[n + 1].trim();
            let entry = cases.entry(alert.trim().to_owned()).or_default();
            if expected == "exp_alerts: []" {
                entry.1 += 1;
            } else {
                assert_eq!(expected, "exp_alerts:", "line {}", n + 2);
                entry.0 += 1;
            }
        }
    }
    for rule in rules().iter().filter(|r| r.kind == "alert") {
        let (fires, silent) = cases.get(&rule.name).copied().unwrap_or_default();
        assert!(
            fires > 0 && silent > 0,
            "{}: {fires} cases that fire it, {silent} that must not",
            rule.name
        );
    }
}

#[test]
fn every_alert_has_a_severity_names_receiver_and_queue_and_points_to_its_runbook_section() {
    let operations = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"),
    )
    .unwrap();
    let sections = anchors(&operations);
    let alerts: Vec<_> = rules().into_iter().filter(|r| r.kind == "alert").collect();
    assert!(alerts.len() >= 14, "{alerts:?}");
    for alert in &alerts {
        let name = &alert.name;
        let severity = alert.field("severity").unwrap_or_default();
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "{name}: severity {severity:?}"
        );
        for key in ["summary", "description"] {
            let text = alert.field(key).unwrap_or_default();
            assert!(
                text.contains("{{ $labels.receiver }}") && text.contains("{{ $labels.queue }}"),
                "{name}: its {key} does not name the receiver and the queue: {text:?}"
            );
        }
        let runbook = alert.field("runbook_url").unwrap_or_default();
        let anchor = runbook
            .strip_prefix("docs/operations.md#")
            .unwrap_or_else(|| panic!("{name}: runbook_url {runbook:?}"));
        assert_eq!(
            anchor,
            name.to_lowercase(),
            "{name}: its runbook is its own section"
        );
        assert!(
            sections.contains(anchor),
            "{name}: docs/operations.md has no section #{anchor}"
        );
        // The section says what to do: more than its heading.
        let heading = format!("### {name}\n");
        let body = operations
            .split_once(&heading)
            .map(|(_, rest)| rest.split("\n#").next().unwrap_or_default())
            .unwrap_or_default();
        assert!(
            body.trim().len() > 200,
            "{name}: its section is too short: {body:?}"
        );
    }
}

#[test]
fn the_runbook_anchors_are_read_as_github_makes_them() {
    let sections =
        anchors("## Retention: `receiver prune`\n```\n# not a heading\n```\n### ReceiverDown\n");
    assert_eq!(
        sections,
        ["receiverdown", "retention-receiver-prune"]
            .map(String::from)
            .into()
    );
}

#[test]
fn a_query_names_its_metrics_their_matchers_and_its_grouping_labels() {
    let names = names(
        r#"sum by (job, queue) (rate(receiver_acks_total{result="refused", queue=~"$queue"}[5m]))
           / on (job) group_left (receiver) topk by (job) (1, up offset 5m) > 0.1"#,
    );
    assert_eq!(
        names.selectors,
        vec![
            (
                "receiver_acks_total".to_owned(),
                vec![
                    ("result".to_owned(), "=".to_owned(), "refused".to_owned()),
                    ("queue".to_owned(), "=~".to_owned(), "$queue".to_owned()),
                ]
            ),
            ("up".to_owned(), vec![]),
        ]
    );
    assert_eq!(
        names.grouping,
        ["job", "queue", "receiver"].map(String::from).into()
    );
}

#[test]
fn the_dashboard_imports_as_it_is_with_a_data_source_and_receiver_and_queue_variables() {
    let dashboard = deploy::dashboard();
    let inputs = dashboard["__inputs"].as_array().expect("__inputs");
    assert!(
        inputs
            .iter()
            .any(|i| i["type"] == "datasource" && i["pluginId"] == "prometheus"),
        "{inputs:?}"
    );
    assert!(
        dashboard["id"].is_null(),
        "an imported dashboard gets its own id"
    );
    assert!(dashboard["uid"].is_string() && dashboard["title"].is_string());
    let variables: BTreeMap<&str, &serde_json::Value> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v))
        .collect();
    assert_eq!(
        variables.keys().copied().collect::<Vec<_>>(),
        ["datasource", "queue", "receiver"]
    );
    assert_eq!(variables["datasource"]["type"], "datasource");
    assert_eq!(variables["datasource"]["query"], "prometheus");
    for name in ["receiver", "queue"] {
        let variable = variables[name];
        assert_eq!(variable["type"], "query", "{name}");
        assert_eq!(variable["datasource"]["uid"], "${datasource}", "{name}");
        assert_eq!(variable["includeAll"], true, "{name}");
    }
    let mut ids = BTreeSet::new();
    let mut titles = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap();
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "{title}: id twice"
        );
        for key in ["x", "y", "w", "h"] {
            assert!(panel["gridPos"][key].is_u64(), "{title}: gridPos.{key}");
        }
        if panel["type"] == "row" {
            continue;
        }
        titles.insert(title);
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}");
        for target in targets {
            let expr = target["expr"].as_str().unwrap();
            assert!(
                expr.contains(r#"receiver=~"$receiver""#) && expr.contains(r#"queue=~"$queue""#),
                "{title}: {expr} does not follow the receiver and queue variables"
            );
        }
    }
    for wanted in [
        "Throughput by class",
        "Apply latency",
        "Event age at COMMIT",
        "Waiting at the source",
        "In flight and held",
        "Breaker, database, stream",
        "Transaction retries by cause",
        "Stream errors and reconnects",
        "ACKs by result",
        "Dropped trace spans",
        "Batch sizes",
        "Pending effects",
        "Oldest pending effect",
        "Dead effects",
    ] {
        assert!(titles.contains(wanted), "no panel {wanted:?} in {titles:?}");
    }
}

#[test]
fn every_dashboard_query_parses_as_promql() {
    let queries = deploy::dashboard_queries();
    assert!(queries.len() > 20, "{queries:?}");
    let (ok, out) = deploy::check_queries(&queries);
    assert!(ok, "{out}");
}

#[test]
fn the_service_unit_passes_systemd_analyze_and_runs_consume_as_a_notify_service() {
    let unit = std::fs::read_to_string(deploy::unit_file()).unwrap();
    let settings: BTreeMap<&str, Vec<&str>> = unit
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .fold(BTreeMap::new(), |mut all, (k, v)| {
            all.entry(k).or_default().push(v);
            all
        });
    let one = |key: &str| settings.get(key).map(|v| v[0]).unwrap_or_default();
    assert_eq!(one("Type"), "notify");
    assert!(one("ExecStart").ends_with("receiver consume"));
    assert!(one("EnvironmentFile").starts_with("/etc/receiver/"));
    assert_eq!(one("Restart"), "on-failure");
    assert_eq!(one("RestartPreventExitStatus"), "2");
    let stop: u64 = one("TimeoutStopSec").trim_end_matches('s').parse().unwrap();
    assert!(stop > 10, "the stop timeout must outlast the 10 s drain");
    assert_eq!(one("NoNewPrivileges"), "yes");
    assert_eq!(one("ProtectSystem"), "strict");
    assert!(!one("StateDirectory").is_empty());
    // The environment file names secrets by path, never by value.
    let env = std::fs::read_to_string(deploy::dir().join("systemd/receiver.env")).unwrap();
    for line in env.lines().filter(|l| !l.trim_start().starts_with('#')) {
        if let Some((key, value)) = line.split_once('=') {
            assert!(
                ![
                    "ORBIT_RECEIVER_DSN",
                    "ORBIT_TOKEN",
                    "NATS_TOKEN",
                    "RECEIVER_PRUNE_DSN"
                ]
                .contains(&key)
                    && !value.contains('@'),
                "a secret's value in the environment file: {line}"
            );
        }
    }

    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!(
            "skipped: systemd-analyze is not installed (make systemd-analyze could not install it)"
        );
        return;
    }
    // As installed: the receiver where ExecStart says, an instance's name.
    let dir = std::env::temp_dir().join(format!("unit-{}", common::random_hex(4)));
    std::fs::create_dir_all(&dir).unwrap();
    let receiver = common::orbit::receiver_path();
    let installed = unit.replace("/usr/local/bin/receiver", receiver.to_str().unwrap());
    let path = dir.join("receiver@task-result-view.service");
    std::fs::write(&path, installed).unwrap();
    let verify = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&verify.stdout).into_owned()
        + &String::from_utf8_lossy(&verify.stderr);
    // A setting systemd cannot read is a warning, exit code 0: none.
    assert!(verify.status.success() && said.trim().is_empty(), "{said}");
    // Sandboxed: systemd's own exposure score at most 2.0 of 10 ("OK").
    let security = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--threshold=20"])
        .arg(&path)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&security.stdout).into_owned();
    assert!(
        security.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&security.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
