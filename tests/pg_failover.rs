//! Failovers of PostgreSQL under running `receiver consume`s: pg_auto_failover
//! formations of the tests' own (a monitor and two or three data nodes on
//! loopback), the receiver given the monitor's address of every node
//! exactly as `pg_autoctl show uri` prints it, failovers while events are
//! applied at full rate, and every consumer restarted after each failover
//! with that same address (whose first host is then a standby): every
//! event applied once, every delivery ACKed, nothing lost on the new
//! primary; and what a two-node formation risks while its standby is down
//! is said by `check` and `consume`.

use crate::common;

use std::process::Output;
use std::time::Duration;

use common::consume::Consume;
use common::orbit::{http, receiver, OrbitDev, QueueCredentials};
use common::postgres::Formation;
use result_inbox::ids::SubscriptionId;
use sqlx::{Connection, PgConnection};

const NAME: &str = "task-result-view";
const EVENTS: u64 = 600;

/// The formation's primary, as the `postgres` role.
async fn connect(port: u16) -> PgConnection {
    PgConnection::connect(&format!(
        "postgres://postgres@127.0.0.1:{port}/receiver?sslmode=disable"
    ))
    .await
    .unwrap()
}

/// The port of the first host of a `postgres://h1:p1,h2:p2/…` address.
fn first_port(uri: &str) -> u16 {
    let hosts = uri.split('@').nth(1).unwrap().split('/').next().unwrap();
    let first = hosts.split(',').next().unwrap();
    first.rsplit(':').next().unwrap().parse().unwrap()
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// `receiver <args>` as an operator runs it on the formation's address.
fn command(args: &[&str], dsn: &str, creds: &QueueCredentials, sub: &SubscriptionId) -> Output {
    receiver()
        .args(args)
        .env("ORBIT_RECEIVER_DSN", dsn)
        .env("RECEIVER_PRUNE_DSN", dsn)
        .env("ORBIT_CREDENTIALS_FILE", &creds.file)
        .env("ORBIT_SUBSCRIPTION_ID", sub.as_str())
        .env("ORBIT_QUEUE_ID", &creds.queue_id)
        .env("RECEIVER_NAME", NAME)
        .output()
        .unwrap()
}

/// Every event applied once on the primary of `port`: `events` inbox rows,
/// all applied, as many views, each advanced once.
async fn assert_applied_once(port: u16, events: u64) {
    let mut conn = connect(port).await;
    let counts: (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM receiver_inbox), \
         (SELECT coalesce(sum(applied), 0)::bigint FROM receiver_inbox), \
         (SELECT count(*) FROM receiver_task_views), \
         (SELECT coalesce(sum(applied_events), 0)::bigint FROM receiver_task_views)",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    let n = events as i64;
    assert_eq!(counts, (n, n, n, n));
    conn.close().await.unwrap();
}

/// A COMMIT whose answer a failover cut was not ACKed; its redelivery
/// found what the server did, once.
fn assert_unconfirmed_settled_once(out: &str) {
    for line in out.lines().filter(|l| l.contains(r#"class="unconfirmed""#)) {
        let event = line
            .split_whitespace()
            .find(|w| w.starts_with("event="))
            .unwrap();
        let settled = out
            .lines()
            .filter(|l| {
                l.contains(event)
                    && (l.contains(r#"class="duplicate""#) || l.contains(r#"class="applied""#))
            })
            .count();
        assert_eq!(settled, 1, "{event}: {out}");
    }
}

/// `receiver consume` on `dsn`, once its delivery stream is open: a
/// consumer stopped before it installed its signal handlers would end by
/// the signal, not by its drain.
async fn consuming(
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    dsn: &str,
    sub: &SubscriptionId,
    extra: &[(&str, &str)],
) -> Consume {
    let consume = Consume::start(orbit, creds, dsn, sub, NAME, extra);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !consume.output().contains("delivery stream open") {
        assert!(std::time::Instant::now() < deadline, "{}", consume.output());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    consume
}

/// `receiver check` until it says `expected` of the replication (a
/// standby that just joined streams before the primary counts it as
/// synchronous), at most 30 s; what it printed last.
fn check_until(
    dsn: &str,
    creds: &QueueCredentials,
    sub: &SubscriptionId,
    expected: &str,
) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = check(dsn, creds, sub);
        if out.contains(expected) || std::time::Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `receiver check` on the formation's address answers within seconds.
fn check(dsn: &str, creds: &QueueCredentials, sub: &SubscriptionId) -> String {
    let started = std::time::Instant::now();
    let o = command(&["check"], dsn, creds, sub);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(started.elapsed() < Duration::from_secs(20), "{out}");
    out
}

#[tokio::test]
async fn on_pg_auto_failover_a_failover_at_full_rate_loses_nothing_and_a_restart_finds_the_new_primary(
) {
    let mut formation = Formation::start("receiver").await;
    formation.notice_failures_quickly().await;
    let first_primary = formation.primary_port().await.unwrap();
    let dsn = formation.uri();
    assert!(dsn.contains(",127.0.0.1:"), "every node: {dsn}");

    // What the receiver needs of the cluster: a COMMIT it is told of is on
    // the synchronous standby too.
    let mut primary = connect(first_primary).await;
    let (standbys, commit): (String, String) = sqlx::query_as(
        "SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit')",
    )
    .fetch_one(&mut primary)
    .await
    .unwrap();
    assert!(standbys.starts_with("ANY 1 ("), "{standbys}");
    assert_eq!(commit, "on");
    primary.close().await.unwrap();

    let init = receiver()
        .args(["init", "--retention"])
        .env("ORBIT_RECEIVER_DSN", &dsn)
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", text(&init));

    let (orbit, creds, sub) = OrbitDev::subscribed(5_000, 20, "pg-failover").await;
    let expected = "check=replication ok synchronous_standbys=1 standbys=1";
    let out = check_until(&dsn, &creds, &sub, expected);
    assert!(out.contains(expected), "{out}");
    for _ in 0..EVENTS {
        orbit.inject_new_task(&creds, &sub).await;
    }
    let mut consume = consuming(&orbit, &creds, &dsn, &sub, &[]).await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(60), |c| {
            c["acked"].as_u64().unwrap_or(0) >= EVENTS / 4
        })
        .await;
    formation.failover();
    formation.wait_for(&["primary", "secondary"], 120).await;
    let new_primary = formation.primary_port().await.unwrap();
    assert_ne!(new_primary, first_primary, "the failover moved the primary");
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(120), |c| {
            c["acked"] == EVENTS
        })
        .await;
    assert!(consume.terminate().success(), "{}", consume.output());
    assert_applied_once(new_primary, EVENTS).await;
    // The failover was felt: the breaker opened and closed again.
    let out = consume.output();
    assert!(out.contains("database unreachable"), "{out}");
    assert!(out.contains("database answers again"), "{out}");
    assert_unconfirmed_settled_once(&out);

    // Restarted with the address as the monitor prints it, whose first
    // host is now the standby: every command finds the new primary.
    let dsn = formation.uri();
    assert_eq!(first_port(&dsn), first_primary, "{dsn}");
    check(&dsn, &creds, &sub);
    let failures = command(&["failures"], &dsn, &creds, &sub);
    let said = text(&failures);
    assert!(
        said.contains(&format!(" database=127.0.0.1:{new_primary}")),
        "failures names the host it read from: {said}"
    );
    let prune = command(&["prune", "--older-than", "30d"], &dsn, &creds, &sub);
    assert!(prune.status.success(), "{}", text(&prune));
    for _ in 0..EVENTS / 6 {
        orbit.inject_new_task(&creds, &sub).await;
    }
    let metrics = [("RECEIVER_METRICS_ADDR", "127.0.0.1:0")];
    let mut consume = consuming(&orbit, &creds, &dsn, &sub, &metrics).await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(30), |c| {
            c["acked"] == EVENTS + EVENTS / 6
        })
        .await;
    assert_applied_once(new_primary, EVENTS + EVENTS / 6).await;
    let url = consume.metrics_url().await;
    let gauge = |body: &str| {
        common::metrics::value(
            &common::metrics::parse(body),
            "receiver_database_synchronous_standbys",
            &[],
        )
        .map(|v| v.to_string())
    };
    let (_, body) = http("GET", &format!("{url}/metrics"), "", String::new()).await;
    assert_eq!(gauge(&body).as_deref(), Some("1"), "{body}");

    // The standby lost: the primary goes on alone (wait_primary), and
    // what a failover could then lose is said, not hidden.
    formation.crash(first_primary);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let out = loop {
        let out = consume.output();
        if out.contains("database replication not synchronous") {
            break out;
        }
        assert!(std::time::Instant::now() < deadline, "{out}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(out.contains("synchronous_standbys=0"), "{out}");
    let (_, body) = http("GET", &format!("{url}/metrics"), "", String::new()).await;
    assert_eq!(gauge(&body).as_deref(), Some("0"), "{body}");
    let out = check(&dsn, &creds, &sub);
    assert!(
        out.contains("check=replication WARN synchronous_standbys=0")
            && out.contains("can lose commits"),
        "{out}"
    );
    assert!(consume.terminate().success(), "{}", consume.output());
}

#[tokio::test]
async fn on_three_nodes_a_planned_failover_and_a_crashed_primary_lose_nothing_and_apply_nothing_twice(
) {
    let mut formation = Formation::start_three("receiver").await;
    formation.notice_failures_quickly().await;
    let dsn = formation.uri();
    let init = receiver()
        .arg("init")
        .env("ORBIT_RECEIVER_DSN", &dsn)
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", text(&init));
    let (orbit, creds, sub) = OrbitDev::subscribed(5_000, 20, "pg-three").await;
    let expected = "check=replication ok synchronous_standbys=2 standbys=2";
    let out = check_until(&dsn, &creds, &sub, expected);
    assert!(out.contains(expected), "{out}");
    for _ in 0..EVENTS {
        orbit.inject_new_task(&creds, &sub).await;
    }
    let acked = |n: u64| move |c: &serde_json::Value| c["acked"].as_u64().unwrap_or(0) >= n;
    let mut outputs = String::new();

    // A planned failover at a quarter, the consumer restarted after it.
    let mut consume = consuming(&orbit, &creds, &dsn, &sub, &[]).await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(60), acked(EVENTS / 4))
        .await;
    let first = formation.primary_port().await.unwrap();
    formation.failover();
    formation
        .wait_for(&["primary", "secondary", "secondary"], 120)
        .await;
    let second = formation.primary_port().await.unwrap();
    assert_ne!(second, first, "the failover moved the primary");
    assert!(consume.terminate().success(), "{}", consume.output());
    outputs += &consume.output();
    let dsn = formation.uri();
    check(&dsn, &creds, &sub);
    let mut consume = consuming(&orbit, &creds, &dsn, &sub, &[]).await;

    // The primary's node crashed at half, the consumer restarted after it.
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(60), acked(EVENTS / 2))
        .await;
    formation.crash(second);
    formation.wait_for(&["primary", "secondary"], 120).await;
    let third = formation.primary_port().await.unwrap();
    assert_ne!(third, second, "the crash moved the primary");
    assert!(consume.terminate().success(), "{}", consume.output());
    outputs += &consume.output();
    let dsn = formation.uri();
    let expected = "check=replication ok synchronous_standbys=1";
    let out = check_until(&dsn, &creds, &sub, expected);
    assert!(out.contains(expected), "{out}");
    // Work for the consumer restarted after the crash, whatever the one
    // before it finished.
    for _ in 0..EVENTS / 6 {
        orbit.inject_new_task(&creds, &sub).await;
    }
    let all = EVENTS + EVENTS / 6;
    let mut consume = consuming(&orbit, &creds, &dsn, &sub, &[]).await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(120), |c| {
            c["acked"] == all
        })
        .await;
    assert!(consume.terminate().success(), "{}", consume.output());
    outputs += &consume.output();
    assert_applied_once(third, all).await;
    assert_unconfirmed_settled_once(&outputs);
}
