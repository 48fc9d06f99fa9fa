//! `receiver consume` ends within 10 s of SIGTERM whatever it is doing:
//! waiting for a database or an Orbit at start, waiting for ACK answers from
//! an Orbit that stopped answering, or running handlers stuck behind a lock.
//! Each test measures from the signal to the exit of the process.

use crate::common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::consume::Consume;
use common::orbit::OrbitDev;
use common::{sigterm, TestDb};
use sqlx::Executor;

/// The promise: from the signal to the end of the process.
const LIMIT: Duration = Duration::from_secs(10);

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

/// Sends SIGTERM and waits for the exit; returns how long it took. Fails if
/// the process is still running after the limit or did not exit cleanly.
fn terminate_within_limit(consume: &mut Consume, what: &str) -> Duration {
    let signalled = Instant::now();
    sigterm(consume.child.id());
    loop {
        if let Some(status) = consume.child.try_wait().unwrap() {
            let took = signalled.elapsed();
            eprintln!("shutdown {what}: {took:?}");
            assert!(status.success(), "{what}: {status}: {}", consume.output());
            assert!(took < LIMIT, "{what}: took {took:?}: {}", consume.output());
            return took;
        }
        assert!(
            signalled.elapsed() < LIMIT + Duration::from_secs(5),
            "{what}: still running {:?} after SIGTERM: {}",
            signalled.elapsed(),
            consume.output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the consumer's log contains `text`.
async fn wait_for_log(consume: &Consume, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !consume.output().contains(text) {
        assert!(
            Instant::now() < deadline,
            "never logged {text:?}: {}",
            consume.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until Orbit shows the subscription's only delivery leased.
async fn wait_until_leased(
    orbit: &OrbitDev,
    creds: &common::orbit::QueueCredentials,
    sub: &result_inbox::ids::SubscriptionId,
) {
    orbit
        .wait_for_counts(creds, sub, Duration::from_secs(20), |c| c["leased"] == 1)
        .await;
}

#[tokio::test]
async fn sigterm_while_waiting_for_an_unreachable_database_at_start_exits_within_10_s() {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "stop-db-down").await;
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dsn = format!("mysql://root@127.0.0.1:{port}/receiver");
    let mut consume = Consume::start(&orbit, &creds, &dsn, &sub, "task-result-view", &[]);
    wait_for_log(&consume, "database not reachable yet").await;
    terminate_within_limit(&mut consume, "while waiting for the database");
    assert!(consume
        .output()
        .contains("stopped during start-up; nothing was leased"));
}

#[tokio::test]
async fn sigterm_while_orbit_does_not_answer_at_start_exits_within_10_s() {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "stop-orbit-silent").await;
    let db = TestDb::initialized().await;
    // Orbit accepts connections (the kernel does) but answers nothing.
    signal(orbit.pid(), libc::SIGSTOP);
    let mut consume = Consume::on_test_db(&orbit, &creds, &db, &sub, &[]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(consume.running(), "{}", consume.output());
    terminate_within_limit(&mut consume, "while Orbit does not answer at start");
    signal(orbit.pid(), libc::SIGCONT);
}

#[tokio::test]
async fn sigterm_with_an_ack_in_flight_to_an_orbit_that_stopped_answering_exits_within_10_s() {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "stop-ack-in-flight").await;
    let db = TestDb::initialized().await;
    let (event_id, _task) = orbit.inject_new_task(&creds, &sub).await;

    // Hold the event's inbox key in an open transaction, so that the
    // delivery waits in its handler until Orbit has been stopped.
    let blocker = db.hold_inbox_key(&creds.queue_id, &event_id).await;

    let mut consume = Consume::on_test_db(&orbit, &creds, &db, &sub, &[]);
    wait_until_leased(&orbit, &creds, &sub).await;
    signal(orbit.pid(), libc::SIGSTOP);
    blocker.rollback().await.unwrap();
    wait_for_log(&consume, r#"class="applied""#).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    terminate_within_limit(&mut consume, "with an ACK in flight to a stopped Orbit");
    signal(orbit.pid(), libc::SIGCONT);
    let out = consume.output();
    assert!(out.contains("abandoned=1"), "no ACK was in flight: {out}");
}

#[tokio::test]
async fn sigterm_with_a_handler_stuck_behind_a_table_lock_exits_within_10_s() {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "stop-table-lock").await;
    let db = TestDb::initialized().await;
    let mut consume = Consume::on_test_db(&orbit, &creds, &db, &sub, &[]);
    wait_for_log(&consume, "delivery stream open").await;

    let pool = db.pool().await;
    let mut locker = pool.acquire().await.unwrap();
    locker
        .execute("LOCK TABLES receiver_inbox WRITE")
        .await
        .unwrap();
    orbit.inject_new_task(&creds, &sub).await;
    wait_until_leased(&orbit, &creds, &sub).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    terminate_within_limit(&mut consume, "with a handler stuck behind a table lock");
    locker.execute("UNLOCK TABLES").await.unwrap();
    let out = consume.output();
    assert!(out.contains("abandoned=1"), "no handler was stuck: {out}");
}
