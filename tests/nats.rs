//! `receiver consume --source nats`: the same inbox fed by a real
//! nats-server's JetStream durable pull consumer, with real processes.
#![cfg(feature = "nats")]

use crate::common;

use std::time::Duration;

use async_nats::jetstream::AckKind;
use common::consume::Consume;
use common::nats::{
    pull, AckFault, AckLosingProxy, JetStreamQueue, NatsCluster, NatsServer, NatsServerOptions,
    TestOperator,
};
use common::tls::TestPki;
use common::{dsn_for, random_hex, unreadable_bodies, EventSpec, TestDb};
use futures::future::join_all;
use futures::StreamExt;
use result_inbox::ids::{QueueId, TaskId};
use result_inbox::nats::{
    failed_messages, failures_stream_name, provision, replay, ConsumerSpec, FailedMessage,
    FailureReason, NatsError, NatsSettings,
};
use result_inbox::scope::{InboxScope, ReceiverName};
use result_inbox::task_view;

const RECEIVER: &str = "task-result-view";

/// A nats-server, a queue's stream and durable consumer on it, and a fresh
/// receiver database.
struct Setup {
    server: NatsServer,
    queue: JetStreamQueue,
    db: TestDb,
}

impl Setup {
    async fn new(ack_wait: Duration, max_deliver: i64) -> Setup {
        Setup::on(NatsServer::start(), ack_wait, max_deliver).await
    }

    async fn on(server: NatsServer, ack_wait: Duration, max_deliver: i64) -> Setup {
        let queue = JetStreamQueue::create(&server, &random_hex(16), ack_wait, max_deliver).await;
        let db = TestDb::initialized().await;
        Setup { server, queue, db }
    }

    /// The environment of `receiver consume --source nats` against `url`.
    fn env(&self, url: &str) -> Vec<(String, String)> {
        let mut env = self.queue.env(url);
        env.push(("ORBIT_RECEIVER_DSN".into(), dsn_for(&self.db.name)));
        env.push(("RECEIVER_NAME".into(), RECEIVER.into()));
        env
    }

    fn consume(&self) -> Consume {
        Consume::with_env(&self.server.dir, &self.env(&self.server.url()))
    }

    fn consume_via(&self, url: &str) -> Consume {
        Consume::with_env(&self.server.dir, &self.env(url))
    }

    /// The library's settings for this queue's consumer.
    fn settings(&self) -> NatsSettings {
        self.queue.settings(&self.server.url())
    }

    fn submitted(&self, task: &str) -> String {
        EventSpec::submitted(&self.queue.queue, task).json()
    }

    async fn view(&self, task: &str) -> Option<task_view::TaskViewRow> {
        let scope = InboxScope::new(
            ReceiverName::parse(RECEIVER).unwrap(),
            QueueId::parse(&self.queue.queue).unwrap(),
        );
        task_view::load(&self.db.pool().await, &scope, &TaskId::parse(task).unwrap())
            .await
            .unwrap()
    }

    /// Inbox rows, rows that advanced a view, and the advances the views
    /// counted: the last two always agree.
    async fn totals(&self) -> (i64, i64, i64) {
        totals(&self.db).await
    }

    async fn inbox_rows(&self) -> i64 {
        self.totals().await.0
    }

