//! The `receiver` command line: `digest` and configuration errors.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The `receiver` binary next to the test binaries (built with feature `cli`).
fn receiver_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("receiver");
    assert!(
        path.exists(),
        "{} is missing: run `make test`",
        path.display()
    );
    path
}

fn receiver(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(receiver_bin())
        .args(args)
        .env_remove("ORBIT_RECEIVER_DSN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A writer that finds the pipe closed early is fine: the command may
    // stop reading once it knows the answer.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn digest_prints_the_sha256_of_the_canonical_form() {
    let out = receiver(&["digest", "-"], br#" { "b" : 1, "a" : [true, null] } "#);
    assert!(out.status.success());
    let expected = result_inbox::digest::digest(br#"{"a":[true,null],"b":1}"#).unwrap();
    assert_eq!(text(&out.stdout), format!("sha256={expected}\n"));
    assert_eq!(text(&out.stdout).trim().len(), "sha256=".len() + 64);
}

#[test]
fn digest_reads_a_file_and_ignores_key_order() {
    let dir = std::env::temp_dir().join(format!("receiver-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let a = dir.join("a.json");
    let b = dir.join("b.json");
    std::fs::write(&a, r#"{"x":1,"y":"é"}"#).unwrap();
    std::fs::write(&b, "{\n  \"y\": \"\\u00e9\",\n  \"x\": 1\n}\n").unwrap();
    let da = receiver(&["digest", a.to_str().unwrap()], b"");
    let db = receiver(&["digest", b.to_str().unwrap()], b"");
    std::fs::remove_dir_all(&dir).ok();
    assert!(da.status.success() && db.status.success());
    assert_eq!(da.stdout, db.stdout);
}

#[test]
fn digest_of_an_invalid_document_exits_3_with_one_line_naming_the_problem() {
    for (input, problem) in [
        (&br#"{"a":1,"a":2}"#[..], "duplicate"),
        (b"{\"a\":", "invalid JSON"),
        (b"\xef\xbb\xbf{}", "byte order mark"),
        (b"\"\xff\"", "UTF-8"),
    ] {
        let out = receiver(&["digest"], input);
        assert_eq!(out.status.code(), Some(3), "{input:?}");
        assert!(out.stdout.is_empty());
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.to_lowercase().contains(&problem.to_lowercase()),
            "{err}"
        );
    }
}

#[test]
fn digest_of_an_oversized_document_is_refused_without_reading_it_all() {
    let mut big = vec![b' '; 2 * 1024 * 1024];
    big[0] = b'1';
    let out = receiver(&["digest"], &big);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stderr).contains("larger than 524288 bytes (512 KiB)"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn help_shows_an_unset_variable_without_a_value_and_a_set_one_with_its_value() {
    let help = |queue: Option<&str>| {
        let mut command = Command::new(receiver_bin());
        command
            .args(["consume", "--help"])
            .env_remove("ORBIT_QUEUE_ID");
        if let Some(queue) = queue {
            command.env("ORBIT_QUEUE_ID", queue);
        }
        text(&command.output().unwrap().stdout)
    };
    let unset = help(None);
    assert!(unset.contains("[env: ORBIT_QUEUE_ID]"), "{unset}");
    assert!(!unset.contains("ORBIT_QUEUE_ID=]"), "{unset}");
    let set = help(Some("0123456789abcdef0123456789abcdef"));
    assert!(
        set.contains("[env: ORBIT_QUEUE_ID=0123456789abcdef0123456789abcdef]"),
        "{set}"
    );
}

#[test]
fn digest_of_a_directory_names_it_and_exits_2() {
    let dir = std::env::temp_dir();
    let out = receiver(&["digest", dir.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(&format!("receiver: cannot read {}: ", dir.display())),
        "{stderr}"
    );
}

#[test]
fn digest_of_a_missing_file_exits_2() {
    let out = receiver(&["digest", "/nonexistent/event.json"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr).lines().count(), 1);
}

#[test]
fn init_without_a_database_in_the_dsn_fails_before_connecting() {
    // Port 1 on loopback: a connection attempt would fail differently.
    let out = Command::new(receiver_bin())
        .arg("init")
        .env("ORBIT_RECEIVER_DSN", "mysql://root:sentinel-pw@127.0.0.1:1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("must name the receiver's database"), "{err}");
    assert!(!err.contains("sentinel-pw"));
}

#[test]
fn an_unknown_subcommand_is_a_usage_error_in_one_line() {
    let out = receiver(&["frobnicate"], b"");
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("frobnicate"), "{err}");
}

#[test]
fn a_mistyped_subcommand_keeps_clap_s_suggestion_and_points_to_the_help() {
    let out = receiver(&["cosume"], b"");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err,
        "receiver: unrecognized subcommand 'cosume'; tip: a similar subcommand exists: 'consume' (see `receiver --help`)\n"
    );
    let nested = text(&receiver(&["inspect", "evnt"], b"").stderr);
    assert!(
        nested.contains("'event'") && nested.contains("(see `receiver inspect --help`)"),
        "{nested}"
    );
}

/// `receiver check` with `variable` set, the other arguments given.
fn check_with(variable: (&str, &str), args: &[&str]) -> Output {
    Command::new(receiver_bin())
        .arg("check")
        .args(args)
        .env_remove("RECEIVER_SOURCE")
        .env_remove("NATS_REQUIRE_TLS")
        .env_remove("RECEIVER_LOG_FORMAT")
        .env_remove("ORBIT_RECEIVER_DSN")
        .env(variable.0, variable.1)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_refused_value_from_a_variable_names_the_variable_and_the_accepted_values() {
    let out = check_with(("RECEIVER_SOURCE", "kafka"), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "receiver: RECEIVER_SOURCE: invalid value 'kafka'; possible values: orbit, nats, rabbitmq (see `receiver check --help`)\n"
    );
}

#[test]
fn a_refused_value_from_a_flag_names_the_flag_even_when_the_variable_is_set() {
    let out = check_with(("RECEIVER_SOURCE", "nats"), &["--source", "kafka"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.starts_with(
            "receiver: invalid value 'kafka' for '--source <SOURCE>'; possible values: orbit, nats"
        ),
        "{err}"
    );
    assert!(!err.contains("RECEIVER_SOURCE"), "{err}");
}

#[test]
fn every_enumerated_variable_is_read_in_any_case() {
    for variable in [
        ("RECEIVER_SOURCE", "NATS"),
        ("NATS_REQUIRE_TLS", "YES"),
        ("NATS_REQUIRE_TLS", "0"),
        ("RECEIVER_LOG_FORMAT", "Text"),
    ] {
        let err = text(&check_with(variable, &[]).stderr);
        // Past the arguments and the log set-up, the first missing setting
        // stops the check.
        assert!(
            err.starts_with("receiver: ORBIT_RECEIVER_DSN is not set"),
            "{variable:?}: {err}"
        );
    }
    let json = text(&check_with(("RECEIVER_LOG_FORMAT", "JSON"), &[]).stderr);
    assert!(json.starts_with('{'), "{json}");
    let refused = text(&check_with(("NATS_REQUIRE_TLS", "maybe"), &[]).stderr);
    assert!(
        refused.starts_with("receiver: NATS_REQUIRE_TLS: invalid value 'maybe'"),
        "{refused}"
    );
}

#[test]
fn with_json_logs_the_error_a_command_ends_with_is_a_json_line_whatever_the_filter() {
    for args in [&["check"][..], &["cosume"][..]] {
        let out = Command::new(receiver_bin())
            .args(args)
            .env("RECEIVER_LOG_FORMAT", "json")
            .env("RECEIVER_LOG", "off")
            .env_remove("ORBIT_RECEIVER_DSN")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        let line: serde_json::Value = serde_json::from_str(&err).unwrap();
        assert_eq!(line["level"], "ERROR", "{err}");
        assert_eq!(line["exit_code"], 2, "{err}");
        assert_eq!(line["target"], "receiver", "{err}");
        assert!(line["timestamp"].is_string(), "{err}");
        let message = line["message"].as_str().unwrap();
        assert!(
            message.contains("ORBIT_RECEIVER_DSN is not set") || message.contains("'cosume'"),
            "{err}"
        );
    }
}

#[test]
fn inspect_reads_dsn_after_its_subcommand_as_before_it() {
    let id = "0123456789abcdef0123456789abcdef";
    for args in [
        &[
            "inspect",
            "event",
            id,
            "--dsn",
            "mysql://u@127.0.0.1:1/receiver",
        ][..],
        &[
            "inspect",
            "--dsn",
            "mysql://u@127.0.0.1:1/receiver",
            "task",
            id,
        ][..],
        &[
            "inspect",
            "task",
            "--dsn",
            "mysql://u@127.0.0.1:1/receiver",
            id,
        ][..],
    ] {
        let out = receiver(args, b"");
        let err = text(&out.stderr);
        // It got as far as connecting to the server the DSN names.
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("connection refused"), "{args:?}: {err}");
    }
}

#[test]
fn check_help_documents_its_three_exit_codes() {
    let out = Command::new(receiver_bin())
        .args(["check", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = text(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for code in [
        "exit 0 only if all pass",
        "1 if one fails",
        "2 if a setting cannot be read",
    ] {
        assert!(help.contains(code), "{code:?} missing from:\n{help}");
    }
}

/// Whether `line` says the same word twice in a row (`ORBIT_URL: ORBIT_URL
/// must`), counting a failed check's name (`check=database FAIL database:`).
fn doubled_word(line: &str) -> Option<String> {
    let words: Vec<String> = line
        .split(|c: char| c.is_whitespace() || c == '=')
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric() && c != '_')
                .to_lowercase()
        })
        .filter(|w| !w.is_empty() && w != "fail")
        .collect();
    words
        .windows(2)
        .find(|pair| pair[0] == pair[1])
        .map(|pair| pair[0].clone())
}

/// `receiver check` with every setting read and valid, Orbit and the
/// database on a port nothing listens on, traces off unless set.
fn check_against_nothing() -> Command {
    let mut command = Command::new(receiver_bin());
    command
        .arg("check")
        .env("ORBIT_URL", "http://127.0.0.1:1")
        .env("ORBIT_TOKEN", "t")
        .env("ORBIT_QUEUE_ID", "0123456789abcdef0123456789abcdef")
        .env("ORBIT_SUBSCRIPTION_ID", "fedcba9876543210fedcba9876543210")
        .env("ORBIT_RECEIVER_DSN", "mysql://root@127.0.0.1:1/receiver")
        .env_remove("ORBIT_CREDENTIALS_FILE")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    command
}

#[test]
fn no_error_or_check_line_says_a_word_twice_in_a_row() {
    let unreachable = check_against_nothing().output().unwrap();
    let printed = text(&unreachable.stdout);
    assert!(
        printed.starts_with("check=database FAIL unreachable: "),
        "{printed}"
    );
    let mut lines: Vec<String> = printed.lines().map(str::to_owned).collect();
    for broken in [
        ("ORBIT_URL", "ftp://orbit.example"),
        ("ORBIT_URL", "http://127.0.0.1:1/orbit"),
        ("ORBIT_QUEUE_ID", "inbox-demo"),
        ("ORBIT_SUBSCRIPTION_ID", "not-32-hex"),
        ("RECEIVER_NAME", "-starts-with-dash"),
        ("ORBIT_RECEIVER_DSN", "mysql://root@127.0.0.1:1"),
    ] {
        let err = text(&consume_with(broken).stderr);
        assert_eq!(err.matches(broken.0).count(), 1, "{err}");
        lines.push(err);
    }
    for line in lines {
        assert_eq!(doubled_word(&line), None, "{line}");
    }
}

#[test]
fn receiver_help_lists_every_command_in_one_short_line_and_its_own_help_has_the_paragraph() {
    let out = Command::new(receiver_bin()).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = text(&out.stdout);
    let commands: Vec<&str> = help
        .split("Commands:\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with("  "))
        .collect();
    let names: Vec<&str> = commands
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    for name in [
        "init",
        "demo",
        "consume",
        "check",
        "subscribe",
        "failures",
        "replay",
        "verify",
        "stats",
        "prune",
        "inspect",
        "outbox",
        "relay",
        "digest",
    ] {
        assert!(names.contains(&name), "{name} missing from:\n{help}");
    }
    for line in &commands {
        assert!(line.len() <= 80, "longer than a terminal line: {line}");
    }
    let prune = text(
        &Command::new(receiver_bin())
            .args(["prune", "--help"])
            .output()
            .unwrap()
            .stdout,
    );
    assert!(prune.contains("minimum retention"), "{prune}");
}

#[test]
fn check_names_the_traces_endpoint_without_its_credentials() {
    let out = check_against_nothing()
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://collector:sentinel-otlp-pw@127.0.0.1:1",
        )
        .output()
        .unwrap();
    let printed = text(&out.stdout);
    assert!(
        printed.ends_with("traces=otlp endpoint=http://<redacted>@127.0.0.1:1/v1/traces\n"),
        "{printed}"
    );
    assert!(
        !printed.contains("sentinel-otlp-pw") && !text(&out.stderr).contains("sentinel-otlp-pw")
    );
    let without = check_against_nothing().output().unwrap();
    assert!(!text(&without.stdout).contains("traces="));
}

#[test]
fn help_lists_every_variable() {
    let out = Command::new(receiver_bin())
        .args(["consume", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = text(&out.stdout);
    for var in [
        "ORBIT_URL",
        "ORBIT_CREDENTIALS_FILE",
        "ORBIT_TOKEN",
        "ORBIT_QUEUE_ID",
        "ORBIT_RECEIVER_DSN",
        "RECEIVER_NAME",
        "ORBIT_SUBSCRIPTION_ID",
        "RECEIVER_METRICS_ADDR",
        "RECEIVER_PREFETCH",
    ] {
        assert!(help.contains(var), "{var} missing from --help");
    }
}

/// `receiver consume` with a valid configuration except for `broken`.
fn consume_with(broken: (&str, &str)) -> Output {
    let dir = std::env::temp_dir().join(format!("receiver-cli-creds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let creds = dir.join("creds.json");
    std::fs::write(
        &creds,
        r#"{"orbit_url":"http://127.0.0.1:1","token":"t","queue_id":"0123456789abcdef0123456789abcdef"}"#,
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut cmd = Command::new(receiver_bin());
    cmd.arg("consume")
        .env("ORBIT_CREDENTIALS_FILE", &creds)
        .env("ORBIT_SUBSCRIPTION_ID", "fedcba9876543210fedcba9876543210")
        .env("ORBIT_RECEIVER_DSN", "mysql://root@127.0.0.1:1/receiver")
        .env("RECEIVER_NAME", "task-result-view")
        .env_remove("ORBIT_URL")
        .env_remove("ORBIT_TOKEN")
        .env_remove("ORBIT_QUEUE_ID");
    cmd.env(broken.0, broken.1);
    cmd.output().unwrap()
}

#[test]
fn each_configuration_error_exits_2_with_one_line_naming_the_variable() {
    for (broken, names) in [
        (("RECEIVER_NAME", "-starts-with-dash"), "RECEIVER_NAME"),
        (("RECEIVER_NAME", &"x".repeat(65)[..]), "RECEIVER_NAME"),
        (
            ("ORBIT_RECEIVER_DSN", "mysql://root@127.0.0.1:1"),
            "ORBIT_RECEIVER_DSN",
        ),
        (
            ("ORBIT_CREDENTIALS_FILE", "/nonexistent/creds.json"),
            "ORBIT_CREDENTIALS_FILE",
        ),
        (
            ("ORBIT_SUBSCRIPTION_ID", "not-32-hex"),
            "ORBIT_SUBSCRIPTION_ID",
        ),
        (("ORBIT_QUEUE_ID", "inbox-demo"), "ORBIT_QUEUE_ID"),
        (("ORBIT_URL", "ftp://orbit.example"), "ORBIT_URL"),
        (
            ("RECEIVER_PREFETCH", "65"),
            "RECEIVER_PREFETCH: invalid value '65'",
        ),
        (
            ("RECEIVER_PREFETCH", "-1"),
            "RECEIVER_PREFETCH: invalid value '-1'",
        ),
    ] {
        let out = consume_with(broken);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{broken:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{broken:?}: {err}");
        assert!(err.contains(names), "{broken:?}: {err}");
    }
}

#[test]
fn a_bad_relay_setting_exits_2_with_one_line_naming_its_variable_for_consume_and_relay() {
    let dir = std::env::temp_dir().join(format!("receiver-cli-relay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("notify.secret");
    std::fs::write(&secret, "whsec_dGhlIGVuZHBvaW50IGlzIGRvd24=").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let notify = [
        ("RECEIVER_NOTIFY_URL", "http://127.0.0.1:1/hooks"),
        ("RECEIVER_NOTIFY_SECRET_FILE", secret.to_str().unwrap()),
    ];
    for (broken, names) in [
        (
            vec![("RECEIVER_RELAY_LEASE", "0s")],
            "RECEIVER_RELAY_LEASE: invalid value '0s': must be more than zero",
        ),
        (
            vec![("RECEIVER_RELAY_POLL_INTERVAL", "1")],
            "RECEIVER_RELAY_POLL_INTERVAL: invalid value '1': \"1\" has no unit",
        ),
        (
            vec![("RECEIVER_RELAY_CONCURRENCY", "0")],
            "RECEIVER_RELAY_CONCURRENCY: invalid value '0'",
        ),
        (
            vec![("RECEIVER_RELAY_MAX_ATTEMPTS", "many")],
            "RECEIVER_RELAY_MAX_ATTEMPTS: invalid value 'many'",
        ),
        (
            vec![("RECEIVER_NOTIFY_TIMEOUT", "-1s")],
            "RECEIVER_NOTIFY_TIMEOUT: invalid value '-1s'",
        ),
        (
            vec![("RECEIVER_RELAY_LEASE", "5s")],
            "RECEIVER_RELAY_LEASE: 5s must be longer than RECEIVER_NOTIFY_TIMEOUT (10s)",
        ),
        (
            vec![("RECEIVER_RELAY_LEASE", "2s"), ("RECEIVER_NOTIFY_TIMEOUT", "1500ms")],
            "",
        ),
        (
            vec![
                ("RECEIVER_RELAY_INITIAL_BACKOFF", "1h"),
                ("RECEIVER_RELAY_MAX_BACKOFF", "10m"),
            ],
            "RECEIVER_RELAY_INITIAL_BACKOFF: 3600s is longer than RECEIVER_RELAY_MAX_BACKOFF (600s)",
        ),
    ] {
        for command in ["consume", "relay"] {
            let mut child = Command::new(receiver_bin())
                .arg(command)
                .env("ORBIT_URL", "http://127.0.0.1:1")
                .env("ORBIT_TOKEN", "t")
                .env("ORBIT_QUEUE_ID", "0123456789abcdef0123456789abcdef")
                .env("ORBIT_SUBSCRIPTION_ID", "fedcba9876543210fedcba9876543210")
                .env("ORBIT_RECEIVER_DSN", "mysql://root@127.0.0.1:1/receiver")
                .env_remove("RECEIVER_LOG_FORMAT")
                .envs(notify)
                .envs(broken.iter().copied())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            // A configuration it takes goes on to the database, which
            // nothing answers: it waits for it until SIGTERM. One it
            // refuses ends at once.
            let within = if names.is_empty() { 700 } else { 10_000 };
            let deadline =
                std::time::Instant::now() + std::time::Duration::from_millis(within);
            while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let waiting = child.try_wait().unwrap().is_none();
            if waiting {
                crate::common::sigterm(child.id());
            }
            let out = child.wait_with_output().unwrap();
            let err = text(&out.stderr);
            if names.is_empty() {
                assert!(waiting, "{command} {broken:?}: {err}");
                assert!(out.status.success(), "{command} {broken:?}: {err}");
                continue;
            }
            assert!(!waiting, "{command} {broken:?} was taken: {err}");
            assert_eq!(out.status.code(), Some(2), "{command} {broken:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{command} {broken:?}: {err}");
            assert!(err.contains(names), "{command} {broken:?}: {err}");
        }
    }
    let help = text(
        &Command::new(receiver_bin())
            .args(["relay", "--help"])
            .output()
            .unwrap()
            .stdout,
    );
    for variable in [
        "RECEIVER_NOTIFY_TIMEOUT",
        "RECEIVER_RELAY_CONCURRENCY",
        "RECEIVER_RELAY_POLL_INTERVAL",
        "RECEIVER_RELAY_LEASE",
        "RECEIVER_RELAY_INITIAL_BACKOFF",
        "RECEIVER_RELAY_MAX_BACKOFF",
        "RECEIVER_RELAY_MAX_ATTEMPTS",
        "RECEIVER_RELAY_MAX_AGE",
        "RECEIVER_RELAY_GONE_PAUSE",
    ] {
        assert!(
            help.contains(variable),
            "{variable} missing from relay --help"
        );
    }
}

#[test]
fn a_credentials_file_readable_by_others_is_refused() {
    let dir = std::env::temp_dir().join(format!("receiver-cli-open-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let creds = dir.join("creds.json");
    std::fs::write(
        &creds,
        r#"{"token":"t","queue_id":"0123456789abcdef0123456789abcdef"}"#,
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = consume_with(("ORBIT_CREDENTIALS_FILE", creds.to_str().unwrap()));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("chmod 600"), "{err}");
}

#[test]
fn a_missing_dsn_or_subscription_is_named_with_its_variable() {
    let out = receiver(&["init"], b"");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("ORBIT_RECEIVER_DSN is not set"), "{err}");

    let mut cmd = Command::new(receiver_bin());
    let out = cmd
        .arg("consume")
        .env("ORBIT_RECEIVER_DSN", "mysql://root@127.0.0.1:1/receiver")
        .env_remove("ORBIT_SUBSCRIPTION_ID")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("ORBIT_SUBSCRIPTION_ID is not set"), "{err}");
}

#[test]
fn an_invalid_log_filter_or_format_is_a_configuration_error_not_a_silent_default() {
    for (variable, value) in [
        ("RECEIVER_LOG", "result_inbox=loud"),
        ("RUST_LOG", "result_inbox=loud"),
        ("RECEIVER_LOG_FORMAT", "xml"),
    ] {
        let out = Command::new(receiver_bin())
            .args(["digest", "-"])
            .env_remove("RECEIVER_LOG")
            .env_remove("RUST_LOG")
            .env(variable, value)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{variable}={value}: {err}");
        assert!(err.starts_with(&format!("receiver: {variable}: ")), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn a_filter_the_readme_calls_unreadable_exits_2_and_one_without_the_receiver_s_lines_says_so() {
    let run = |filter: &str| {
        Command::new(receiver_bin())
            .arg("consume")
            .env_remove("RECEIVER_LOG")
            .env("RUST_LOG", filter)
            .env_remove("ORBIT_RECEIVER_DSN")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for (unreadable, part) in [
        ("debugg", "\"debugg\""),
        ("info,foo bar", "\"foo bar\""),
        ("info,receiver=loud", "\"receiver=loud\""),
        (
            "info,receiver[process{event=e}]=debug",
            "\"receiver[process{event=e}]=debug\" filters by span",
        ),
    ] {
        let out = run(unreadable);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{unreadable}: {err}");
        assert!(
            err.starts_with("receiver: RUST_LOG: invalid log filter: "),
            "{err}"
        );
        assert!(err.contains(part), "{err}");
    }
    let quiet = text(&run("warn").stderr);
    assert_eq!(
        quiet
            .matches("leaves out the receiver's own info lines")
            .count(),
        1,
        "{quiet}"
    );
    let own = text(&run("warn,receiver=info,result_inbox=info").stderr);
    assert!(!own.contains("leaves out"), "{own}");
    // A space after a comma, as people write lists: read as without it.
    let spaced = text(&run("warn, receiver=info, result_inbox=info").stderr);
    assert!(!spaced.contains("invalid log filter"), "{spaced}");
    assert!(!spaced.contains("leaves out"), "{spaced}");
}

#[test]
fn a_nats_address_that_cannot_be_read_is_a_configuration_error_not_waited_for() {
    for url in ["garbage", "http://127.0.0.1:4222", "nats://127.0.0.1:port"] {
        let mut child = Command::new(receiver_bin())
            .args(["consume", "--source", "nats"])
            .env("NATS_URL", url)
            .env("NATS_STREAM", "S")
            .env("NATS_CONSUMER", "C")
            .env("ORBIT_QUEUE_ID", "0123456789abcdef0123456789abcdef")
            .env("ORBIT_RECEIVER_DSN", "mysql://root@127.0.0.1:1/receiver")
            .env_remove("NATS_TOKEN")
            .env_remove("NATS_CREDS_FILE")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("{url}: still waiting after 10 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{url}: {err}");
        assert!(
            err.contains("NATS_URL")
                && (err.contains("not a server address") || err.contains("the scheme must be")),
            "{url}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{url}: {err}");
    }
}

#[test]
fn an_empty_receiver_log_counts_as_unset_so_rust_log_applies() {
    let out = Command::new(receiver_bin())
        .args(["digest", "-"])
        .env("RECEIVER_LOG", "")
        .env("RUST_LOG", "result_inbox=loud")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.starts_with("receiver: RUST_LOG: "), "{err}");
}

#[test]
fn a_bad_metrics_address_is_a_configuration_error() {
    let out = consume_with(("RECEIVER_METRICS_ADDR", "not-an-address"));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("RECEIVER_METRICS_ADDR"), "{err}");
}

#[test]
fn each_operator_tool_lists_its_variables_in_help() {
    for (command, variables) in [
        (
            &["subscribe"][..],
            &[
                "ORBIT_URL",
                "ORBIT_CREDENTIALS_FILE",
                "ORBIT_TOKEN",
                "ORBIT_QUEUE_ID",
                "ORBIT_CA_FILE",
            ][..],
        ),
        (&["verify"][..], &["ORBIT_RECEIVER_DSN"][..]),
        (&["stats"][..], &["ORBIT_RECEIVER_DSN"][..]),
        (&["inspect"][..], &["ORBIT_RECEIVER_DSN"][..]),
        (
            &["prune"][..],
            &[
                "RECEIVER_PRUNE_DSN",
                "RECEIVER_NAME",
                "ORBIT_QUEUE_ID",
                "ORBIT_CREDENTIALS_FILE",
                "RECEIVER_PRUNE_MIN_RETENTION",
            ][..],
        ),
        (
            &["check"][..],
            &[
                "ORBIT_RECEIVER_DSN",
                "ORBIT_SUBSCRIPTION_ID",
                "ORBIT_CREDENTIALS_FILE",
                "RECEIVER_PRUNE_DSN",
            ][..],
        ),
    ] {
        let out = Command::new(receiver_bin())
            .args(command)
            .arg("--help")
            .output()
            .unwrap();
        assert!(out.status.success(), "{command:?}");
        let help = text(&out.stdout);
        for var in variables {
            assert!(help.contains(var), "{var} missing from {command:?} --help");
        }
    }
}

#[test]
fn prune_without_its_account_or_with_a_bad_window_is_a_configuration_error_naming_it() {
    for (args, env, says) in [
        (
            &["prune", "--older-than", "30d"][..],
            None,
            "RECEIVER_PRUNE_DSN is not set",
        ),
        (
            &["prune", "--older-than", "30"][..],
            Some("mysql://u:p@127.0.0.1:1/db"),
            "has no unit",
        ),
        (
            &["prune", "--older-than", "30days"][..],
            Some("mysql://u:p@127.0.0.1:1/db"),
            r#""days" is not a unit; a whole number and one of ms, s, m, h, d"#,
        ),
        (
            &["prune", "--older-than", "1w"][..],
            Some("mysql://u:p@127.0.0.1:1/db"),
            "(a week is 7d)",
        ),
        (
            &["prune", "--older-than", "30d"][..],
            Some("mysql://u:p@127.0.0.1:1/db"),
            "ORBIT_QUEUE_ID is not set",
        ),
    ] {
        let mut command = Command::new(receiver_bin());
        command
            .args(args)
            .env_remove("RECEIVER_PRUNE_DSN")
            .env_remove("ORBIT_QUEUE_ID")
            .env_remove("ORBIT_CREDENTIALS_FILE");
        if let Some(dsn) = env {
            command.env("RECEIVER_PRUNE_DSN", dsn);
        }
        let out = command.output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains(":p@"), "the password is never printed: {err}");
    }
}

#[test]
fn a_misspelled_dsn_option_is_refused_by_every_command_that_reads_a_dsn_and_never_falls_back_to_plaintext(
) {
    // Port 1 on loopback: a command that connected would fail differently.
    let misspelled = "mysql://root:sentinel-pw@127.0.0.1:1/receiver?ssl_mode=VERIFY_IDENTITY";
    let correct = "mysql://root@127.0.0.1:1/receiver";
    let commands: [(&[&str], &str, &str); 9] = [
        (&["init"], "ORBIT_RECEIVER_DSN", misspelled),
        (&["check"], "ORBIT_RECEIVER_DSN", misspelled),
        (&["consume"], "ORBIT_RECEIVER_DSN", misspelled),
        (&["demo"], "ORBIT_RECEIVER_DSN", misspelled),
        (&["verify"], "ORBIT_RECEIVER_DSN", misspelled),
        (&["stats"], "ORBIT_RECEIVER_DSN", misspelled),
        (
            &["inspect", "task", "0123456789abcdef0123456789abcdef"],
            "ORBIT_RECEIVER_DSN",
            misspelled,
        ),
        (
            &["prune", "--older-than", "30d"],
            "RECEIVER_PRUNE_DSN",
            misspelled,
        ),
        (&["check", "--prune"], "RECEIVER_PRUNE_DSN", misspelled),
    ];
    for (args, variable, dsn) in commands {
        let out = Command::new(receiver_bin())
            .args(args)
            .env("ORBIT_RECEIVER_DSN", correct)
            .env(variable, dsn)
            .env("ORBIT_QUEUE_ID", "0123456789abcdef0123456789abcdef")
            .env("ORBIT_SUBSCRIPTION_ID", "fedcba9876543210fedcba9876543210")
            .env("ORBIT_URL", "http://127.0.0.1:1")
            .env("ORBIT_TOKEN", "t")
            .env_remove("ORBIT_CREDENTIALS_FILE")
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {variable}: {err}");
        assert!(
            err.contains("`ssl_mode`") && err.contains("ssl-mode"),
            "{args:?} {variable}: {err}"
        );
        assert!(!err.contains("sentinel-pw"), "{err}");
    }
}

/// The help of `receiver` and of every command and subcommand.
fn every_help() -> Vec<(String, String)> {
    let commands: &[&[&str]] = &[
        &[],
        &["init"],
        &["demo"],
        &["consume"],
        &["check"],
        &["subscribe"],
        &["failures"],
        &["replay"],
        &["verify"],
        &["stats"],
        &["prune"],
        &["inspect"],
        &["inspect", "event"],
        &["inspect", "task"],
        &["digest"],
    ];
    commands
        .iter()
        .map(|command| {
            let out = Command::new(receiver_bin())
                .args(*command)
                .arg("--help")
                .env_remove("ORBIT_RECEIVER_DSN")
                .env_remove("RECEIVER_PRUNE_DSN")
                .output()
                .unwrap();
            assert!(out.status.success(), "{command:?}");
            (format!("receiver {}", command.join(" ")), text(&out.stdout))
        })
        .collect()
}

#[test]
fn every_help_that_names_an_engine_names_both() {
    let helps = every_help();
    assert!(helps[0].1.contains("MySQL or PostgreSQL"), "{}", helps[0].1);
    for (command, help) in &helps {
        let lower = help.to_lowercase();
        if lower.contains("mysql") {
            assert!(
                lower.contains("postgres"),
                "{command} names MySQL alone:\n{help}"
            );
        }
        if help.contains("schema.sql") {
            assert!(help.contains("schema.postgres.sql"), "{command}:\n{help}");
        }
    }
}

#[test]
fn every_dsn_option_shows_a_postgres_example_beside_the_mysql_one() {
    let mut options = 0;
    for (command, help) in every_help() {
        // An option's text runs from its flag to the next flag.
        for flag in ["--dsn <DSN>", "--prune-dsn <PRUNE_DSN>"] {
            let Some((_, after)) = help.split_once(flag) else {
                continue;
            };
            let mut lines = after.lines();
            let first = lines.next().unwrap_or_default();
            let rest: Vec<&str> = lines
                .take_while(|l| !l.trim_start().starts_with('-'))
                .collect();
            let text = format!("{first}\n{}", rest.join("\n"));
            options += 1;
            assert!(
                text.contains("mysql://") && text.contains("postgres://"),
                "{command} {flag}:{text}"
            );
        }
    }
    // init, demo, consume, check (twice), failures, replay, verify, stats,
    // prune, inspect and its two subcommands.
    assert_eq!(options, 13);
}

#[test]
fn a_dsn_without_a_database_is_shown_an_example_of_its_own_scheme() {
    for (dsn, example, not) in [
        (
            "mysql://root@127.0.0.1:1",
            "e.g. mysql://user@host:3306/receiver",
            "postgres://",
        ),
        (
            "postgres://receiver@127.0.0.1:1",
            "e.g. postgres://user@host:5432/receiver",
            "mysql://",
        ),
        (
            "postgresql://receiver@127.0.0.1:1/",
            "e.g. postgres://user@host:5432/receiver",
            "mysql://",
        ),
    ] {
        let out = Command::new(receiver_bin())
            .arg("verify")
            .env("ORBIT_RECEIVER_DSN", dsn)
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{dsn}: {err}");
        assert!(err.contains(example), "{dsn}: {err}");
        assert!(!err.contains(not), "{dsn}: {err}");
    }
}

#[test]
fn a_postgres_address_with_its_database_or_host_in_an_option_is_refused_naming_the_option() {
    let out = Command::new(receiver_bin())
        .arg("verify")
        .env(
            "ORBIT_RECEIVER_DSN",
            "postgres://receiver:sentinel-pw@127.0.0.1:1/receiver?dbname=platform",
        )
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("`dbname`") && err.contains("in its path"),
        "{err}"
    );
    assert!(
        !err.contains("platform") && !err.contains("sentinel-pw"),
        "{err}"
    );
}

#[test]
fn a_database_host_that_does_not_resolve_is_named_by_every_command_on_both_engines() {
    const UNRESOLVED: &str = "could not resolve host";
    let id = "0123456789abcdef0123456789abcdef";
    for dsn in [
        "mysql://receiver@no-such-host.invalid:3307/receiver",
        "postgres://receiver@no-such-host.invalid:5433/receiver",
    ] {
        let command = |args: &[&str]| {
            let mut command = Command::new(receiver_bin());
            command
                .args(args)
                .env("ORBIT_RECEIVER_DSN", dsn)
                .env("RECEIVER_PRUNE_DSN", dsn)
                // Orbit on a port nothing listens on: the database is
                // what the commands meet first, or beside it.
                .env("ORBIT_URL", "http://127.0.0.1:1")
                .env("ORBIT_TOKEN", "t")
                .env("ORBIT_QUEUE_ID", id)
                .env("ORBIT_SUBSCRIPTION_ID", id)
                .env_remove("ORBIT_CREDENTIALS_FILE")
                .env_remove("RECEIVER_LOG")
                .env_remove("RUST_LOG")
                .stdin(Stdio::null());
            command
        };
        for args in [
            &["verify"][..],
            &["stats"],
            &["init"],
            &["inspect", "task", id],
            &["prune", "--older-than", "30d", "--dry-run"],
            &["check"],
            &["failures"],
            &["replay", "--all", "--dry-run"],
            &["demo"],
        ] {
            let out = command(args).output().unwrap();
            let said = text(&out.stdout) + &text(&out.stderr);
            assert!(said.contains(UNRESOLVED), "{dsn} {args:?}: {said}");
            assert_ne!(out.status.code(), Some(0), "{dsn} {args:?}: {said}");
        }
        // consume waits for its database, saying why at each attempt.
        let mut consume = command(&["consume"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = consume.stderr.take().unwrap();
        let waited = std::thread::spawn(move || {
            use std::io::BufRead;
            std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
                .find(|l| l.contains("not reachable yet"))
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !waited.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        consume.kill().unwrap();
        consume.wait().unwrap();
        let line = waited.join().unwrap().unwrap_or_default();
        assert!(line.contains(UNRESOLVED), "{dsn} consume: {line:?}");
    }
}

#[test]
fn subscribe_refuses_a_jetstream_setting_for_an_orbit_subscription_naming_it() {
    for flag in [
        &["--replicas", "3"][..],
        &["--ack-wait", "60"],
        &["--max-deliver", "5"],
        &["--create-stream"],
    ] {
        let out = Command::new(receiver_bin())
            .arg("subscribe")
            .args(flag)
            .env("ORBIT_URL", "http://127.0.0.1:1")
            .env("ORBIT_TOKEN", "t")
            .env("ORBIT_QUEUE_ID", "0123456789abcdef0123456789abcdef")
            .env_remove("ORBIT_CREDENTIALS_FILE")
            .env_remove("RECEIVER_SOURCE")
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag:?}: {err}");
        assert!(
            err.contains(&format!("{} is only for --source nats", flag[0])),
            "{flag:?}: {err}"
        );
    }
}
