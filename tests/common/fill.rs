//! Large receiver tables made by the server itself: `INSERT … SELECT` over
//! generated numbers, canonical event texts from templates, so that a
//! million rows take seconds, not an hour of deliveries.
#![allow(dead_code)]

use sqlx::{Executor, MySqlPool};

use super::EventSpec;

/// What to fill: `rows` inbox rows of one scope, `versions` per task (all
/// applied; the last one is the view's), ids from `k` as the `ids` say,
/// and the first `aged_rows` (whole tasks) received `aged_days` ago.
pub struct Fill<'a> {
    pub consumer: &'a str,
    pub queue: &'a str,
    pub rows: u64,
    pub versions: u64,
    pub ids: Ids,
    pub aged_rows: u64,
    pub aged_days: u32,
}

/// How the ids of row `k` are made.
#[derive(Clone, Copy)]
pub enum Ids {
    /// The zero-padded hex of `k` (events) and of `k / versions` (tasks):
    /// rows in key order are rows in `k` order.
    Sequential,
    /// MD5 of `k`: spread over the key space as Orbit's random ids are, so
    /// that old and new rows lie side by side.
    Hashed,
}

/// A canonical event as the receiver stores it, with `@E`, `@T` and `@Q`
/// standing for the event, task and queue ids.
fn template(version: u64, event_type: &str, state: &str, result: Option<&str>) -> String {
    let raw = EventSpec {
        id: "e".repeat(32),
        queue_id: &"a".repeat(32),
        task_id: &"b".repeat(32),
        version,
        event_type,
        state,
        result,
    }
    .json();
    result_inbox::digest::canonicalize(raw.as_bytes())
        .unwrap()
        .as_str()
        .replace(&"e".repeat(32), "@E")
        .replace(&"a".repeat(32), "@Q")
        .replace(&"b".repeat(32), "@T")
}

/// `template` as an SQL expression over the id expressions.
fn sql_text(template: &str, event: &str, task: &str, queue: &str) -> String {
    let quoted = template.replace('\'', "''");
    format!("REPLACE(REPLACE(REPLACE('{quoted}', '@E', {event}), '@T', {task}), '@Q', '{queue}')")
}

impl Fill<'_> {
    /// Inserts the rows and their views, `chunk` rows (at most 100 000)
    /// per statement.
    pub async fn run(&self, pool: &MySqlPool, chunk: u64) {
        let last = template(
            self.versions,
            "task.succeeded",
            "SUCCEEDED",
            Some(
                r#"{"rows":1234,"total":123456789012345678901234567890,"message":"Verarbeitung abgeschlossen – 处理完成"}"#,
            ),
        );
        let mut texts = String::from("CASE k % ");
        texts.push_str(&self.versions.to_string());
        let (event, task) = match self.ids {
            Ids::Sequential => (
                "LOWER(LPAD(HEX(k), 32, '0'))".to_owned(),
                format!(
                    "LOWER(CONCAT('7', LPAD(HEX(FLOOR(k / {})), 31, '0')))",
                    self.versions
                ),
            ),
            Ids::Hashed => (
                "MD5(CONCAT('e', k))".to_owned(),
                format!("MD5(CONCAT('t', FLOOR(k / {})))", self.versions),
            ),
        };
        for v in 1..self.versions {
            let t = template(v, "task.submitted", "PENDING", None);
            texts.push_str(&format!(
                " WHEN {} THEN {}",
                v - 1,
                sql_text(&t, &event, &task, self.queue)
            ));
        }
        texts.push_str(&format!(
            " ELSE {} END",
            sql_text(&last, &event, &task, self.queue)
        ));
        let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
            UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
            UNION ALL SELECT 8 UNION ALL SELECT 9)";
        let n = "(a.d + 10 * b.d + 100 * c.d + 1000 * d.d + 10000 * e.d)";
        assert!(chunk <= 100_000, "five digits make at most 100 000 numbers");
        let received = format!(
            "CASE WHEN k < {} THEN UTC_TIMESTAMP(6) - INTERVAL {} DAY ELSE UTC_TIMESTAMP(6) END",
            self.aged_rows, self.aged_days
        );
        let (consumer, queue, versions) = (self.consumer, self.queue, self.versions);
        for start in (0..self.rows).step_by(chunk as usize) {
            let end = (start + chunk).min(self.rows);
            let numbers = format!(
                "SELECT {start} + {n} AS k FROM {digits} a, {digits} b, {digits} c, {digits} d, {digits} e \
                 WHERE {start} + {n} < {end}"
            );
            pool.execute(
                format!(
                    "INSERT INTO receiver_inbox SELECT '{consumer}', '{queue}', {event}, SHA2(t, 256), t, 1, \
                     {received} FROM (SELECT k, {texts} AS t FROM ({numbers}) AS n) AS rows_"
                )
                .as_str(),
            )
            .await
            .unwrap();
            // (The view's result is not part of what verify compares.)
            pool.execute(
                format!(
                    "INSERT INTO receiver_task_views SELECT '{consumer}', '{queue}', {task}, {versions}, \
                     {event}, 'SUCCEEDED', NULL, {versions}, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) \
                     FROM ({numbers}) AS n WHERE k % {versions} = {versions} - 1"
                )
                .as_str(),
            )
            .await
            .unwrap();
        }
    }
}
