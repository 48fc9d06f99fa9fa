//! `diagnosis::diagnose`: what a failed delivery would become if it came
//! again, read-only, and always what the inbox then does with it.

use crate::common;

use common::{apply_once, random_hex, scope, EventSpec, TestDb};
use result_inbox::diagnosis::{diagnose, Diagnosis};
use result_inbox::inbox::{InboxError, Outcome};
use result_inbox::scope::InboxScope;
use sqlx::Connection;

/// A database with the receiver's tables, one scope, and a task with its
/// version 2 applied (version 1 was applied before it).
struct Applied {
    db: TestDb,
    scope: InboxScope,
    task: String,
    v1: String,
    v2: String,
}

impl Applied {
    async fn new() -> Applied {
        let db = TestDb::initialized().await;
        let scope = scope("task-result-view");
        let task = random_hex(16);
        let queue = scope.queue_id.as_str().to_owned();
        let v1 = EventSpec::submitted(&queue, &task).json();
        let v2 = Self::version(&queue, &task, 2, &random_hex(16));
        let store = db.store(scope.clone()).await;
        apply_once(&store, &v1).await.unwrap();
        apply_once(&store, &v2).await.unwrap();
        Applied {
            db,
            scope,
            task,
            v1,
            v2,
        }
    }

    /// An event of `task` at `version` with id `id`.
    fn version(queue: &str, task: &str, version: u64, id: &str) -> String {
        EventSpec {
            id: id.to_owned(),
            queue_id: queue,
            task_id: task,
            version,
            event_type: "task.succeeded",
            state: "SUCCEEDED",
            result: Some(r#"{"n":1}"#),
        }
        .json()
    }

    fn event(&self, version: u64) -> String {
        Self::version(
            self.scope.queue_id.as_str(),
            &self.task,
            version,
            &random_hex(16),
        )
    }

    async fn diagnose(&self, raw: &str) -> Diagnosis {
        let mut conn = sqlx::MySqlConnection::connect_with(
            &self.db.dsn.mysql_options().expect("a MySQL address"),
        )
        .await
        .unwrap();
        let diagnosed = diagnose(&mut conn, &self.scope, raw.as_bytes())
            .await
            .unwrap();
        conn.close().await.unwrap();
        diagnosed.diagnosis
    }

    /// What the inbox makes of `raw` when it comes again.
    async fn apply(&self, raw: &str) -> Result<Outcome, InboxError> {
        let store = self.db.store(self.scope.clone()).await;
        apply_once(&store, raw).await.map(|receipt| receipt.outcome)
    }
}

#[tokio::test]
async fn each_diagnosis_is_what_the_inbox_then_does_and_the_diagnosis_writes_nothing() {
    let s = Applied::new().await;
    let v3 = s.event(3);
    let older = s.event(1);
    let same_version = s.event(2);
    let conflicting_copy = s.v2.replace(r#"{"n":1}"#, r#"{"n":2}"#);
    let other_queue = EventSpec::submitted(&random_hex(16), &s.task).json();
    let before = s.db.rows().await;
    // The one that advances the view comes last: the others were
    // diagnosed against the view before it.
    let diagnosed = [
        (s.v2.as_str(), s.diagnose(&s.v2).await),
        (older.as_str(), s.diagnose(&older).await),
        (same_version.as_str(), s.diagnose(&same_version).await),
        (
            conflicting_copy.as_str(),
            s.diagnose(&conflicting_copy).await,
        ),
        ("garbage{", s.diagnose("garbage{").await),
        (other_queue.as_str(), s.diagnose(&other_queue).await),
        (v3.as_str(), s.diagnose(&v3).await),
    ];
    assert_eq!(s.db.rows().await, before, "a diagnosis wrote something");
    let words: Vec<&str> = diagnosed.iter().map(|(_, d)| d.as_str()).collect();
    assert_eq!(
        words,
        [
            "duplicate",
            "stale",
            "conflict",
            "conflict",
            "rejected",
            "rejected",
            "apply"
        ]
    );
    // And the inbox agrees, delivery by delivery.
    for (raw, diagnosis) in diagnosed {
        let outcome = s.apply(raw).await;
        match (&diagnosis, &outcome) {
            (Diagnosis::Apply, Ok(Outcome::Applied))
            | (Diagnosis::Duplicate, Ok(Outcome::Duplicate { .. }))
            | (Diagnosis::Stale, Ok(Outcome::Stale))
            | (Diagnosis::Conflict(_), Err(InboxError::Conflict(_)))
            | (Diagnosis::Rejected(_), Err(InboxError::Rejected(_))) => {}
            _ => panic!("diagnosed {diagnosis:?}, the inbox answered {outcome:?}"),
        }
    }
}

#[tokio::test]
async fn a_conflicting_copy_shows_both_digests_and_a_rejected_body_says_why_as_the_inbox_does() {
    let s = Applied::new().await;
    let copy = s.v2.replace(r#"{"n":1}"#, r#"{"n":2}"#);
    let Diagnosis::Conflict(conflict) = s.diagnose(&copy).await else {
        panic!("not a conflict");
    };
    let said = conflict.to_string();
    let stored = result_inbox::digest::digest(s.v2.as_bytes()).unwrap();
    let incoming = result_inbox::digest::digest(copy.as_bytes()).unwrap();
    assert!(
        said.contains(&format!("stored sha256={stored}"))
            && said.contains(&format!("incoming sha256={incoming}")),
        "{said}"
    );
    let Diagnosis::Rejected(why) = s.diagnose(r#"{"id":"x"}"#).await else {
        panic!("not rejected");
    };
    let inbox = s.apply(r#"{"id":"x"}"#).await.unwrap_err().to_string();
    assert_eq!(why, inbox);
    // The first version's copy is a duplicate too: its row is kept.
    assert_eq!(s.diagnose(&s.v1).await, Diagnosis::Duplicate);
}
