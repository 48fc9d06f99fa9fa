//! The three-node Galera cluster of `scripts/with-galera.sh` (`make
//! cluster-test`, `make test`): a receiver database on it, a store per node,
//! reads that wait for the whole cluster, and killing and restarting a node.
#![allow(dead_code)]

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use result_inbox::db::Dsn;
use result_inbox::inbox::{InboxStore, StoreOptions};
use result_inbox::scope::InboxScope;
use result_inbox::verify::{self, Finding, Report};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::{Executor, MySqlPool};

use super::consume::Consume;
use super::orbit::{OrbitDev, QueueCredentials};
use super::{random_hex, EventSpec};
use result_inbox::ids::SubscriptionId;

/// The nodes' root DSNs (database `mysql`), once the cluster has started.
pub fn node_dsns() -> Vec<String> {
    let dsns = std::env::var("RESULT_INBOX_GALERA_DSNS").unwrap_or_else(|_| {
        panic!(
            "RESULT_INBOX_GALERA_DSNS is not set: run the cluster tests with `make cluster-test` \
             or `make test`, which start a throwaway three-node Galera cluster"
        )
    });
    wait_until_started();
    dsns.split(',').map(str::to_owned).collect()
}

/// Waits for the cluster, which `scripts/with-galera.sh` starts beside the
/// test run (a joining node's state transfer takes seconds of waiting).
fn wait_until_started() {
    let dir = cluster_dir();
    let log = || std::fs::read_to_string(dir.join("start.log")).unwrap_or_default();
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while !dir.join("ready").exists() {
        assert!(
            !dir.join("failed").exists(),
            "the Galera cluster did not start:\n{}",
            log()
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the Galera cluster was not ready after 180 s:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn cluster_dir() -> PathBuf {
    PathBuf::from(std::env::var("RESULT_INBOX_GALERA_DIR").expect("RESULT_INBOX_GALERA_DIR"))
}

fn with_database(dsn: &str, database: &str) -> String {
    let base = dsn.rsplit_once('/').map(|(b, _)| b).unwrap_or(dsn);
    format!("{base}/{database}")
}

/// A pool on one node whose reads first wait until the node has applied
/// everything the cluster committed before them (`wsrep_sync_wait = 1`), so
/// that what one node committed is seen on every node.
pub async fn synced_pool(dsn: &str) -> MySqlPool {
    MySqlPoolOptions::new()
        .max_connections(2)
        .after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute("SET SESSION wsrep_sync_wait = 1").await?;
                Ok(())
            })
        })
        .connect_with(MySqlConnectOptions::from_str(dsn).unwrap())
        .await
        .unwrap()
}

/// A fresh receiver database, created and initialised through node 1 and
/// replicated to the others.
pub struct ClusterDb {
    pub name: String,
    /// The database on each node.
    pub nodes: Vec<Dsn>,
}

impl ClusterDb {
    pub async fn initialized() -> ClusterDb {
        let roots = node_dsns();
        // A node that fell out of the cluster while the machine was busy
        // (the tests are compiled after the cluster started) rejoins by
        // itself; a test begins only once all three are back.
        for node in 0..roots.len() {
            wait_until_synced(node, Duration::from_secs(120)).await;
        }
        let name = format!("receiver_cluster_{}", random_hex(4));
        let first = synced_pool(&roots[0]).await;
        first
            .execute(format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4").as_str())
            .await
            .unwrap();
        let nodes: Vec<Dsn> = roots
            .iter()
            .map(|root| Dsn::parse(&with_database(root, &name)).unwrap())
            .collect();
        result_inbox::db::schema::init(&nodes[0]).await.unwrap();
        // DDL replicates in total order; wait until every node has it. Asked
        // without the database in the DSN: a node may not have the database
        // yet when the question is put, and the synced read waits for it.
        for (node, root) in roots.iter().enumerate() {
            let tables: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ?",
            )
            .bind(&name)
            .fetch_one(&synced_pool(root).await)
            .await
            .unwrap();
            assert_eq!(
                tables as usize,
                result_inbox::db::schema::statements().len(),
                "the schema reached node {}",
                node + 1
            );
        }
        ClusterDb { name, nodes }
    }

    /// The database's DSN on node `node` (from 0), as text.
    pub fn dsn(&self, node: usize) -> String {
        with_database(&node_dsns()[node], &self.name)
    }

    /// A store of `scope` on node `node`.
    pub async fn store(&self, node: usize, scope: InboxScope) -> InboxStore {
        InboxStore::connect(&self.nodes[node], scope, StoreOptions::default())
            .await
            .unwrap()
    }

    /// A pool on node `node` whose reads see the whole cluster's commits.
    pub async fn pool(&self, node: usize) -> MySqlPool {
        synced_pool(&self.dsn(node)).await
    }

