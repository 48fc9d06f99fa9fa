//! `receiver consume` under a service manager that speaks systemd's
//! notify protocol (`Type=notify`): a real Unix datagram socket bound by
//! the test, named in `NOTIFY_SOCKET`, as systemd names its own.

use crate::common;

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use common::consume::Consume;
use common::metrics::{scrape, value};
use common::orbit::{http, OrbitDev};
use common::{random_hex, sigterm, TestDb};

/// A socket the receiver is told to notify, and its path.
fn notify_socket(dir: &std::path::Path) -> (UnixDatagram, String) {
    let path = dir.join(format!("notify-{}.sock", random_hex(4)));
    let socket = UnixDatagram::bind(&path).unwrap();
    (socket, path.display().to_string())
}

/// The next notification, or `None` after `within`.
async fn next(socket: &UnixDatagram, within: Duration) -> Option<String> {
    let socket = socket.try_clone().unwrap();
    tokio::task::spawn_blocking(move || {
        socket.set_read_timeout(Some(within)).unwrap();
        let mut buffer = [0u8; 512];
        let n = socket.recv(&mut buffer).ok()?;
        Some(String::from_utf8_lossy(&buffer[..n]).into_owned())
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn consume_reports_ready_once_its_stream_is_open_and_stopping_at_the_signal() {
    let (orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "notify-ready").await;
    let db = TestDb::initialized().await;
    let (socket, path) = notify_socket(&orbit.dir);
    let mut consume = Consume::on_test_db(
        &orbit,
        &creds,
        &db,
        &sub,
        &[
            ("NOTIFY_SOCKET", path.as_str()),
            ("RECEIVER_METRICS_ADDR", "127.0.0.1:0"),
        ],
    );
    let url = consume.metrics_url().await;
    let ready = next(&socket, Duration::from_secs(20)).await;
    let ready = ready.unwrap_or_else(|| panic!("no READY=1: {}", consume.output()));
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    // Ready as /readyz means it.
    let (status, body) = http("GET", &format!("{url}/readyz"), "", String::new()).await;
    assert_eq!(status, 200, "{body}");
    // Orbit's deliveries are taken from then on.
    orbit.inject_new_task(&creds, &sub).await;
    orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(20), |c| c["acked"] == 1)
        .await;

    sigterm(consume.child.id());
    let stopping = next(&socket, Duration::from_secs(5)).await;
    assert!(
        stopping
            .as_deref()
            .is_some_and(|s| s.lines().any(|l| l == "STOPPING=1")),
        "{stopping:?}"
    );
    assert!(
        consume.child.wait().unwrap().success(),
        "{}",
        consume.output()
    );
    assert_eq!(next(&socket, Duration::from_millis(200)).await, None);
}

#[tokio::test]
async fn consume_still_waiting_for_orbit_is_not_reported_ready_nor_shown_ready_and_stops_at_the_signal(
) {
    let (mut orbit, creds, sub) = OrbitDev::subscribed(30_000, 5, "notify-waiting").await;
    let db = TestDb::initialized().await;
    orbit.kill();
    let (socket, path) = notify_socket(&orbit.dir);
    let mut consume = Consume::on_test_db(
        &orbit,
        &creds,
        &db,
        &sub,
        &[
            ("NOTIFY_SOCKET", path.as_str()),
            ("RECEIVER_METRICS_ADDR", "127.0.0.1:0"),
        ],
    );
    let url = consume.metrics_url().await;
    consume
        .wait_for_output(Duration::from_secs(20), |out| out.contains("Orbit"))
        .await;
    assert_eq!(
        next(&socket, Duration::from_secs(2)).await,
        None,
        "{}",
        consume.output()
    );
    // Not ready on /metrics either, from the start: an alert sees it.
    let page = scrape(&url).await;
    assert_eq!(value(&page, "receiver_stream_open", &[]), Some(0.0));
    sigterm(consume.child.id());
    let stopping = next(&socket, Duration::from_secs(5)).await;
    assert!(
        stopping
            .as_deref()
            .is_some_and(|s| s.lines().any(|l| l == "STOPPING=1")),
        "{stopping:?}"
    );
    assert!(
        consume.child.wait().unwrap().success(),
        "{}",
        consume.output()
    );
}