    /// Waits until the inbox holds `rows` rows.
    async fn wait_rows(&self, rows: i64, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.inbox_rows().await < rows {
            assert!(
                tokio::time::Instant::now() < deadline,
                "fewer than {rows} inbox rows"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// JetStream's advisories of one kind about this consumer
    /// (`MAX_DELIVERIES`, `MSG_TERMINATED`), as they are published.
    async fn advisories(&self, kind: &str) -> async_nats::Subscriber {
        let client = self.server.client().await;
        let subject = format!(
            "$JS.EVENT.ADVISORY.CONSUMER.{kind}.{}.{}",
            self.queue.stream, self.queue.consumer
        );
        let subscriber = client.subscribe(subject).await.unwrap();
        client.flush().await.unwrap();
        // The client lives as long as the subscriber needs it.
        std::mem::forget(client);
        subscriber
    }
}

/// Inbox rows, rows that advanced a view, and the advances the views
/// counted, in `db`: the last two always agree.
async fn totals(db: &TestDb) -> (i64, i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM receiver_inbox), \
         (SELECT CAST(COALESCE(SUM(applied), 0) AS SIGNED) FROM receiver_inbox), \
         (SELECT CAST(COALESCE(SUM(applied_events), 0) AS SIGNED) FROM receiver_task_views)",
    )
    .fetch_one(&db.pool().await)
    .await
    .unwrap()
}

/// The stream sequences of the next `n` terminated messages, as the
/// server's advisories name them.
async fn terminated_sequences(advisories: &mut async_nats::Subscriber, n: usize) -> Vec<u64> {
    let mut seen = Vec::new();
    for _ in 0..n {
        let advisory = tokio::time::timeout(Duration::from_secs(20), advisories.next())
            .await
            .expect("a message that is not an event is terminated")
            .unwrap();
        let advisory: serde_json::Value = serde_json::from_slice(&advisory.payload).unwrap();
        seen.push(advisory["stream_seq"].as_u64().unwrap());
    }
    seen
}

/// The `acknowledged` lines of a receiver's log.
fn acknowledged(log: &str) -> usize {
    log.lines().filter(|l| l.contains(" acknowledged ")).count()
}

#[tokio::test]
async fn applied_duplicate_stale_and_conflict_over_nats_end_as_over_orbit() {
    let s = Setup::new(Duration::from_secs(1), 3).await;
    let task = random_hex(16);
    let spec = |version, event_type, state| EventSpec {
        id: random_hex(16),
        queue_id: &s.queue.queue,
        task_id: &task,
        version,
        event_type,
        state,
        result: None,
    };
    let v2 = spec(2, "task.cancelled", "CANCELLED");
    let v1 = spec(1, "task.submitted", "PENDING");
    let mut v2_other = spec(2, "task.cancelled", "CANCELLED");
    v2_other.id = v2.id.clone();
    v2_other.event_type = "task.failed";
    v2_other.state = "FAILED";
    let mut conflicts = s.advisories("MAX_DELIVERIES").await;

    // One at a time, so that each meets the state the one before left.
    s.queue.publish(v2.json()).await;
    let mut consume = s.consume();
    for copy in [v2.json(), v1.json()] {
        s.queue.wait_all_acked(Duration::from_secs(20)).await;
        s.queue.publish(copy).await;
    }
    s.queue.wait_all_acked(Duration::from_secs(20)).await;
    let conflict_seq = s.queue.publish(v2_other.json()).await;

    // The conflict spends its MaxDeliver (3) and is never acknowledged; the
    // others are acknowledged once each.
    let advisory = tokio::time::timeout(Duration::from_secs(30), conflicts.next())
        .await
        .expect("the conflict reaches MaxDeliver")
        .unwrap();
    let advisory: serde_json::Value = serde_json::from_slice(&advisory.payload).unwrap();
    assert_eq!(advisory["stream_seq"], conflict_seq);
    assert_eq!(advisory["deliveries"], 3);
    assert!(consume.terminate().success());

    let view = s.view(&task).await.unwrap();
    assert_eq!(
        (
            view.task_version,
            view.last_state.as_str(),
            view.applied_events
        ),
        (2, "CANCELLED", 1)
    );
    let (rows, advanced, counted) = s.totals().await;
    assert_eq!((rows, advanced, counted), (2, 1, 1));
    let out = consume.output();
    for class in ["applied", "duplicate", "stale"] {
        assert_eq!(
            out.matches(&format!(r#"class="{class}""#)).count(),
            1,
            "{class}: {out}"
        );
    }
    assert_eq!(out.matches(r#"class="conflict""#).count(), 3, "{out}");
    assert_eq!(acknowledged(&out), 3, "{out}");
    assert!(
        !out.contains("dropped by the source"),
        "a conflict is never terminated: {out}"
    );
}

#[tokio::test]
async fn bytes_that_can_never_be_an_event_are_terminated_after_one_delivery() {
    let s = Setup::new(Duration::from_secs(1), 5).await;
    let mut terminated = s.advisories("MSG_TERMINATED").await;
    let task = random_hex(16);
    let event = s.submitted(&task);
    let duplicate_key = event.replacen('{', r#"{"type":"task.submitted","#, 1);
    let too_large = format!(r#"{{"pad":"{}",{}"#, "x".repeat(520 * 1024), &event[1..]);
    let mut sequences = vec![
        s.queue.publish("{not json").await,
        s.queue.publish(duplicate_key).await,
        s.queue.publish(too_large).await,
    ];
    s.queue.publish(event).await;
    let mut consume = s.consume();

    let mut seen = terminated_sequences(&mut terminated, 3).await;
    let info = s.queue.wait_all_acked(Duration::from_secs(10)).await;
    assert!(consume.terminate().success());
    seen.sort();
    sequences.sort();
    assert_eq!(seen, sequences);
    assert_eq!(info.num_ack_pending, 0);
    assert_eq!(
        consume.handled(),
        4,
        "each was delivered once: {}",
        consume.output()
    );
    assert_eq!(
        s.totals().await,
        (1, 1, 1),
        "only the valid event was written"
    );
    let out = consume.output();
    assert_eq!(
        out.matches("dropped by the source for good").count(),
        3,
        "{out}"
    );
    assert_eq!(acknowledged(&out), 1, "{out}");
}

#[tokio::test]
async fn messages_that_are_not_events_are_terminated_while_their_neighbours_are_applied() {
    let s = Setup::new(Duration::from_secs(1), 3).await;
    let mut terminated = s.advisories("MSG_TERMINATED").await;
    let mut bad = Vec::new();
    let spoiled = s.submitted(&random_hex(16));
    for (_, body) in unreadable_bodies(&spoiled) {
        s.queue.publish(s.submitted(&random_hex(16))).await;
        bad.push(s.queue.publish(body).await);
    }
    s.queue.publish(s.submitted(&random_hex(16))).await;
    let valid = bad.len() as i64 + 1;
    let mut consume = s.consume();

    let mut seen = terminated_sequences(&mut terminated, bad.len()).await;
    let info = s.queue.wait_all_acked(Duration::from_secs(10)).await;
    assert!(consume.terminate().success());
    seen.sort();
    assert_eq!(seen, bad);
    assert_eq!(info.num_ack_pending, 0);
    let out = consume.output();
    assert_eq!(
        consume.handled(),
        bad.len() + valid as usize,
        "each once: {out}"
    );
    assert_eq!(
        s.totals().await,
        (valid, valid, valid),
        "every event applied, nothing else"
    );
    assert_eq!(acknowledged(&out), valid as usize, "{out}");
    assert_eq!(out.matches("delivery stream open").count(), 1, "{out}");
    assert_eq!(
        out.matches(&format!("connected to NATS url={}", s.server.url()))
            .count(),
        1,
        "the receiver's own line, with host and port: {out}"
    );
    assert!(
        !out.contains("async_nats"),
        "the client's info lines are kept out: {out}"
    );
}

#[tokio::test]
async fn a_consumer_killed_after_commit_is_redelivered_after_ack_wait_and_deduplicated() {
    let s = Setup::new(Duration::from_secs(2), 5).await;
    let proxy = AckLosingProxy::start(s.server.port).await;
    let task = random_hex(16);
    s.queue.publish(s.submitted(&task)).await;

    // The first consumer commits, its ACK never leaves, and it is killed.
    proxy.arm(AckFault::LoseAck);
    let mut first = s.consume_via(&proxy.url());
    s.wait_rows(1, Duration::from_secs(20)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while proxy.fired() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no ACK was sent");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.kill();
    assert_eq!(acknowledged(&first.output()), 0, "{}", first.output());
    let info = s.queue.info().await;
    assert_eq!(info.num_ack_pending, 1, "{info:?}\n{}", first.output());

    // After AckWait the message comes again: a duplicate, acknowledged.
    let mut second = s.consume();
    let info = s.queue.wait_all_acked(Duration::from_secs(20)).await;
    assert!(second.terminate().success());
    assert_eq!(info.num_ack_pending, 0);
    let out = second.output();
    assert_eq!(out.matches(r#"class="duplicate""#).count(), 1, "{out}");
    assert!(out.contains("attempt=2"), "{out}");
    assert_eq!(acknowledged(&out), 1, "{out}");
    let view = s.view(&task).await.unwrap();
    assert_eq!((view.task_version, view.applied_events), (1, 1));
    assert_eq!(s.totals().await, (1, 1, 1));
}

#[tokio::test]
async fn a_lost_confirmation_is_rereported_and_the_message_is_not_delivered_again() {
    let s = Setup::new(Duration::from_secs(30), 5).await;
    let proxy = AckLosingProxy::start(s.server.port).await;
    let task = random_hex(16);
    s.queue.publish(s.submitted(&task)).await;

    proxy.arm(AckFault::LoseConfirmation);
    let mut consume = s.consume_via(&proxy.url());
    // AckWait is 30 s: only a re-reported ACK can settle it this soon.
    let info = s.queue.wait_all_acked(Duration::from_secs(25)).await;
    consume
        .wait_for_output(Duration::from_secs(20), |out| acknowledged(out) > 0)
        .await;
    assert!(consume.terminate().success());
    assert_eq!(proxy.fired(), 1);
    assert_eq!(info.num_ack_pending, 0);
    assert_eq!(
        consume.handled(),
        1,
        "not delivered again: {}",
        consume.output()
    );
    let out = consume.output();
    assert!(out.contains("re-reporting with the same proof"), "{out}");
    assert_eq!(out.matches(r#"class="applied""#).count(), 1, "{out}");
    assert_eq!(acknowledged(&out), 1, "{out}");
    assert_eq!(s.totals().await, (1, 1, 1));
}

#[tokio::test]
async fn two_consumer_processes_on_one_durable_consumer_never_advance_a_task_twice() {
    let s = Setup::new(Duration::from_secs(5), 5).await;
    let mut tasks = Vec::new();
    for i in 0..30 {
        let task = random_hex(16);
        s.queue.publish(s.submitted(&task)).await;
        let done = EventSpec {
            version: 2,
            event_type: "task.succeeded",
            state: "SUCCEEDED",
            result: Some(if i % 2 == 0 {
                r#"{"ok":true}"#
            } else {
                r#"{"ok":false}"#
            }),
            ..EventSpec::submitted(&s.queue.queue, &task)
        };
        s.queue.publish(done.json()).await;
        tasks.push(task);
    }
    let mut a = s.consume();
    let mut b = s.consume();
    s.queue.wait_all_acked(Duration::from_secs(30)).await;
    assert!(a.terminate().success());
    assert!(b.terminate().success());
    assert!(a.handled() > 0 && b.handled() > 0, "both took part");
    assert_eq!(a.handled() + b.handled(), 60);
    for task in &tasks {
        let view = s.view(task).await.unwrap();
        assert_eq!(view.task_version, 2);
        assert!(view.applied_events <= 2);
    }
    let (rows, advanced, counted) = s.totals().await;
    assert_eq!(rows, 60);
    assert_eq!(advanced, counted);
}

#[tokio::test]
async fn sigterm_mid_stream_loses_nothing_and_a_restart_finishes_the_work() {
    const TOTAL: i64 = 300;
    let s = Setup::new(Duration::from_secs(2), 10).await;
    for _ in 0..TOTAL {
        s.queue.publish(s.submitted(&random_hex(16))).await;
    }
    let mut first = s.consume();
    s.wait_rows(1, Duration::from_secs(20)).await;
    let stopping = std::time::Instant::now();
    assert!(first.terminate().success(), "{}", first.output());
    assert!(stopping.elapsed() < Duration::from_secs(10));
    assert!(
        s.inbox_rows().await < TOTAL,
        "the first consumer was stopped mid-stream"
    );

    let mut second = s.consume();
    s.queue.wait_all_acked(Duration::from_secs(60)).await;
    assert!(second.terminate().success(), "{}", second.output());
    assert_eq!(s.totals().await, (TOTAL, TOTAL, TOTAL));
}

#[tokio::test]
async fn a_missing_stream_or_consumer_or_another_subject_stops_before_anything_is_fetched() {
    let s = Setup::new(Duration::from_secs(1), 3).await;
    s.queue.publish(s.submitted(&random_hex(16))).await;
    let cases: [(&str, &str, &[&str]); 3] = [
        (
            "NATS_STREAM",
            "NO_SUCH_STREAM",
            &["stream NO_SUCH_STREAM does not exist", "consumer receiver"],
        ),
        (
            "NATS_CONSUMER",
            "nobody",
            &["consumer nobody does not exist on stream"],
        ),
        (
            "NATS_SUBJECT",
            "orbit.results.other",
            &["filters subject", "orbit.results.other"],
        ),
    ];
    for (variable, value, expected) in cases {
        let mut env = s.env(&s.server.url());
        env.push((variable.into(), value.into()));
        let mut consume = Consume::with_env(&s.server.dir, &env);
        let status = consume.wait_exit(Duration::from_secs(20));
        let out = consume.output();
        assert_eq!(status.code(), Some(2), "{variable}: {out}");
        for text in expected {
            assert!(out.contains(text), "{variable}: {out}");
        }
        assert!(
            out.contains(&s.queue.stream) || variable == "NATS_STREAM",
            "{out}"
        );
    }
    let info = s.queue.info().await;
    assert_eq!(info.delivered.stream_sequence, 0, "nothing was fetched");
    assert_eq!(s.inbox_rows().await, 0);
}

#[tokio::test]
async fn no_nats_token_or_url_password_ever_appears_in_the_output() {
    let s = Setup::new(Duration::from_secs(1), 3).await;
    let mut env = s.env(&format!(
        "nats://sentinel-user:sentinel-url-password@127.0.0.1:{}",
        s.server.port
    ));
    env.push(("RECEIVER_LOG".into(), "trace".into()));
    let mut consume = Consume::with_env(&s.server.dir, &env);
    tokio::time::sleep(Duration::from_secs(2)).await;
    consume.terminate();
    let mut env = s.env(&s.server.url());
    env.push(("NATS_TOKEN".into(), "sentinel-nats-token".into()));
    env.push(("RECEIVER_LOG".into(), "trace".into()));
    let mut with_token = Consume::with_env(&s.server.dir, &env);
    tokio::time::sleep(Duration::from_secs(2)).await;
    with_token.terminate();
    for out in [consume.output(), with_token.output()] {
        assert!(!out.is_empty());
        assert!(!out.contains("sentinel-url-password"), "{out}");
        assert!(!out.contains("sentinel-nats-token"), "{out}");
    }
}

/// On `server`, with one event queued: a receiver without `setting` exits 2
/// saying `refusal` and applies nothing; one with it applies the event and
/// has it acknowledged. The outputs of both, refused first.
async fn refused_without_and_served_with(
    server: NatsServer,
    refusal: &str,
    setting: (&str, String),
) -> [String; 2] {
    let s = Setup::on(server, Duration::from_secs(5), 3).await;
    s.queue.publish(s.submitted(&random_hex(16))).await;

    let mut refused = s.consume();
    let status = refused.wait_exit(Duration::from_secs(20));
    assert_eq!(status.code(), Some(2), "{}", refused.output());
    assert!(refused.output().contains(refusal), "{}", refused.output());
    assert_eq!(s.inbox_rows().await, 0);

    let mut env = s.env(&s.server.url());
    env.push((setting.0.into(), setting.1));
    let mut consume = Consume::with_env(&s.server.dir, &env);
    s.queue.wait_all_acked(Duration::from_secs(20)).await;
    assert!(consume.terminate().success(), "{}", consume.output());
    assert_eq!(s.totals().await, (1, 1, 1));
    [refused.output(), consume.output()]
}

#[tokio::test]
async fn a_server_that_wants_a_token_refuses_a_receiver_without_it_and_serves_one_with_it() {
    let server = NatsServer::start_with(NatsServerOptions {
        token: Some("sentinel-nats-token"),
        ..Default::default()
    });
    let outputs = refused_without_and_served_with(
        server,
        "refused the connection",
        ("NATS_TOKEN", "sentinel-nats-token".into()),
    )
    .await;
    for out in outputs {
        assert!(!out.contains("sentinel-nats-token"), "{out}");
    }
}

/// On a server that wants a login, `receiver check`, `receiver subscribe`
/// and `receiver consume` with `login` (variables over the plain URL) log
/// in: the checks pass, the consumer is found, an event is applied and
/// acknowledged; nothing prints any of `secrets`.
async fn check_subscribe_and_consume_log_in_with(
    server: NatsServer,
    login: &[(&str, String)],
    secrets: &[&str],
) {
    let s = Setup::on(server, Duration::from_secs(5), 3).await;
    s.queue.publish(s.submitted(&random_hex(16))).await;
    let mut env = s.env(&s.server.url());
    env.extend(login.iter().map(|(k, v)| (k.to_string(), v.clone())));

    let check = common::orbit::receiver()
        .arg("check")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&check.stdout).into_owned();
    let err = String::from_utf8_lossy(&check.stderr).into_owned();
    assert!(check.status.success(), "{out}{err}");
    assert!(
        out.contains("check=nats ok") && out.contains("check=consumer ok"),
        "{out}"
    );

    let subscribe = common::orbit::receiver()
        .args(["subscribe", "--source", "nats"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let sub_out = String::from_utf8_lossy(&subscribe.stdout).into_owned();
    let sub_err = String::from_utf8_lossy(&subscribe.stderr).into_owned();
    assert!(subscribe.status.success(), "{sub_out}{sub_err}");
    assert!(sub_out.contains("existing"), "{sub_out}");

    let mut consume = Consume::with_env(&s.server.dir, &env);
    s.queue.wait_all_acked(Duration::from_secs(20)).await;
    assert!(consume.terminate().success(), "{}", consume.output());
    assert_eq!(s.totals().await, (1, 1, 1));
    for text in [out, err, sub_out, sub_err, consume.output()] {
        for secret in secrets {
            assert!(!text.contains(secret), "{text}");
        }
    }
}

#[tokio::test]
async fn a_user_and_password_in_nats_url_are_sent_by_check_subscribe_and_consume() {
    let server = NatsServer::start_with(NatsServerOptions {
        user_password: Some(("receiver", "sentinel-url-p@ss")),
        ..Default::default()
    });
    let url = format!(
        "nats://receiver:sentinel-url-p%40ss@127.0.0.1:{}",
        server.port
    );
    check_subscribe_and_consume_log_in_with(server, &[("NATS_URL", url)], &["sentinel-url-p"])
        .await;
}

#[tokio::test]
async fn a_token_in_nats_url_or_nats_token_is_sent_by_check_subscribe_and_consume() {
    for login in ["url", "variable"] {
        let server = NatsServer::start_with(NatsServerOptions {
            token: Some("sentinel-nats-token"),
            ..Default::default()
        });
        let setting = match login {
            "url" => (
                "NATS_URL",
                format!("nats://sentinel-nats-token@127.0.0.1:{}", server.port),
            ),
            _ => ("NATS_TOKEN", "sentinel-nats-token".to_owned()),
        };
        check_subscribe_and_consume_log_in_with(server, &[setting], &["sentinel-nats-token"]).await;
    }
}

/// A loopback port nothing listens on: a server of a list that is down.
fn a_port_nobody_listens_on() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn check_subscribe_and_consume_take_a_list_of_servers_and_send_the_login_one_carries_to_each()
{
    let server = NatsServer::start_with(NatsServerOptions {
        user_password: Some(("receiver", "sentinel-list-p@ss")),
        ..Default::default()
    });
    // The login is written in the address of a server that is down: the
    // one that answers gets it all the same.
    let url = format!(
        "nats://receiver:sentinel-list-p%40ss@127.0.0.1:{}, nats://127.0.0.1:{}",
        a_port_nobody_listens_on(),
        server.port
    );
    check_subscribe_and_consume_log_in_with(server, &[("NATS_URL", url)], &["sentinel-list-p"])
        .await;
}

#[tokio::test]
async fn a_list_of_servers_gets_the_token_of_nats_token_on_each() {
    let server = NatsServer::start_with(NatsServerOptions {
        token: Some("sentinel-nats-token"),
        ..Default::default()
    });
    let url = format!(
        "nats://127.0.0.1:{},nats://127.0.0.1:{}",
        server.port,
        a_port_nobody_listens_on()
    );
    check_subscribe_and_consume_log_in_with(
        server,
        &[
            ("NATS_URL", url),
            ("NATS_TOKEN", "sentinel-nats-token".into()),
        ],
        &["sentinel-nats-token"],
    )
    .await;
}

#[tokio::test]
async fn a_credentials_file_in_nats_creds_file_is_sent_by_check_subscribe_and_consume() {
    let operator = TestOperator::new();
    let server = NatsServer::start_with(NatsServerOptions {
        operator: Some(&operator),
        ..Default::default()
    });
    let creds = server.creds_file().unwrap().display().to_string();

    // Without the file this server refuses the receiver: the login that
    // lets it in below is the file's, not an open door.
    let s = Setup::on(server, Duration::from_secs(5), 3).await;
    let refused = common::orbit::receiver()
        .args(["check", "--source", "nats"])
        .envs(s.env(&s.server.url()))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&refused.stdout);
    assert_eq!(refused.status.code(), Some(1), "{out}");
    assert!(out.contains("check=database ok\n"), "{out}");
    let refusal = format!(
        "check=nats FAIL NATS at {} refused the connection: authorization violation",
        s.server.url()
    );
    assert!(out.contains(&refusal), "{out}");

    check_subscribe_and_consume_log_in_with(
        s.server,
        &[("NATS_CREDS_FILE", creds)],
        &[&operator.user_seed, &operator.user_jwt],
    )
    .await;
}

#[tokio::test]
async fn over_tls_a_private_ca_is_trusted_by_nats_ca_file_and_an_unknown_one_is_refused() {
    let pki = TestPki::loopback();
    let server = NatsServer::start_with(NatsServerOptions {
        tls: Some(&pki),
        ..Default::default()
    });
    // Mozilla's roots do not know the test CA.
    refused_without_and_served_with(
        server,
        "refused the connection: TLS",
        ("NATS_CA_FILE", pki.ca.display().to_string()),
    )
    .await;
}

#[tokio::test]
async fn receiver_check_with_source_nats_checks_the_database_the_server_and_the_consumer() {
    let s = Setup::new(Duration::from_secs(1), 3).await;
    s.queue.publish(s.submitted(&random_hex(16))).await;
    let check = |extra: &[(&str, &str)]| {
        let mut command = common::orbit::receiver();
        command
            .arg("check")
            .envs(s.env(&s.server.url()))
            .envs(extra.iter().copied());
        command.output().unwrap()
    };
    let ok = check(&[]);
    assert_eq!(
        String::from_utf8_lossy(&ok.stdout),
        "check=database ok\ncheck=schema ok\ncheck=privileges ok\ncheck=nats ok\ncheck=consumer ok\n"
    );
    assert!(ok.status.success());
    let quiet = check(&[("RECEIVER_LOG", "warn")]);
    assert!(quiet.status.success());
    assert_eq!(
        String::from_utf8_lossy(&quiet.stderr),
        "",
        "warn silences every crate's info lines"
    );

    let wrong = check(&[("NATS_CONSUMER", "nobody")]);
    let out = String::from_utf8_lossy(&wrong.stdout);
    assert!(out.contains("check=nats ok\n"), "{out}");
    assert!(
        out.contains("check=consumer FAIL consumer nobody does not exist on stream"),
        "{out}"
    );
    assert_eq!(wrong.status.code(), Some(1), "{out}");
    assert_eq!(
        s.queue.info().await.delivered.stream_sequence,
        0,
        "nothing was fetched"
    );
}

/// `receiver subscribe --source nats` with this queue, stream and consumer
/// on the server(s) of `url`, and `args`.
fn subscribe(
    url: &str,
    queue: &str,
    stream: &str,
    consumer: &str,
    args: &[&str],
) -> std::process::Output {
    common::orbit::receiver()
        .args(["subscribe", "--source", "nats"])
        .args(args)
        .env("NATS_URL", url)
        .env("NATS_STREAM", stream)
        .env("NATS_CONSUMER", consumer)
        .env("ORBIT_QUEUE_ID", queue)
        .output()
        .unwrap()
}

#[tokio::test]
async fn receiver_subscribe_with_source_nats_creates_the_consumer_that_consume_then_consumes() {
    let server = NatsServer::start();
    let js = server.jetstream().await;
    let queue = random_hex(16);
    let subject = format!("orbit.results.{queue}");

    let refused = subscribe(&server.url(), &queue, "RESULTS", RECEIVER, &[]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains("stream RESULTS does not exist") && err.contains("--create-stream"),
        "{err}"
    );
    assert!(js.get_stream("RESULTS").await.is_err(), "nothing created");

    let created = subscribe(
        &server.url(),
        &queue,
        "RESULTS",
        RECEIVER,
        &["--create-stream", "--ack-wait", "20", "--max-deliver", "3"],
    );
    assert!(created.status.success(), "{created:?}");
    assert_eq!(
        String::from_utf8_lossy(&created.stdout),
        format!(
            "stream=RESULTS created subject={subject}\n\
             consumer={RECEIVER} stream=RESULTS created ack_wait_s=20 max_deliver=3\n\
             failures=RESULTS_{RECEIVER}_FAILURES created\n"
        )
    );
    let stream = js.get_stream("RESULTS").await.unwrap();
    let config = stream.consumer_info(RECEIVER).await.unwrap().config.clone();
    assert_eq!(config.durable_name.as_deref(), Some(RECEIVER));
    assert_eq!(config.deliver_subject, None, "a pull consumer");
    assert_eq!(
        config.ack_policy,
        async_nats::jetstream::consumer::AckPolicy::Explicit
    );
    assert_eq!(config.filter_subject, subject);
    assert_eq!(
        (config.ack_wait, config.max_deliver),
        (Duration::from_secs(20), 3)
    );

    let again = subscribe(
        &server.url(),
        &queue,
        "RESULTS",
        RECEIVER,
        &["--ack-wait", "60"],
    );
    assert!(again.status.success(), "{again:?}");
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        format!(
            "consumer={RECEIVER} stream=RESULTS existing ack_wait_s=20 max_deliver=3\n\
             failures=RESULTS_{RECEIVER}_FAILURES existing\n"
        )
    );
    let unchanged = stream.consumer_info(RECEIVER).await.unwrap().config.clone();
    assert_eq!(
        unchanged.ack_wait,
        Duration::from_secs(20),
        "left as it was"
    );
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("left as they are"),
        "{again:?}"
    );
    let quiet = subscribe(&server.url(), &queue, "RESULTS", RECEIVER, &[]);
    assert!(quiet.status.success(), "{quiet:?}");
    assert!(
        !String::from_utf8_lossy(&quiet.stderr).contains("left as they are"),
        "no warning when nothing was asked for: {quiet:?}"
    );

    // The queue as the tests' own set-up would have made it.
    let made = JetStreamQueue {
        js,
        queue,
        stream: "RESULTS".into(),
        consumer: RECEIVER.into(),
        subject,
    };
    made.publish(EventSpec::submitted(&made.queue, &random_hex(16)).json())
        .await;
    let malformed = made.publish("{not json").await;
    let s = Setup {
        server,
        queue: made,
        db: TestDb::initialized().await,
    };
    let mut consume = s.consume();
    s.queue.wait_all_acked(Duration::from_secs(20)).await;
    assert!(consume.terminate().success(), "{}", consume.output());
    assert_eq!(s.totals().await, (1, 1, 1));
    // What the receiver terminated was recorded by the stream `subscribe`
    // made, with no one listening for it.
    assert_eq!(
        untimed(&wait_failed(&s.settings(), 1).await),
        [FailedMessage {
            stream_sequence: malformed,
            reason: FailureReason::Terminated,
            deliveries: 1,
            failed_at: None,
            body: Some("{not json".into()),
            trace: None,
        }]
    );
}

#[tokio::test]
async fn receiver_subscribe_with_source_nats_leaves_a_stream_or_consumer_of_another_queue_as_it_is()
{
    let server = NatsServer::start();
    let js = server.jetstream().await;
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "RESULTS".into(),
        subjects: vec!["orbit.results.*".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let (queue, other_queue) = (random_hex(16), random_hex(16));
    let made = subscribe(&server.url(), &queue, "RESULTS", RECEIVER, &[]);
    assert!(made.status.success(), "{made:?}");
    assert_eq!(
        String::from_utf8_lossy(&made.stdout),
        format!(
            "consumer={RECEIVER} stream=RESULTS created ack_wait_s=30 max_deliver=10\n\
             failures=RESULTS_{RECEIVER}_FAILURES created\n"
        ),
        "the defaults"
    );

    let other = subscribe(&server.url(), &other_queue, "RESULTS", RECEIVER, &[]);
    let err = String::from_utf8_lossy(&other.stderr);
    assert_eq!(other.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("filters subject \"orbit.results.{queue}\""))
            && err.contains(&format!("\"orbit.results.{other_queue}\"")),
        "{err}"
    );
    let stream = js.get_stream("RESULTS").await.unwrap();
    let config = stream.consumer_info(RECEIVER).await.unwrap().config.clone();
    assert_eq!(
        config.filter_subject,
        format!("orbit.results.{queue}"),
        "unchanged"
    );

    // A stream of one queue's subject only (another server: subjects of
    // two streams may not overlap).
    let narrow = Setup::new(Duration::from_secs(10), 3).await;
    let out = subscribe(
        &narrow.server.url(),
        &other_queue,
        &narrow.queue.stream,
        &narrow.queue.consumer,
        &["--create-stream"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "does not hold subject \"orbit.results.{other_queue}\""
        )),
        "{err}"
    );
    let info = narrow.queue.info().await;
    assert_eq!(
        info.config.filter_subject, narrow.queue.subject,
        "unchanged"
    );
    assert_eq!(info.config.ack_wait, Duration::from_secs(10), "unchanged");
}

#[tokio::test]
async fn receiver_subscribe_with_replicas_3_keeps_the_stream_its_consumer_and_its_failures_stream_on_three_servers(
) {
    let cluster = NatsCluster::start().await;
    let js = cluster.jetstream().await;
    let queue = random_hex(16);
    let created = subscribe(
        &cluster.url(),
        &queue,
        "RESULTS",
        RECEIVER,
        &["--create-stream", "--replicas", "3"],
    );
    assert!(created.status.success(), "{created:?}");
    let failures = failures_stream_name("RESULTS", RECEIVER);
    for name in ["RESULTS", failures.as_str()] {
        let info = js
            .get_stream(name)
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .clone();
        assert_eq!(info.config.num_replicas, 3, "{name}");
        let placed = info.cluster.expect("a stream of a cluster");
        let mut nodes: Vec<String> = placed.replicas.iter().map(|p| p.name.clone()).collect();
        nodes.extend(placed.leader);
        nodes.sort();
        assert_eq!(nodes, ["n1", "n2", "n3"], "{name}");
    }
    let consumer = js
        .get_stream("RESULTS")
        .await
        .unwrap()
        .consumer_info(RECEIVER)
        .await
        .unwrap()
        .clone();
    assert_eq!(
        consumer
            .cluster
            .expect("a consumer of a cluster")
            .replicas
            .len(),
        2,
        "the consumer has its stream's replicas: a leader and two more"
    );

    let again = subscribe(
        &cluster.url(),
        &queue,
        "RESULTS",
        RECEIVER,
        &["--create-stream", "--replicas", "1"],
    );
    assert!(again.status.success(), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .contains("the stream exists with its own replicas, left as they are"),
        "{again:?}"
    );
    let info = js
        .get_stream("RESULTS")
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .clone();
    assert_eq!(info.config.num_replicas, 3, "left as it was");
}

#[tokio::test]
async fn receiver_subscribe_refuses_replicas_outside_one_to_five_and_more_than_one_server_can_keep()
{
    // Nothing listens on port 1: these refusals come before any connection.
    for replicas in ["0", "6", "three"] {
        let out = subscribe(
            "nats://127.0.0.1:1",
            &random_hex(16),
            "RESULTS",
            RECEIVER,
            &["--create-stream", "--replicas", replicas],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{replicas}: {err}");
        assert!(
            err.contains("--replicas") && err.contains("must be a whole number from 1 to 5"),
            "{replicas}: {err}"
        );
    }

    let server = NatsServer::start();
    let out = subscribe(
        &server.url(),
        &random_hex(16),
        "RESULTS",
        RECEIVER,
        &["--create-stream", "--replicas", "3"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("stream RESULTS cannot have 3 replicas"),
        "{err}"
    );
    assert!(
        server
            .jetstream()
            .await
            .get_stream("RESULTS")
            .await
            .is_err(),
        "nothing created"
    );
}

#[test]
fn receiver_subscribe_with_source_nats_refuses_a_lease_shorter_than_an_apply_before_connecting() {
    // Nothing listens on port 1: the refusal comes before any connection.
    let out = common::orbit::receiver()
        .args(["subscribe", "--source", "nats", "--ack-wait", "5"])
        .env("NATS_URL", "nats://127.0.0.1:1")
        .env("NATS_STREAM", "RESULTS")
        .env("NATS_CONSUMER", RECEIVER)
        .env("ORBIT_QUEUE_ID", random_hex(16))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--ack-wait 5s must be longer than the inbox's transaction budget of 5s"),
        "{err}"
    );
}

/// Behind a table lock on the inbox (every insert waits for it, well
/// inside the inbox's 5 s budget), 30 messages published to a running
/// receiver: its four handlers hang and it holds the sixteen it pulled
/// ahead. Returns the connection holding the lock once the server counts
/// those 20 unacknowledged.
async fn thirty_behind_a_lock(
    s: &Setup,
    consume: &Consume,
) -> sqlx::pool::PoolConnection<sqlx::MySql> {
    consume
        .wait_for_output(Duration::from_secs(20), |out| {
            out.contains("delivery stream open")
        })
        .await;
    let mut lock = s.db.pool().await.acquire().await.unwrap();
    sqlx::query("LOCK TABLES receiver_inbox WRITE")
        .execute(&mut *lock)
        .await
        .unwrap();
    for _ in 0..30 {
        s.queue.publish(s.submitted(&random_hex(16))).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while s.queue.info().await.num_ack_pending < 20 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            consume.output()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    lock
}

async fn unlock(mut lock: sqlx::pool::PoolConnection<sqlx::MySql>) {
    sqlx::query("UNLOCK TABLES")
        .execute(&mut *lock)
        .await
        .unwrap();
}

#[tokio::test]
async fn by_default_a_receiver_holds_sixteen_messages_beyond_its_four_slots_and_pulls_no_more() {
    let s = Setup::new(Duration::from_secs(30), 5).await;
    let mut consume = s.consume();
    let lock = thirty_behind_a_lock(&s, &consume).await;
    // Long enough for a receiver that asked for more to get it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let info = s.queue.info().await;
    assert_eq!((info.num_ack_pending, info.num_pending), (20, 10));

    unlock(lock).await;
    s.queue.wait_all_acked(Duration::from_secs(20)).await;
    assert!(consume.terminate().success(), "{}", consume.output());
    assert_eq!(s.totals().await, (30, 30, 30));
}

#[tokio::test]
async fn at_sigterm_held_messages_are_given_back_and_come_again_before_their_ack_wait() {
    let s = Setup::new(Duration::from_secs(30), 5).await;
    let mut env = s.env(&s.server.url());
    env.push(("RECEIVER_METRICS_ADDR".into(), "127.0.0.1:0".into()));
    let mut first = Consume::with_env(&s.server.dir, &env);
    let lock = thirty_behind_a_lock(&s, &first).await;
    // The server counts a message pending its ACK once it sent it; the
    // signal must find all twenty in the receiver's hands.
    let metrics = first.metrics_url().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let page = common::metrics::scrape(&metrics).await;
        let count = |name| common::metrics::value(&page, name, &[]).unwrap_or(0.0);
        if count("receiver_deliveries_held") + count("receiver_deliveries_in_flight") >= 20.0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", first.output());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(first.terminate().success(), "{}", first.output());
    assert!(first.output().contains("released=16"), "{}", first.output());

    unlock(lock).await;
    let mut second = s.consume();
    // The sixteen given back and the ten never pulled, long before the 30 s
    // AckWait would have brought them.
    s.wait_rows(26, Duration::from_secs(10)).await;
    assert!(second.terminate().success(), "{}", second.output());
    assert_eq!(s.totals().await, (26, 26, 26));
}

#[tokio::test]
async fn a_mistyped_receiver_name_is_warned_about_by_check_and_consume_which_still_run() {
    let s = Setup::new(Duration::from_secs(30), 3).await;
    s.queue.publish(s.submitted(&random_hex(16))).await;
    let mut consume = s.consume();
    s.queue.wait_all_acked(Duration::from_secs(20)).await;
    consume.terminate();
    let warning = r#"receiver name "task-result-veiw" has no rows on queue"#;
    let mut typo = s.env(&s.server.url());
    typo.retain(|(k, _)| k != "RECEIVER_NAME");
    typo.push(("RECEIVER_NAME".into(), "task-result-veiw".into()));

    let check = common::orbit::receiver()
        .arg("check")
        .envs(typo.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&check.stderr).into_owned();
    assert!(check.status.success(), "a warning, not a refusal: {err}");
    assert!(
        err.contains(warning) && err.contains(r#"where "task-result-view" has"#),
        "{err}"
    );

    let mut consume = Consume::with_env(&s.server.dir, &typo);
    consume
        .wait_for_output(Duration::from_secs(20), |out| {
            out.contains("consuming receiver=task-result-veiw")
        })
        .await;
    assert!(consume.running(), "{}", consume.output());
    assert!(consume.terminate().success(), "{}", consume.output());
    assert!(consume.output().contains(warning), "{}", consume.output());

    // Under the name that has rows, neither says anything.
    let right = common::orbit::receiver()
        .arg("check")
        .envs(s.env(&s.server.url()))
        .output()
        .unwrap();
    assert!(right.status.success());
    assert!(
        !String::from_utf8_lossy(&right.stderr).contains("has no rows"),
        "{}",
        String::from_utf8_lossy(&right.stderr)
    );
}

/// `orbit-dev bridge` with `nats_url` (whose login is `bridge`,
/// `sentinel-bridge-p@ss`) publishes an event to `server` and never prints
/// the password.
async fn bridge_logs_in_through(server: NatsServer, nats_url: String) {
    let (orbit, creds, sub) = common::orbit::OrbitDev::subscribed(30_000, 5, "bridge-login").await;
    let queue = JetStreamQueue::create(&server, &creds.queue_id, Duration::from_secs(30), 3).await;
    orbit.inject_new_task(&creds, &sub).await;
    let mut bridge = std::process::Command::new(common::orbit::bin_dir().join("orbit-dev"))
        .arg("bridge")
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
        .env("NATS_URL", nats_url)
        .env_remove("ORBIT_URL")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The event reaches the stream only through a bridge the server let in.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while queue.info().await.num_pending == 0 {
        if tokio::time::Instant::now() > deadline || bridge.try_wait().unwrap().is_some() {
            bridge.kill().ok();
            let out = bridge.wait_with_output().unwrap();
            panic!(
                "nothing published: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    common::sigterm(bridge.id());
    let out = bridge.wait_with_output().unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(printed.contains("<redacted>@127.0.0.1"), "{printed}");
    assert!(!printed.contains("sentinel-bridge-p"), "{printed}");
}

#[tokio::test]
async fn orbit_dev_bridge_sends_the_user_and_password_in_nats_url_and_never_prints_them() {
    let server = NatsServer::start_with(NatsServerOptions {
        user_password: Some(("bridge", "sentinel-bridge-p@ss")),
        ..Default::default()
    });
    let url = format!(
        "nats://bridge:sentinel-bridge-p%40ss@127.0.0.1:{}",
        server.port
    );
    bridge_logs_in_through(server, url).await;
}

#[tokio::test]
async fn orbit_dev_bridge_takes_a_list_of_servers_and_sends_the_login_one_carries_to_each() {
    let server = NatsServer::start_with(NatsServerOptions {
        user_password: Some(("bridge", "sentinel-bridge-p@ss")),
        ..Default::default()
    });
    let url = format!(
        "nats://bridge:sentinel-bridge-p%40ss@127.0.0.1:{},nats://127.0.0.1:{}",
        a_port_nobody_listens_on(),
        server.port
    );
    bridge_logs_in_through(server, url).await;
}

/// The time limit of every request the tests make through the library.
const CALL: Duration = Duration::from_secs(5);

/// Waits until `failed_messages` lists `n` messages (the server records an
/// advisory a moment after it sends it).
/// The messages with their time left out, once checked: JetStream's
/// advisory gave each one, in UTC.
fn untimed(listed: &[FailedMessage]) -> Vec<FailedMessage> {
    listed
        .iter()
        .map(|m| {
            let at = m.failed_at.as_deref().unwrap_or_else(|| panic!("{m:?}"));
            assert!(at.starts_with("20") && at.ends_with('Z'), "{at}");
            FailedMessage {
                failed_at: None,
                ..m.clone()
            }
        })
        .collect()
}

async fn wait_failed(settings: &NatsSettings, n: usize) -> Vec<FailedMessage> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let listed = failed_messages(settings, CALL).await.unwrap();
        if listed.len() >= n {
            return listed;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} failed messages listed, not {n}: {listed:?}",
            listed.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn failed_messages_lists_what_reached_max_deliver_or_was_terminated_and_replay_brings_it_back(
) {
    let s = Setup::new(Duration::from_secs(1), 2).await;
    let settings = s.settings();
    let first = provision(&settings, CALL, &ConsumerSpec::default())
        .await
        .unwrap();
    assert!(
        first.failures_stream_created && !first.consumer_created && !first.stream_created,
        "{first:?}"
    );
    let again = provision(&settings, CALL, &ConsumerSpec::default())
        .await
        .unwrap();
    assert!(!again.failures_stream_created, "{again:?}");
    let failures = s
        .queue
        .js
        .get_stream(failures_stream_name(&s.queue.stream, &s.queue.consumer))
        .await
        .unwrap();
    assert_eq!(
        failures.cached_info().config.storage,
        async_nats::jetstream::stream::StorageType::File
    );
    assert_eq!(failed_messages(&settings, CALL).await.unwrap(), []);

    // Bytes no UTF-8 could hold, published with a message id as the bridge
    // publishes, and a valid event.
    let exhausted: &[u8] = b"\xff\x00{\"task\": \"never acknowledged\"}\r\n";
    let exhausted_seq = s
        .queue
        .publish_with_id(exhausted.to_vec(), &random_hex(16))
        .await;
    let terminated_body = s.submitted(&random_hex(16));
    let terminated_seq = s.queue.publish(terminated_body.clone()).await;

    // A client pulls both: it terminates one and lets the other's AckWait
    // pass, twice, until MaxDeliver (2) is spent. No one listens to the
    // advisories meanwhile.
    let consumer = s.queue.pull_consumer().await;
    let delivered = pull(&consumer, 2, Duration::from_secs(5)).await;
    assert_eq!(delivered.len(), 2);
    for message in delivered {
        if message.info().unwrap().stream_sequence == terminated_seq {
            message.ack_with(AckKind::Term).await.unwrap();
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let listed = loop {
        // Only a pull lets the server find the budget spent.
        pull(&consumer, 1, Duration::from_millis(500)).await;
        let listed = failed_messages(&settings, CALL).await.unwrap();
        if listed.len() == 2 {
            break listed;
        }
        assert!(tokio::time::Instant::now() < deadline, "{listed:?}");
    };
    assert_eq!(
        untimed(&listed),
        [
            FailedMessage {
                stream_sequence: exhausted_seq,
                reason: FailureReason::MaxDeliveries,
                deliveries: 2,
                failed_at: None,
                body: Some(exhausted.to_vec().into()),
                trace: None,
            },
            FailedMessage {
                stream_sequence: terminated_seq,
                reason: FailureReason::Terminated,
                deliveries: 1,
                failed_at: None,
                body: Some(terminated_body.clone().into()),
                trace: None,
            },
        ]
    );
    let shown = format!("{listed:?}");
    assert!(
        !shown.contains("never acknowledged") && !shown.contains("task.submitted"),
        "{shown}"
    );

    // Replayed, it is a new message the consumer delivers afresh, although
    // the stream's duplicate window still remembers the original's id.
    let replayed = replay(&settings, CALL, &listed[0]).await.unwrap();
    assert!(replayed > terminated_seq, "{replayed}");
    let delivered = pull(&consumer, 1, Duration::from_secs(5)).await;
    assert_eq!(delivered.len(), 1);
    let info = delivered[0].info().unwrap();
    assert_eq!((info.stream_sequence, info.delivered), (replayed, 1));
    assert_eq!(delivered[0].payload.as_ref(), exhausted);
    assert_eq!(
        delivered[0]
            .headers
            .as_ref()
            .and_then(|h| h.get("Result-Inbox-Replay-Of"))
            .map(|v| v.as_str().to_owned()),
        Some(format!("{}:{exhausted_seq}", s.queue.stream))
    );
    delivered[0].ack().await.unwrap();
    assert_eq!(
        failed_messages(&settings, CALL).await.unwrap(),
        [listed[1].clone()],
        "the replayed one is no longer listed"
    );

    let replayed_too = replay(&settings, CALL, &listed[1]).await.unwrap();
    assert!(replayed_too > replayed);
    assert_eq!(failed_messages(&settings, CALL).await.unwrap(), []);
    // Records and markers stay: the list is what they say together.
    assert_eq!(failures.get_info().await.unwrap().state.messages, 4);
    // A replay that fails again is a new failure of its new sequence.
    let delivered = pull(&consumer, 1, Duration::from_secs(5)).await;
    delivered[0].ack_with(AckKind::Term).await.unwrap();
    let listed = wait_failed(&settings, 1).await;
    assert_eq!(
        (listed[0].stream_sequence, listed[0].reason),
        (replayed_too, FailureReason::Terminated)
    );
}

#[tokio::test]
async fn a_replayed_copy_carries_the_trace_context_of_the_message_it_copies() {
    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const STATE: &str = "vendor=opaque";
    let s = Setup::new(Duration::from_secs(1), 2).await;
    let settings = s.settings();
    provision(&settings, CALL, &ConsumerSpec::default())
        .await
        .unwrap();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("traceparent", PARENT);
    headers.insert("tracestate", STATE);
    s.queue
        .js
        .publish_with_headers(
            s.queue.subject.clone(),
            headers,
            s.submitted(&random_hex(16)).into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let consumer = s.queue.pull_consumer().await;
    let delivered = pull(&consumer, 1, Duration::from_secs(5)).await;
    delivered[0].ack_with(AckKind::Term).await.unwrap();
    let listed = wait_failed(&settings, 1).await;
    assert_eq!(
        listed[0].trace,
        result_inbox::delivery::TraceContext::parse(PARENT, Some(STATE))
    );
    assert!(listed[0].trace.is_some());

    replay(&settings, CALL, &listed[0]).await.unwrap();
    let delivered = pull(&consumer, 1, Duration::from_secs(5)).await;
    let header = |name: &str| {
        delivered[0]
            .headers
            .as_ref()
            .and_then(|h| h.get(name))
            .map(|v| v.as_str().to_owned())
    };
    assert_eq!(header("traceparent").as_deref(), Some(PARENT));
    assert_eq!(header("tracestate").as_deref(), Some(STATE));
    delivered[0].ack().await.unwrap();
}

#[tokio::test]
async fn without_a_failures_stream_or_a_body_nothing_is_listed_or_replayed_and_the_error_says_why()
{
    let s = Setup::new(Duration::from_secs(30), 3).await;
    let settings = s.settings();
    let missing = failed_messages(&settings, CALL).await.unwrap_err();
    assert!(
        matches!(missing, NatsError::NoFailuresStream { .. }) && missing.is_configuration(),
        "{missing:?}"
    );
    let text = missing.to_string();
    assert!(
        text.contains("receiver subscribe --source nats")
            && text.contains(&failures_stream_name(&s.queue.stream, &s.queue.consumer)),
        "{text}"
    );

    provision(&settings, CALL, &ConsumerSpec::default())
        .await
        .unwrap();
    let gone = s.queue.publish(s.submitted(&random_hex(16))).await;
    let consumer = s.queue.pull_consumer().await;
    let delivered = pull(&consumer, 1, Duration::from_secs(5)).await;
    delivered[0].ack_with(AckKind::Term).await.unwrap();
    wait_failed(&settings, 1).await;
    let stream = s.queue.js.get_stream(&s.queue.stream).await.unwrap();
    assert!(stream.delete_message(gone).await.unwrap());
    let listed = failed_messages(&settings, CALL).await.unwrap();
    assert_eq!(
        untimed(&listed),
        [FailedMessage {
            stream_sequence: gone,
            reason: FailureReason::Terminated,
            deliveries: 1,
            failed_at: None,
            body: None,
            trace: None,
        }]
    );
    let refused = replay(&settings, CALL, &listed[0]).await.unwrap_err();
    assert_eq!(
        refused,
        NatsError::MessageGone {
            stream: s.queue.stream.clone(),
            sequence: gone,
        }
    );
    assert!(refused
        .to_string()
        .contains(&format!("message {gone} of stream")));
    assert_eq!(failed_messages(&settings, CALL).await.unwrap(), listed);
    assert_eq!(stream.get_info().await.unwrap().state.last_sequence, gone);
}

#[tokio::test]
async fn a_stream_of_the_failures_stream_s_name_that_records_something_else_is_refused_before_anything_is_created(
) {
    let s = Setup::new(Duration::from_secs(30), 3).await;
    let mut settings = s.settings();
    settings.consumer = "other-receiver".into();
    let name = failures_stream_name(&settings.stream, &settings.consumer);
    s.queue
        .js
        .create_stream(async_nats::jetstream::stream::Config {
            name: name.clone(),
            subjects: vec!["elsewhere.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let refused = provision(&settings, CALL, &ConsumerSpec::default())
        .await
        .unwrap_err();
    assert!(
        matches!(refused, NatsError::FailuresStreamSubjects { ref missing, .. } if missing.len() == 3),
        "{refused:?}"
    );
    assert!(refused.to_string().contains(&name), "{refused}");
    let stream = s.queue.js.get_stream(&s.queue.stream).await.unwrap();
    assert!(
        stream.consumer_info("other-receiver").await.is_err(),
        "no consumer was created"
    );
}

/// Publishes `event` with its id as `Nats-Msg-Id`, as the bridge does,
/// until the stream has it: a cluster electing a leader answers nothing for
/// a moment, and the id keeps a publish that was stored but not confirmed
/// from being stored twice.
async fn publish_until_stored(queue: &JetStreamQueue, event: &EventSpec<'_>) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", event.id.as_str());
        let stored = async {
            queue
                .js
                .publish_with_headers(queue.subject.clone(), headers, event.json().into())
                .await?
                .await
        }
        .await;
        match stored {
            Ok(_) => return,
            Err(e) => assert!(
                tokio::time::Instant::now() < deadline,
                "event {} not stored: {e}",
                event.id
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The node that leads `stream`, or its `consumer` when one is named;
/// `None` while none does (an election) or no answer comes.
async fn leader_of(
    js: &async_nats::jetstream::Context,
    stream: &str,
    consumer: Option<&str>,
) -> Option<String> {
    let mut handle = js.get_stream(stream).await.ok()?;
    let placed = match consumer {
        None => handle.info().await.ok()?.cluster.clone(),
        Some(consumer) => handle.consumer_info(consumer).await.ok()?.cluster.clone(),
    };
    placed?.leader
}

/// Asks the leader of `stream` (or of its `consumer`) to step down until
/// `node` leads it: each election picks one of the other replicas.
async fn lead_on(
    js: &async_nats::jetstream::Context,
    node: &str,
    stream: &str,
    consumer: Option<&str>,
) {
    let mut js = js.clone();
    js.set_timeout(Duration::from_secs(1));
    let step_down = match consumer {
        None => format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}"),
        Some(consumer) => format!("$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{consumer}"),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let leader = leader_of(&js, stream, consumer).await;
        if leader.as_deref() == Some(node) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{node} does not lead {stream} {consumer:?}: {leader:?} does"
        );
        if leader.is_some() {
            let _ = js.client().request(step_down.clone(), "".into()).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Where the leader of the stream and its consumer is when it dies.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Leader {
    /// On the server the receiver talks to: the receiver must connect to
    /// another server of its list.
    WhereTheReceiverIs,
    /// On another server: the receiver's connection stays, and its pull
    /// requests die with the leader that held them.
    Elsewhere,
}

/// On a three-node cluster, with the stream and its consumer created by
/// `receiver subscribe --replicas 3` and led from one node as `leader`
/// says: `receiver consume`, given every node, applies 500 events, the
/// leader's node is killed (SIGKILL) while it does, 100 more are published
/// through the two left, and every one is applied once and acknowledged by
/// the same process.
async fn consume_outlives_the_death_of_the_leader(leader: Leader) {
    const BEFORE: usize = 500;
    const AFTER: usize = 100;
    let mut cluster = NatsCluster::start().await;
    let queue_id = random_hex(16);
    let made = subscribe(
        &cluster.url(),
        &queue_id,
        "RESULTS",
        RECEIVER,
        &["--create-stream", "--replicas", "3", "--ack-wait", "6"],
    );
    assert!(made.status.success(), "{made:?}");
    let queue = JetStreamQueue {
        js: cluster.jetstream().await,
        subject: NatsSettings::default_subject(&QueueId::parse(&queue_id).unwrap()),
        queue: queue_id,
        stream: "RESULTS".into(),
        consumer: RECEIVER.into(),
    };
    let db = TestDb::initialized().await;
    let mut env = queue.env(&cluster.url());
    env.push(("ORBIT_RECEIVER_DSN".into(), dsn_for(&db.name)));
    env.push(("RECEIVER_NAME".into(), RECEIVER.into()));
    let logs = cluster.nodes[0].dir.clone();
    let mut consume = Consume::with_env(&logs, &env);
    consume
        .wait_for_output(Duration::from_secs(20), |out| {
            out.contains("delivery stream open")
        })
        .await;
    let output = consume.output();
    let receivers_node = output
        .split(" server=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the receiver names the server it is connected to")
        .to_owned();
    let node = match leader {
        Leader::WhereTheReceiverIs => receivers_node,
        Leader::Elsewhere => ["n1", "n2", "n3"]
            .into_iter()
            .find(|n| *n != receivers_node)
            .unwrap()
            .to_owned(),
    };
    // The stream and its consumer led from one node, so that its death
    // takes both leaders at once.
    lead_on(&queue.js, &node, "RESULTS", None).await;
    lead_on(&queue.js, &node, "RESULTS", Some(RECEIVER)).await;

    let tasks: Vec<String> = (0..BEFORE + AFTER).map(|_| random_hex(16)).collect();
    let events: Vec<EventSpec<'_>> = tasks
        .iter()
        .map(|task| EventSpec::submitted(&queue.queue, task))
        .collect();
    // All at once, so that the stream holds them well before the receiver
    // can have applied them: one after the other, the receiver keeps pace
    // with the publisher on a fast machine, and the leader would die after
    // the last was applied.
    join_all(
        events[..BEFORE]
            .iter()
            .map(|event| publish_until_stored(&queue, event)),
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while totals(&db).await.0 < 20 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            consume.output()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        leader_of(&queue.js, "RESULTS", None).await.as_deref(),
        Some(node.as_str()),
        "the stream's leader"
    );
    cluster.node(&node).kill();
    let applied_before = totals(&db).await.0;
    assert!(
        applied_before < BEFORE as i64,
        "the leader died while consume ran: {applied_before} of {BEFORE} applied before"
    );
    for event in &events[BEFORE..] {
        publish_until_stored(&queue, event).await;
    }

    queue.wait_all_acked(Duration::from_secs(40)).await;
    assert!(consume.running(), "{}", consume.output());
    assert!(consume.terminate().success(), "{}", consume.output());
    let total = (BEFORE + AFTER) as i64;
    assert_eq!(
        totals(&db).await,
        (total, total, total),
        "{}",
        consume.output()
    );
    let advanced_once: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM receiver_task_views WHERE applied_events = 1 AND task_version = 1",
    )
    .fetch_one(&db.pool().await)
    .await
    .unwrap();
    assert_eq!(advanced_once, total, "every task's view advanced once");
}

#[tokio::test]
async fn consume_given_every_server_of_a_cluster_applies_each_event_once_when_the_leader_it_talks_to_is_killed(
) {
    consume_outlives_the_death_of_the_leader(Leader::WhereTheReceiverIs).await;
}

#[tokio::test]
async fn consume_given_every_server_of_a_cluster_applies_each_event_once_when_the_leader_elsewhere_is_killed(
) {
    consume_outlives_the_death_of_the_leader(Leader::Elsewhere).await;
}
