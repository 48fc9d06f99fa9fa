//! Leases, attempts, budget and acknowledgement.

mod common;

use std::time::{Duration, Instant};

use common::{eventually, Server};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_is_redelivered_with_a_new_proof_when_its_lease_runs_out_expires_when_its_budget_is_spent_and_is_leased_again_after_budget_is_added(
) {
    let server = Server::start_with(300, 2).await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.submitted"]).await;
    let task_id = server.submit(&token).await;
    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    consumer.credit(10).await;

    let first = consumer.next_delivery().await;
    let first_at = Instant::now();
    assert_eq!(first.attempt, 1);
    assert_eq!(first.subscription_id, subscription);
    assert_eq!(first.event_json()["task"]["id"], task_id.as_str());
    let view = server.delivery(&token, &first.delivery_id).await;
    assert_eq!(view["state"], "LEASED");
    assert_eq!(view["attempts"], 1);
    assert_eq!(view["budget"], 2);
    assert!(view["lease_expires_at"].is_string());
    assert!(!view.to_string().contains(&first.lease_proof));

    let second = consumer.next_delivery().await;
    assert!(first_at.elapsed() >= Duration::from_millis(250));
    assert_eq!(second.delivery_id, first.delivery_id);
    assert_eq!(second.attempt, 2);
    assert_ne!(second.lease_proof, first.lease_proof);
    assert_eq!(second.event, first.event);

    let expired = eventually("the delivery to expire", || async {
        let view = server.delivery(&token, &first.delivery_id).await;
        (view["state"] == "EXPIRED").then_some(view)
    })
    .await;
    assert_eq!(expired["attempts"], 2);
    assert_eq!(expired["budget"], 2);
    assert!(expired["lease_expires_at"].is_null());
    let counts = &server.subscription(&token, &subscription).await["counts"];
    assert_eq!(counts["expired"], 1);

    let added = server
        .admin(
            &format!("/v1/admin/deliveries/{}/budget", first.delivery_id),
            r#"{"add":1}"#,
        )
        .await;
    assert_eq!(added.status, 200, "{}", added.text());
    let added: Value = added.json().unwrap();
    assert_eq!(added["budget"], 3);

    let third = consumer.next_delivery().await;
    assert_eq!(third.delivery_id, first.delivery_id);
    assert_eq!(third.attempt, 3);
    assert_ne!(third.lease_proof, second.lease_proof);

    let ack = server
        .ack(&token, &third.delivery_id, &third.lease_proof)
        .await;
    assert_eq!(ack.status, 200, "{}", ack.text());
    let view = server.delivery(&token, &first.delivery_id).await;
    assert_eq!(view["state"], "ACKED");
    assert_eq!(view["attempts"], 3);
    assert_eq!(view["budget"], 3);
    consumer.expect_nothing(Duration::from_millis(400)).await;
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acking_twice_with_the_current_proof_succeeds_both_times_while_a_stale_or_wrong_proof_is_refused_and_changes_nothing(
) {
    let server = Server::start_with(300, 5).await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.submitted"]).await;
    server.submit(&token).await;
    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    // Two credits: attempt 1, then attempt 2 after the first lease runs out,
    // and no third lease ever.
    consumer.credit(2).await;
    let first = consumer.next_delivery().await;
    let second = consumer.next_delivery().await;
    assert_eq!(second.attempt, 2);
    let id = &first.delivery_id;

    let stale = server.ack(&token, id, &first.lease_proof).await;
    assert_eq!(stale.status, 409);
    assert_eq!(stale.error_code().as_deref(), Some("stale_lease_proof"));
    let view = server.delivery(&token, id).await;
    assert_ne!(view["state"], "ACKED");
    assert_eq!(view["attempts"], 2);

    let wrong = server.ack(&token, id, "lp_not-a-proof").await;
    assert_eq!(wrong.status, 409);
    assert_eq!(wrong.error_code().as_deref(), Some("stale_lease_proof"));

    let acked = server.ack(&token, id, &second.lease_proof).await;
    assert_eq!(acked.status, 200, "{}", acked.text());
    let acked: Value = acked.json().unwrap();
    assert_eq!(acked["state"], "ACKED");
    assert_eq!(acked["already_acked"], false);

    let again = server.ack(&token, id, &second.lease_proof).await;
    assert_eq!(again.status, 200);
    let again: Value = again.json().unwrap();
    assert_eq!(again["state"], "ACKED");
    assert_eq!(again["already_acked"], true);

    let stale_after = server.ack(&token, id, &first.lease_proof).await;
    assert_eq!(stale_after.status, 409);
    assert_eq!(
        stale_after.error_code().as_deref(),
        Some("stale_lease_proof")
    );
    let view = server.delivery(&token, id).await;
    assert_eq!(view["state"], "ACKED");
    assert_eq!(view["attempts"], 2);
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latest_proof_still_acks_a_delivery_whose_lease_ran_out_before_it_was_leased_again() {
    let server = Server::start_with(150, 5).await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.submitted"]).await;
    server.submit(&token).await;
    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    consumer.credit(1).await;
    let leased = consumer.next_delivery().await;
    eventually("the lease to run out", || async {
        let view = server.delivery(&token, &leased.delivery_id).await;
        (view["state"] == "PENDING").then_some(())
    })
    .await;

    let ack = server
        .ack(&token, &leased.delivery_id, &leased.lease_proof)
        .await;
    assert_eq!(ack.status, 200, "{}", ack.text());
    let view = server.delivery(&token, &leased.delivery_id).await;
    assert_eq!(view["state"], "ACKED");
    assert_eq!(view["attempts"], 1);
    consumer.credit(1).await;
    consumer.expect_nothing(Duration::from_millis(200)).await;
    drop(consumer);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acking_an_unknown_delivery_is_refused_with_404_delivery_not_found() {
    let server = Server::start().await;
    let token = server.token("default", "inbox").await;
    let response = server
        .ack(&token, "0123456789abcdef0123456789abcdef", "lp_x")
        .await;
    assert_eq!(response.status, 404);
    assert_eq!(response.error_code().as_deref(), Some("delivery_not_found"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_budget_outside_1_to_100_or_to_an_acked_delivery_is_refused_and_changes_nothing() {
    let server = Server::start_with(30_000, 1).await;
    let token = server.token("default", "inbox").await;
    let subscription = server.subscribe(&token, &["task.submitted"]).await;
    server.submit(&token).await;
    let mut consumer = server.connect(&token.token, &subscription).await.unwrap();
    consumer.credit(1).await;
    let leased = consumer.next_delivery().await;
    let path = format!("/v1/admin/deliveries/{}/budget", leased.delivery_id);

    for body in [r#"{"add":0}"#, r#"{"add":101}"#, r#"{"add":-1}"#, r#"{}"#] {
        let response = server.admin(&path, body).await;
        assert_eq!(response.status, 400, "{body}");
        assert_eq!(response.error_code().as_deref(), Some("invalid_request"));
    }
    assert_eq!(
        server.delivery(&token, &leased.delivery_id).await["budget"],
        1
    );

    let raised = server.admin(&path, r#"{"add":100}"#).await;
    assert_eq!(raised.status, 200);
    let raised: Value = raised.json().unwrap();
    assert_eq!(
        (raised["state"].as_str(), raised["budget"].as_u64()),
        (Some("LEASED"), Some(101))
    );

    let ack = server
        .ack(&token, &leased.delivery_id, &leased.lease_proof)
        .await;
    assert_eq!(ack.status, 200);
    let refused = server.admin(&path, r#"{"add":1}"#).await;
    assert_eq!(refused.status, 409);
    assert_eq!(
        refused.error_code().as_deref(),
        Some("delivery_already_acked")
    );
    assert_eq!(
        server.delivery(&token, &leased.delivery_id).await["budget"],
        101
    );
    drop(consumer);
    server.stop().await;
}
