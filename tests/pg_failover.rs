//! A failover of PostgreSQL under a running `receiver consume`: a
//! pg_auto_failover formation of the test's own (a monitor, a primary and a
//! synchronous secondary on loopback), the receiver given the monitor's
//! address of every node (`pg_autoctl show uri`), and a failover while
//! events are applied at full rate: every event applied once, every
//! delivery ACKed, nothing lost on the new primary.

use crate::common;

use std::time::Duration;

use common::consume::Consume;
use common::orbit::{receiver, OrbitDev};
use common::postgres::Formation;
use sqlx::{Connection, PgConnection};

const NAME: &str = "task-result-view";
const EVENTS: u64 = 600;

#[tokio::test]
async fn on_pg_auto_failover_a_failover_at_full_rate_loses_nothing_and_applies_nothing_twice() {
    let formation = Formation::start("receiver").await;
    let first_primary = formation.primary_port().await.unwrap();
    let dsn = formation.uri();
    assert!(dsn.contains(",127.0.0.1:"), "every node: {dsn}");

    // What the receiver needs of the cluster: a COMMIT it is told of is on
    // the synchronous standby too.
    let mut primary = PgConnection::connect(&format!(
        "postgres://postgres@127.0.0.1:{first_primary}/receiver?sslmode=disable"
    ))
    .await
    .unwrap();
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
        .arg("init")
        .env("ORBIT_RECEIVER_DSN", &dsn)
        .output()
        .unwrap();
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );

    let (orbit, creds, sub) = OrbitDev::subscribed(5_000, 20, "pg-failover").await;
    for _ in 0..EVENTS {
        orbit.inject_new_task(&creds, &sub).await;
    }
    let mut consume = Consume::start(&orbit, &creds, &dsn, &sub, NAME, &[]);
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

    // On the new primary: every ACKed delivery's event, each applied once.
    let mut conn = PgConnection::connect(&format!(
        "postgres://postgres@127.0.0.1:{new_primary}/receiver?sslmode=disable"
    ))
    .await
    .unwrap();
    let (rows, applied, views, advanced): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM receiver_inbox), \
         (SELECT coalesce(sum(applied), 0)::bigint FROM receiver_inbox), \
         (SELECT count(*) FROM receiver_task_views), \
         (SELECT coalesce(sum(applied_events), 0)::bigint FROM receiver_task_views)",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    let n = EVENTS as i64;
    assert_eq!((rows, applied, views, advanced), (n, n, n, n));
    // The failover was felt: the breaker opened and closed again.
    let out = consume.output();
    assert!(out.contains("database unreachable"), "{out}");
    assert!(out.contains("database answers again"), "{out}");
    // A COMMIT whose answer the failover cut was not ACKed; the redelivery
    // found what the server did, once.
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
