//! `receiver failures` and `receiver replay` over a real orbit-dev and a
//! real `receiver consume`: a fault the operator can fix makes deliveries
//! spend their budget; once it is fixed, the listing diagnoses exactly
//! those deliveries, a replay brings back what would apply, once, and
//! refuses what would only fail again.

use crate::common;

use std::process::Output;
use std::time::Duration;

use common::consume::Consume;
use common::orbit::{receiver, OrbitDev, QueueCredentials};
use common::{dsn_for, random_hex, EventSpec, TestDb};
use result_inbox::ids::SubscriptionId;

/// An orbit-dev whose leases last 1 s and whose deliveries get 2 attempts,
/// a subscription, a receiver database, and an account on it that may
/// only read.
struct Failing {
    orbit: OrbitDev,
    creds: QueueCredentials,
    sub: SubscriptionId,
    db: TestDb,
    reader: String,
}

impl Failing {
    async fn new() -> Failing {
        let (orbit, creds, sub) = OrbitDev::subscribed(1_000, 2, "failures").await;
        let db = TestDb::initialized().await;
        let reader = db.reader_dsn().await;
        Failing {
            orbit,
            creds,
            sub,
            db,
            reader,
        }
    }

    fn consume(&self) -> Consume {
        Consume::on_test_db(&self.orbit, &self.creds, &self.db, &self.sub, &[])
    }

    /// `receiver <args>` as the operator runs it: the read-only account,
    /// the admin token only where given.
    fn run(&self, args: &[&str], admin: bool) -> Output {
        self.run_with_admin(args, admin.then(|| self.orbit.admin_token()))
    }

    /// The same with `admin` as the admin token, if any.
    fn run_with_admin(&self, args: &[&str], admin: Option<&str>) -> Output {
        let mut command = receiver();
        command
            .args(args)
            .env("ORBIT_CREDENTIALS_FILE", &self.creds.file)
            .env("ORBIT_SUBSCRIPTION_ID", self.sub.as_str())
            .env("ORBIT_RECEIVER_DSN", &self.reader)
            .env_remove("ORBIT_ADMIN_TOKEN")
            .env_remove("ORBIT_ADMIN_TOKEN_FILE");
        if let Some(admin) = admin {
            command.env("ORBIT_ADMIN_TOKEN", admin);
        }
        command.output().unwrap()
    }