    /// The same queries on every node: row counts, applied rows, the views'
    /// advances and a checksum of every column the receiver writes. Panics
    /// unless all nodes answer the same.
    pub async fn assert_nodes_agree(&self) -> Vec<i64> {
        let mut answers = Vec::new();
        for node in 0..self.nodes.len() {
            let pool = self.pool(node).await;
            let row: (i64, i64, i64, i64, i64) = sqlx::query_as(
                "SELECT (SELECT COUNT(*) FROM receiver_inbox), \
                 (SELECT CAST(COALESCE(SUM(applied), 0) AS SIGNED) FROM receiver_inbox), \
                 (SELECT CAST(COALESCE(SUM(applied_events), 0) AS SIGNED) FROM receiver_task_views), \
                 (SELECT CAST(COALESCE(SUM(CRC32(CONCAT_WS('|', consumer_name, queue_id, event_id, \
                     event_digest, applied, received_at))), 0) AS SIGNED) FROM receiver_inbox), \
                 (SELECT CAST(COALESCE(SUM(CRC32(CONCAT_WS('|', consumer_name, queue_id, task_id, \
                     task_version, last_event_id, last_state, applied_events, COALESCE(last_result, ''), \
                     updated_at))), 0) AS SIGNED) \
                  FROM receiver_task_views)",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            answers.push(row);
        }
        for (node, answer) in answers.iter().enumerate() {
            assert_eq!(answer, &answers[0], "node {} differs from node 1", node + 1);
        }
        let (rows, applied, advances, _, _) = answers[0];
        vec![rows, applied, advances]
    }

    /// `receiver verify`'s check on every node: no finding anywhere.
    pub async fn assert_verified_on_every_node(&self) {
        for (node, dsn) in self.nodes.iter().enumerate() {
            let mut findings = Findings::default();
            let summary = verify::run(dsn, &mut findings).await.unwrap();
            assert!(
                summary.ok(),
                "verify on node {}: {:?}",
                node + 1,
                findings.0
            );
        }
    }
}

#[derive(Default)]
struct Findings(Vec<String>);

impl Report for Findings {
    fn total(&mut self, _rows: u64) {}
    fn advance(&mut self, _rows: u64) {}
    fn finding(&mut self, finding: Finding) {
        self.0.push(finding.to_string());
    }
}

/// SIGKILLs node `node` (from 0).
pub fn kill_node(node: usize) {
    let pid_file = cluster_dir().join(format!("node{}", node + 1)).join("pid");
    let pid: i32 = std::fs::read_to_string(pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// Cuts node `node` off from the others (`gmcast.isolate=1`: it drops its
/// group connections and leaves the primary component, so it answers 1047
/// to application statements) or lets it rejoin (`0`).
pub async fn isolate_node(node: usize, isolated: bool) {
    let pool = MySqlPoolOptions::new()
        .max_connections(1)
        .connect_with(MySqlConnectOptions::from_str(&node_dsns()[node]).unwrap())
        .await
        .unwrap();
    let value = if isolated { 1 } else { 0 };
    pool.execute(format!("SET GLOBAL wsrep_provider_options = 'gmcast.isolate={value}'").as_str())
        .await
        .unwrap();
}

/// Starts node `node` again and waits until it is back in the cluster and
/// synced (a killed node rejoins by a state transfer).
pub async fn restart_node(node: usize) {
    let start = cluster_dir()
        .join(format!("node{}", node + 1))
        .join("start");
    let status = std::process::Command::new(start).status().unwrap();
    assert!(status.success());
    wait_until_synced(node, Duration::from_secs(120)).await;
}

/// Waits until node `node` answers and is `Synced`: in the primary
/// component, with the cluster's whole state. Panics with its last state
/// after `within`.
pub async fn wait_until_synced(node: usize, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    let mut last = String::from("not answering");
    loop {
        if let Ok(pool) = MySqlPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(1))
            .connect_with(MySqlConnectOptions::from_str(&node_dsns()[node]).unwrap())
            .await
        {
            let state: Option<(String, String)> =
                sqlx::query_as("SHOW GLOBAL STATUS LIKE 'wsrep_local_state_comment'")
                    .fetch_optional(&pool)
                    .await
                    .ok()
                    .flatten();
            match state {
                Some((_, s)) if s == "Synced" => return,
                Some((_, s)) => last = s,
                None => {}
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {} is not synced with the cluster after {within:?}: {last}",
            node + 1
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Injects two versions of each of `tasks` new tasks into `sub`, starts a
/// `receiver consume` on every node of `db`, and returns them, running,
/// once 20 events are acknowledged.
pub async fn consuming_on_every_node(
    db: &ClusterDb,
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    sub: &SubscriptionId,
    tasks: u64,
) -> Vec<Consume> {
    for _ in 0..tasks {
        let task = random_hex(16);
        let first = EventSpec::submitted(&creds.queue_id, &task);
        let second = EventSpec {
            version: 2,
            event_type: "task.cancelled",
            state: "CANCELLED",
            ..EventSpec::submitted(&creds.queue_id, &task)
        };
        orbit.inject(sub, &first.json()).await;
        orbit.inject(sub, &second.json()).await;
    }
    let consumers = (0..3)
        .map(|node| Consume::start(orbit, creds, &db.dsn(node), sub, "task-result-view", &[]))
        .collect();
    orbit
        .wait_for_counts(creds, sub, Duration::from_secs(60), |c| {
            c["acked"].as_u64().unwrap_or(0) >= 20
        })
        .await;
    consumers
}

/// Waits until all `total` events of `sub` are acknowledged, then holds
/// what every cluster test ends with: nothing expired, every consumer
/// stops cleanly, one inbox row per event, the same tables on every node
/// and `verify` clean on each. Returns what the nodes agreed on.
pub async fn applied_once_everywhere(
    db: &ClusterDb,
    orbit: &OrbitDev,
    creds: &QueueCredentials,
    sub: &SubscriptionId,
    consumers: &mut [Consume],
    total: u64,
) -> Vec<i64> {
    let counts = orbit
        .wait_for_counts(creds, sub, Duration::from_secs(120), |c| {
            c["acked"].as_u64() == Some(total)
        })
        .await;
    assert_eq!(counts["expired"], 0, "{counts}");
    for consumer in consumers {
        assert!(consumer.terminate().success(), "{}", consumer.output());
    }
    let agreed = db.assert_nodes_agree().await;
    assert_eq!(agreed[0], total as i64, "one inbox row per event");
    db.assert_verified_on_every_node().await;
    agreed
}
