//! A delivery whose event cannot be read is refused on its own: the stream
//! stays open and the deliveries around it are applied (protocol §10.3 puts
//! the event's bytes verbatim into the delivery message, so a body that is
//! not JSON makes the whole message unreadable to a plain JSON parser).

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::consume::Consume;
use common::orbit::OrbitDev;
use common::{random_hex, unreadable_bodies, EventSpec, TestDb};

#[tokio::test]
async fn a_poison_delivery_is_rejected_at_every_attempt_while_its_neighbours_are_applied_on_one_stream(
) {
    let budget = 3;
    let (orbit, creds, sub) = OrbitDev::subscribed(2_000, budget, "poison").await;
    let db = TestDb::initialized().await;
    let mut consume = Consume::on_test_db(&orbit, &creds, &db, &sub, &[]);

    let mut valid = Vec::new();
    let mut bad: HashMap<String, &str> = HashMap::new();
    let spoiled = EventSpec::submitted(&creds.queue_id, &random_hex(16)).json();
    for (what, body) in unreadable_bodies(&spoiled) {
        let task = random_hex(16);
        let event = EventSpec::submitted(&creds.queue_id, &task);
        orbit.inject(&sub, &event.json()).await;
        valid.push(event.id);
        bad.insert(orbit.inject(&sub, &body).await, what);
    }
    let task = random_hex(16);
    let last = EventSpec::submitted(&creds.queue_id, &task);
    orbit.inject(&sub, &last.json()).await;
    valid.push(last.id);

    let counts = orbit
        .wait_for_counts(&creds, &sub, Duration::from_secs(60), |c| {
            c["acked"] == valid.len() && c["expired"] == bad.len()
        })
        .await;
    assert_eq!(counts["pending"], 0, "{counts}");
    assert!(consume.terminate().success());

    for d in orbit.deliveries(&creds, &sub).await {
        let id = d["id"].as_str().unwrap();
        match bad.get(id) {
            Some(what) => {
                assert_eq!(d["state"], "EXPIRED", "{what}: {d}");
                assert_eq!(d["attempts"], budget, "{what}: {d}");
            }
            None => {
                assert_eq!(d["state"], "ACKED", "{d}");
                assert_eq!(d["attempts"], 1, "applied at its first attempt: {d}");
            }
        }
    }

    let log = consume.output();
    for (id, what) in &bad {
        let refusals = log
            .lines()
            .filter(|l| l.contains(r#"class="rejected""#) && l.contains(&format!("delivery={id}")))
            .count();
        assert_eq!(
            refusals, budget as usize,
            "{what}: refused at every attempt\n{log}"
        );
    }
    assert_eq!(log.matches("delivery stream open").count(), 1, "{log}");
    assert!(!log.contains("delivery stream broke"), "{log}");
    assert!(
        !log.contains("garbage") && !log.contains("lp_spoof"),
        "{log}"
    );

    let rows: Vec<(String, bool)> =
        sqlx::query_as("SELECT CAST(event_id AS CHAR), applied FROM receiver_inbox")
            .fetch_all(&db.pool().await)
            .await
            .unwrap();
    let mut applied: Vec<String> = rows.iter().filter(|r| r.1).map(|r| r.0.clone()).collect();
    applied.sort();
    valid.sort();
    assert_eq!(applied, valid, "each valid event applied once");
    assert_eq!(rows.len(), valid.len(), "nothing else stored");
}