    fn event(&self, task: &str) -> EventSpec<'_> {
        EventSpec::submitted(&self.creds.queue_id, leak(task))
    }

    async fn states(&self) -> Vec<(String, String)> {
        self.orbit
            .deliveries(&self.creds, &self.sub)
            .await
            .iter()
            .map(|d| {
                (
                    d["id"].as_str().unwrap().to_owned(),
                    d["state"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    async fn wait_until(&self, what: &str, done: impl Fn(&[(String, String)]) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
        loop {
            let states = self.states().await;
            if done(&states) {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "{what}: {states:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn leak(text: &str) -> &'static str {
    Box::leak(text.to_owned().into_boxed_str())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn state_of<'a>(states: &'a [(String, String)], id: &str) -> &'a str {
    states
        .iter()
        .find(|(d, _)| d == id)
        .map_or("?", |(_, s)| s.as_str())
}

#[tokio::test]
async fn failed_deliveries_are_listed_diagnosed_and_replayed_once_and_what_would_fail_again_is_refused(
) {
    let f = Failing::new().await;
    // One event applied before the fault: its conflicting copy comes later.
    let first = f.event(&random_hex(16));
    let applied_first = f.orbit.inject(&f.sub, &first.json()).await;
    let mut consume = f.consume();
    f.wait_until("the first event acknowledged", |s| {
        state_of(s, &applied_first) == "ACKED"
    })
    .await;

    // The fault: a table lock held past the inbox's 5 s budget.
    let lock = f.db.lock_inbox().await;
    let task_a = random_hex(16);
    let task_b = random_hex(16);
    let a = f.orbit.inject(&f.sub, &f.event(&task_a).json()).await;
    let b = f.orbit.inject(&f.sub, &f.event(&task_b).json()).await;
    // The first event again under its id, with another time: other content.
    let copy = first.json().replace("16:02:44.5", "16:02:45.5");
    let conflicting = f.orbit.inject(&f.sub, &copy).await;
    let garbage = f.orbit.inject(&f.sub, "garbage{").await;
    let failing = [a.clone(), b.clone(), conflicting.clone(), garbage.clone()];
    f.wait_until("every delivery under the lock expired", |s| {
        failing.iter().all(|id| state_of(s, id) == "EXPIRED")
    })
    .await;
    // The attempts under way end with the consumer, before the lock goes:
    // none of them can commit late.
    assert!(consume.terminate().success(), "{}", consume.output());
    lock.release().await;

    let listed = f.run(&["failures"], false);
    let out = text(&listed.stdout);
    assert_eq!(
        listed.status.code(),
        Some(1),
        "{out}{}",
        text(&listed.stderr)
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    let line = |id: &str| {
        *lines
            .iter()
            .find(|l| l.starts_with(&format!("failure delivery={id} ")))
            .unwrap_or_else(|| panic!("{id} not listed: {out}"))
    };
    assert!(
        line(&a).contains(&format!(
            "task={task_a} attempts=2 failed_at=- diagnosis=apply"
        )),
        "{out}"
    );
    assert!(line(&b).contains("diagnosis=apply"), "{out}");
    let stored = result_inbox::digest::digest(first.json().as_bytes()).unwrap();
    let incoming = result_inbox::digest::digest(copy.as_bytes()).unwrap();
    assert!(
        line(&conflicting).contains(&format!(
            "event={} task={} attempts=2 failed_at=- diagnosis=conflict stored=sha256={stored} incoming=sha256={incoming}",
            first.id, first.task_id
        )),
        "{out}"
    );
    assert!(
        line(&garbage).contains("diagnosis=rejected reason="),
        "{out}"
    );
    assert_eq!(
        common::without_database(lines[4]),
        "failures total=4 apply=2 duplicate=0 stale=0 conflict=1 rejected=1"
    );
    assert!(!out.contains(&f.creds.token));

    // The same as JSON: numbers as numbers, null for what is not known
    // (an injected event belongs to no task; Orbit records no time).
    let json = f.run(&["failures", "--json"], false);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let object = |id: &str| {
        v["failures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["delivery"] == id)
            .unwrap_or_else(|| panic!("{id}: {v}"))
            .clone()
    };
    assert_eq!(object(&a)["task"], task_a.as_str());
    assert_eq!(object(&a)["attempts"], 2);
    assert_eq!(object(&garbage)["task"], serde_json::Value::Null, "{v}");
    assert_eq!(object(&a)["failed_at"], serde_json::Value::Null, "{v}");
    assert!(!json.stdout.windows(3).any(|w| w == br#""-""#), "{v}");

    // A dry run changes nothing and says what a replay would refuse; it
    // could run, so it exits 0. A replay needs the admin token.
    let dry = f.run(&["replay", "--all", "--dry-run"], false);
    let out = text(&dry.stdout);
    assert_eq!(dry.status.code(), Some(0), "{out}{}", text(&dry.stderr));
    assert!(
        out.contains(&format!(
            "replay delivery={a} diagnosis=apply result=dry-run"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "replay delivery={conflicting} diagnosis=conflict result=refused"
        )),
        "{out}"
    );
    let without_admin = f.run(&["replay", "--diagnosis", "apply"], false);
    assert_eq!(without_admin.status.code(), Some(2));
    assert!(text(&without_admin.stderr).contains("ORBIT_ADMIN_TOKEN is not set"));

    // An id that cannot be an Orbit delivery is refused, not skipped.
    let not_an_id = f.run(&["replay", "--delivery", "42"], true);
    assert_eq!(not_an_id.status.code(), Some(2));
    assert!(
        text(&not_an_id.stderr).contains("--delivery \"42\" cannot be a delivery"),
        "{}",
        text(&not_an_id.stderr)
    );
    assert!(text(&not_an_id.stdout).is_empty());

    // A wrong admin token: the lines say it was refused, in plain words.
    let wrong = f.run_with_admin(&["replay", "--delivery", &a], Some("not-the-admin-token"));
    let out = text(&wrong.stdout);
    assert_eq!(wrong.status.code(), Some(2), "{out}{}", text(&wrong.stderr));
    assert!(
        out.contains(&format!(
            "replay delivery={a} diagnosis=apply result=failed reason=\"the admin token was refused (Orbit answered 401"
        )),
        "{out}"
    );
    assert!(!out.contains("Orbit: Orbit"), "{out}");

    // An admin token file others may read is refused before any call.
    let open_file = f.orbit.dir.join("admin-token-open");
    std::fs::write(&open_file, f.orbit.admin_token()).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&open_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let open = f.run(
        &[
            "replay",
            "--delivery",
            &a,
            "--admin-token-file",
            open_file.to_str().unwrap(),
        ],
        false,
    );
    assert_eq!(open.status.code(), Some(2));
    assert!(
        text(&open.stderr).contains("is readable by group or others; make it private (chmod 600)"),
        "{}",
        text(&open.stderr)
    );
    assert!(text(&open.stdout).is_empty());
    assert_eq!(state_of(&f.states().await, &a), "EXPIRED");

    let replay = f.run(&["replay", "--diagnosis", "apply"], true);
    let out = text(&replay.stdout);
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{out}{}",
        text(&replay.stderr)
    );
    for id in [&a, &b] {
        assert!(
            out.contains(&format!(
                "replay delivery={id} diagnosis=apply result=replayed"
            )),
            "{out}"
        );
    }
    assert!(
        common::without_database(&out)
            .ends_with("replay total=2 replayed=2 skipped=0 refused=0 failed=0\n"),
        "{out}"
    );
    assert!(
        !out.contains(f.orbit.admin_token())
            && !text(&replay.stderr).contains(f.orbit.admin_token())
    );

    let mut consume = f.consume();
    f.wait_until("the replayed deliveries acknowledged", |s| {
        state_of(s, &a) == "ACKED" && state_of(s, &b) == "ACKED"
    })
    .await;
    assert!(consume.terminate().success(), "{}", consume.output());
    let after_replay = f.db.rows().await;
    // Three views, each advanced once: the first event's and the two
    // replayed tasks'.
    assert_eq!(after_replay.views.len(), 3);
    assert!(after_replay
        .views
        .iter()
        .all(|(_, version, applied, _)| *version == 1 && *applied == 1));

    // What would only fail again is refused, and nothing else is left.
    let all = f.run(&["replay", "--all"], true);
    let out = text(&all.stdout);
    assert_eq!(all.status.code(), Some(2), "{out}");
    assert!(
        out.contains(&format!(
            "replay delivery={conflicting} diagnosis=conflict result=refused"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "replay delivery={garbage} diagnosis=rejected result=refused"
        )),
        "{out}"
    );
    assert!(
        common::without_database(&out)
            .ends_with("replay total=2 replayed=0 skipped=0 refused=2 failed=0\n"),
        "{out}"
    );

    // Forced, they would be replayed: the dry run says so.
    let forced = f.run(&["replay", "--all", "--force", "--dry-run"], false);
    let out = text(&forced.stdout);
    assert_eq!(forced.status.code(), Some(0), "{out}");
    assert!(
        out.contains(&format!(
            "replay delivery={conflicting} diagnosis=conflict result=dry-run"
        )),
        "{out}"
    );

    // A second replay of the same deliveries (the admin token from a file
    // this time): skipped, no view changes.
    let token_file = f.orbit.dir.join("admin-token");
    common::write_private(&token_file, f.orbit.admin_token().as_bytes());
    let again = f.run(
        &[
            "replay",
            "--delivery",
            &a,
            "--delivery",
            &b,
            "--admin-token-file",
            token_file.to_str().unwrap(),
        ],
        false,
    );
    let out = text(&again.stdout);
    assert_eq!(again.status.code(), Some(0), "{out}");
    assert!(
        out.contains(&format!("replay delivery={a} diagnosis=- result=skipped")),
        "{out}"
    );
    assert_eq!(f.db.rows().await, after_replay);
    let states = f.states().await;
    assert_eq!(state_of(&states, &conflicting), "EXPIRED");
    assert_eq!(state_of(&states, &garbage), "EXPIRED");

    let verify = receiver()
        .arg("verify")
        .env("ORBIT_RECEIVER_DSN", dsn_for(&f.db.name))
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", text(&verify.stdout));
}

#[tokio::test]
async fn failures_with_nothing_failed_exits_0_with_an_empty_summary_and_json_says_the_same() {
    let mut f = Failing::new().await;
    // The least it needs: a token that may only read the queue's events,
    // and an account that may only SELECT.
    f.creds = f.orbit.bootstrap("failures", Some(&["events:read"])).await;
    let listed = f.run(&["failures"], false);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    assert_eq!(
        common::without_database(&text(&listed.stdout)),
        "failures total=0 apply=0 duplicate=0 stale=0 conflict=0 rejected=0\n"
    );
    let json = f.run(&["failures", "--json"], false);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["failures"], serde_json::json!([]));
    assert_eq!(v["summary"]["total"], 0);
    assert!(v["summary"]["database"].is_string(), "{v}");
}

/// The same over NATS JetStream: the failures stream `subscribe --source
/// nats` creates records what JetStream gave up on while nobody listed it.
#[cfg(feature = "nats")]
mod over_nats {
    use super::{common, text};

    use std::process::Output;
    use std::time::Duration;

    use common::consume::Consume;
    use common::nats::{JetStreamQueue, NatsServer};
    use common::orbit::receiver;
    use common::{dsn_for, random_hex, EventSpec, TestDb};

    struct Failing {
        server: NatsServer,
        queue: JetStreamQueue,
        db: TestDb,
        reader: String,
    }

    impl Failing {
        async fn new() -> Failing {
            let server = NatsServer::start();
            let queue =
                JetStreamQueue::create(&server, &random_hex(16), Duration::from_secs(1), 2).await;
            let db = TestDb::initialized().await;
            let reader = db.reader_dsn().await;
            Failing {
                server,
                queue,
                db,
                reader,
            }
        }

        fn env(&self, dsn: &str) -> Vec<(String, String)> {
            let mut env = self.queue.env(&self.server.url());
            env.push(("ORBIT_RECEIVER_DSN".into(), dsn.to_owned()));
            env
        }

        fn consume(&self) -> Consume {
            Consume::with_env(&self.server.dir, &self.env(&dsn_for(&self.db.name)))
        }

        fn run(&self, args: &[&str]) -> Output {
            receiver()
                .args(args)
                .envs(self.env(&self.reader))
                .output()
                .unwrap()
        }

        fn event(&self, task: &str) -> String {
            EventSpec::submitted(&self.queue.queue, task).json()
        }

        async fn views(&self) -> Vec<(Vec<u8>, u64, u64)> {
            sqlx::query_as(
                "SELECT task_id, task_version, applied_events FROM receiver_task_views ORDER BY task_id",
            )
            .fetch_all(&self.db.pool().await)
            .await
            .unwrap()
        }

        /// Records in the failures stream.
        async fn recorded(&self) -> u64 {
            let name =
                result_inbox::nats::failures_stream_name(&self.queue.stream, &self.queue.consumer);
            let mut stream = self.queue.js.get_stream(name).await.unwrap();
            stream.info().await.unwrap().state.messages
        }
    }

    #[tokio::test]
    async fn what_jetstream_gave_up_on_is_listed_diagnosed_and_replayed_once() {
        let f = Failing::new().await;
        let subscribed = f.run(&["subscribe"]);
        assert!(subscribed.status.success(), "{}", text(&subscribed.stderr));
        let first = f.event(&random_hex(16));
        f.queue.publish(first.clone()).await;
        let mut consume = f.consume();
        f.queue.wait_all_acked(Duration::from_secs(20)).await;

        let lock = f.db.lock_inbox().await;
        let a = f.queue.publish(f.event(&random_hex(16))).await;
        let b = f.queue.publish(f.event(&random_hex(16))).await;
        let copy = first.replace("16:02:44.5", "16:02:45.5");
        let conflicting = f.queue.publish(copy).await;
        let garbage = f.queue.publish("garbage{").await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while f.recorded().await < 4 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "JetStream did not give up on all four: {}",
                consume.output()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The last attempt JetStream allows failed: one ERROR line for each
        // delivery it gave up on that way, pointing at the listing (the
        // advisory may come before that attempt has failed).
        let last_failed = |log: &str, sequence: u64| {
            log.lines()
                .filter(|l| {
                    l.contains(" ERROR ")
                        && l.contains(&format!(":{sequence} "))
                        && l.contains("`receiver failures`")
                })
                .count()
        };
        consume
            .wait_for_output(Duration::from_secs(30), |log| {
                [a, b, conflicting].iter().all(|s| last_failed(log, *s) > 0)
            })
            .await;
        assert!(consume.terminate().success(), "{}", consume.output());
        let log = consume.output();
        for sequence in [a, b, conflicting, garbage] {
            let expected = usize::from(sequence != garbage);
            assert_eq!(last_failed(&log, sequence), expected, "{sequence}: {log}");
        }
        lock.release().await;

        let listed = f.run(&["failures"]);
        let out = text(&listed.stdout);
        assert_eq!(
            listed.status.code(),
            Some(1),
            "{out}{}",
            text(&listed.stderr)
        );
        for (sequence, diagnosis) in [
            (a, "apply"),
            (b, "apply"),
            (conflicting, "conflict"),
            (garbage, "rejected"),
        ] {
            assert!(
                out.lines()
                    .any(|l| l.starts_with(&format!("failure sequence={sequence} "))
                        && l.contains(&format!(" diagnosis={diagnosis}"))),
                "{sequence} {diagnosis}: {out}"
            );
        }
        assert!(
            common::without_database(&out)
                .ends_with("failures total=4 apply=2 duplicate=0 stale=0 conflict=1 rejected=1\n"),
            "{out}"
        );
        // When JetStream gave up on each: its advisory's time.
        assert!(
            out.lines()
                .filter(|l| l.starts_with("failure "))
                .all(|l| l.contains(" failed_at=20") && l.contains("Z diagnosis=")),
            "{out}"
        );
        let json = f.run(&["failures", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        let failures = v["failures"].as_array().unwrap();
        assert!(
            failures.iter().any(|o| o["sequence"] == a),
            "sequences are numbers: {v}"
        );
        let unreadable = failures.iter().find(|o| o["sequence"] == garbage).unwrap();
        assert_eq!(unreadable["event"], serde_json::Value::Null, "{v}");
        assert!(failures.iter().all(|o| o["failed_at"].is_string()), "{v}");

        // An id that cannot be a stream sequence is refused, not skipped;
        // a dry run that could run exits 0.
        let not_an_id = f.run(&["replay", "--delivery", "a1b2"]);
        assert_eq!(not_an_id.status.code(), Some(2));
        assert!(
            text(&not_an_id.stderr).contains("stream sequence"),
            "{}",
            text(&not_an_id.stderr)
        );
        let dry = f.run(&["replay", "--all", "--dry-run"]);
        assert_eq!(dry.status.code(), Some(0), "{}", text(&dry.stdout));
        assert!(
            text(&dry.stdout).contains(&format!(
                "replay sequence={garbage} diagnosis=rejected result=refused"
            )),
            "{}",
            text(&dry.stdout)
        );

        let replay = f.run(&["replay", "--diagnosis", "apply"]);
        let out = text(&replay.stdout);
        assert_eq!(
            replay.status.code(),
            Some(0),
            "{out}{}",
            text(&replay.stderr)
        );
        assert!(
            out.contains(&format!(
                "replay sequence={a} diagnosis=apply result=replayed new_sequence="
            )),
            "{out}"
        );
        let mut consume = f.consume();
        f.queue.wait_all_acked(Duration::from_secs(20)).await;
        assert!(consume.terminate().success(), "{}", consume.output());
        let views = f.views().await;
        assert_eq!(views.len(), 3, "{views:?}");
        assert!(views
            .iter()
            .all(|(_, version, applied)| *version == 1 && *applied == 1));

        let all = f.run(&["replay", "--all"]);
        let out = text(&all.stdout);
        assert_eq!(all.status.code(), Some(2), "{out}");
        assert!(
            common::without_database(&out)
                .ends_with("replay total=2 replayed=0 skipped=0 refused=2 failed=0\n"),
            "{out}"
        );

        // Replayed once: a second replay finds nothing to bring back.
        let again = f.run(&["replay", "--delivery", &a.to_string()]);
        assert!(
            text(&again.stdout)
                .contains(&format!("replay sequence={a} diagnosis=- result=skipped")),
            "{}",
            text(&again.stdout)
        );
        assert_eq!(f.views().await, views);
        let verify = receiver()
            .arg("verify")
            .env("ORBIT_RECEIVER_DSN", dsn_for(&f.db.name))
            .output()
            .unwrap();
        assert!(verify.status.success(), "{}", text(&verify.stdout));
    }
}
