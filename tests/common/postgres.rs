//! A database of its own on the throwaway PostgreSQL server of
//! `scripts/with-postgres.sh` (`make test` starts one).
#![allow(dead_code)]

use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgPool};

use super::random_hex;

/// The server's administrative DSN (database `postgres`).
pub fn admin_dsn() -> String {
    std::env::var("RESULT_INBOX_TEST_PG_ADMIN_DSN").unwrap_or_else(|_| {
        panic!(
            "RESULT_INBOX_TEST_PG_ADMIN_DSN is not set: run the PostgreSQL tests with `make test`, \
             or under scripts/with-postgres.sh, which start a throwaway PostgreSQL server"
        )
    })
}

/// A fresh, empty database, dropped with the server at the end of the run.
pub struct PgTestDb {
    pub name: String,
    pub dsn: String,
    pub pool: PgPool,
}

impl PgTestDb {
    pub async fn new() -> Self {
        let admin_dsn = admin_dsn();
        let name = format!("receiver_{}", random_hex(6));
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .connect(&admin_dsn)
            .await
            .expect("the throwaway PostgreSQL server answers");
        admin
            .execute(format!("CREATE DATABASE {name} ENCODING 'UTF8'").as_str())
            .await
            .unwrap();
        admin.close().await;
        let dsn = match admin_dsn.rsplit_once('/') {
            Some((server, _)) => format!("{server}/{name}"),
            None => panic!("the admin DSN names no database"),
        };
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect(&dsn)
            .await
            .unwrap();
        Self { name, dsn, pool }
    }

    /// Runs a script of statements (a DDL file), in one transaction.
    pub async fn run_script(&self, script: &str) -> Result<(), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        tx.execute(script).await?;
        tx.commit().await
    }
}
