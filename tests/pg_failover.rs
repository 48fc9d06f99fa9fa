//! A failover of PostgreSQL under a running `receiver consume`: a
//! pg_auto_failover formation of the test's own (a monitor, a primary and a
//! synchronous secondary on loopback), the receiver reaching whichever node
//! is primary through an address that moves with it, and a failover while
//! events are applied at full rate: every event applied once, every
//! delivery ACKed, nothing lost on the new primary.

use crate::common;

use std::time::Duration;

use common::consume::Consume;
use common::orbit::{receiver, OrbitDev};
use common::postgres::Formation;
use sqlx::{Connection, PgConnection};
use tokio::net::{TcpListener, TcpStream};

const NAME: &str = "task-result-view";
const EVENTS: u64 = 600;

/// The address that moves with the primary: each connection is relayed to
/// the node the monitor names primary when it arrives (what a virtual IP
/// or a proxy in front of pg_auto_failover does for a client that, as
/// sqlx, connects to one host).
async fn primary_address(formation: &Formation) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let monitor = formation.monitor_dsn();
    let relay = tokio::spawn(async move {
        let mut relays = tokio::task::JoinSet::new();
        while let Ok((mut client, _)) = listener.accept().await {
            while relays.try_join_next().is_some() {}
            let monitor = monitor.clone();
            relays.spawn(async move {
                let Some(port) = primary_port(&monitor).await else {
                    return;
                };
                if let Ok(mut server) = TcpStream::connect(("127.0.0.1", port)).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    (port, relay)
}

async fn primary_port(monitor: &str) -> Option<u16> {
    let mut conn = PgConnection::connect(monitor).await.ok()?;
    let port: Option<i32> =
        sqlx::query_scalar("SELECT primary_port FROM pgautofailover.get_primary('default', 0)")
            .fetch_optional(&mut conn)
            .await
            .ok()
            .flatten();
    let _ = conn.close().await;
    port.and_then(|p| u16::try_from(p).ok())
}

// Several threads: the relay runs beside the test's blocking calls (the
// `receiver init` process connects through it, a failover waits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_pg_auto_failover_a_failover_at_full_rate_loses_nothing_and_applies_nothing_twice() {
    let formation = Formation::start("receiver").await;
    let first_primary = formation.primary_port().await.unwrap();
    let (port, _relay) = primary_address(&formation).await;
    let dsn = format!("postgres://postgres@127.0.0.1:{port}/receiver?sslmode=disable");

    // What the receiver needs of the cluster: a COMMIT it is told of is on
    // the synchronous standby too.
    let mut primary = PgConnection::connect(&dsn).await.unwrap();
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
    tokio::task::block_in_place(|| formation.failover());
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
