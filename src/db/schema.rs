//! `schema.sql`, `retention.sql`, `outbox.sql` and the one-time
//! initialization behind `receiver init`.
//!
//! Initialization runs only the initial DDL: the two tables of
//! `schema.sql`, and `retention.sql`'s tally only when asked
//! ([`InitOptions::retention`]). It never repairs, alters or overwrites: if
//! any of the receiver's tables already exists it stops with
//! [`InitError::TablesExist`] before creating anything, and a `CREATE TABLE`
//! that races with someone else fails rather than replacing. Schema changes
//! after release belong in the receiver's own forward migrations; the one
//! there is ([`Existing::Report`] with [`InitOptions::retention`]) only adds
//! `retention.sql`'s table to a database that has the other two.

use sqlx::mysql::MySqlConnection;

use super::engine::Statements;
pub use super::grant::CreateGrant;
use super::{DbError, Dsn, Engine};

/// The DDL of both tables, exactly as shipped in `schema.sql`.
pub const SCHEMA_SQL: &str = include_str!("../../schema.sql");

/// The same two tables for PostgreSQL, exactly as shipped in
/// `schema.postgres.sql`: the columns, keys and comments of [`SCHEMA_SQL`]
/// in PostgreSQL's types, each comment a `COMMENT ON` statement of its own.
pub const POSTGRES_SCHEMA_SQL: &str = include_str!("../../schema.postgres.sql");

/// `receiver prune`'s tally for PostgreSQL, exactly as shipped in
/// `retention.postgres.sql`.
pub const POSTGRES_RETENTION_SQL: &str = include_str!("../../retention.postgres.sql");

/// The inbox table: one row per event received.
pub const INBOX_TABLE: &str = "receiver_inbox";
/// The task view table: one row per task.
pub const TASK_VIEW_TABLE: &str = "receiver_task_views";
/// The two tables of the receiver's model, in creation order: what the
/// runtime reads and writes.
pub const TABLES: [&str; 2] = [INBOX_TABLE, TASK_VIEW_TABLE];

/// The DDL of `receiver prune`'s tally, exactly as shipped in
/// `retention.sql`: not part of the model, created only when asked
/// ([`InitOptions::retention`]).
pub const RETENTION_SQL: &str = include_str!("../../retention.sql");

/// The tally of pruned inbox rows: one row per task (see `retention.sql`).
pub const PRUNED_TABLE: &str = "receiver_pruned";

/// The DDL of the outbox, exactly as shipped in `outbox.sql`: not part of
/// the model, created only when asked ([`InitOptions::outbox`]).
pub const OUTBOX_SQL: &str = include_str!("../../outbox.sql");

/// The outbox for PostgreSQL, exactly as shipped in `outbox.postgres.sql`.
pub const POSTGRES_OUTBOX_SQL: &str = include_str!("../../outbox.postgres.sql");

/// The outbox: one row per effect recorded in the inbox's transaction, to
/// be sent after COMMIT (see `outbox.sql` and [`crate::outbox`]).
pub const OUTBOX_TABLE: &str = "receiver_outbox";

/// Every table of the receiver: the model's two, prune's tally and the
/// outbox.
pub(crate) const ALL_TABLES: [&str; 4] = [INBOX_TABLE, TASK_VIEW_TABLE, PRUNED_TABLE, OUTBOX_TABLE];

/// What a successful initialization found when it read the schema back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitReport {
    /// Foreign keys on the receiver's tables, counted in `information_schema`.
    pub foreign_keys: u64,
}

/// Why `receiver init` stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitError {
    /// One or both tables exist already; nothing was changed.
    #[error("table(s) {} already exist in database {database}; init creates new tables only and changed nothing", .tables.join(", "))]
    TablesExist {
        /// The database that was checked.
        database: String,
        /// The receiver tables found there.
        tables: Vec<String>,
    },
    /// The tables exist, but not as the engine's schema file creates them
    /// (one is missing, or columns are); nothing was changed.
    #[error("the receiver tables in database {database} are not those of {schema_file} ({problem}); init changed nothing and repairs nothing")]
    NotTheSchema {
        /// The database that was checked.
        database: String,
        /// The schema file of the address's engine ([`schema_file`]).
        schema_file: &'static str,
        /// What differs.
        problem: String,
    },
    /// The account may not create tables. `grant`, when the server could
    /// name what is in use, says what it lacks on its engine and the
    /// statement that gives it.
    #[error(
        "schema initialization failed: {error}; init (never the runtime account) needs {}{}",
        grant.as_ref().map_or("the CREATE privilege where the tables go", |g| g.needs.as_str()),
        grant.as_ref().map(|g| format!(": as {}, run {}", g.by, g.statement)).unwrap_or_default()
    )]
    PermissionDenied {
        /// The server's refusal, redacted.
        error: DbError,
        /// What to grant, and who may.
        grant: Option<CreateGrant>,
    },
    /// The server refused or the connection failed; the message is redacted.
    #[error("schema initialization failed: {0}")]
    Database(DbError),
}

/// The schema file of `engine`'s tables: `schema.sql` or
/// `schema.postgres.sql`.
pub fn schema_file(engine: super::EngineKind) -> &'static str {
    file_of(INBOX_TABLE, engine)
}

/// The DDL file that creates `table` on `engine`: `schema.sql`,
/// `retention.sql` (`receiver_pruned`) or `outbox.sql` (`receiver_outbox`),
/// or their `.postgres.sql` twins.
pub fn file_of(table: &str, engine: super::EngineKind) -> &'static str {
    let postgres = engine == super::EngineKind::Postgres;
    match (table, postgres) {
        (PRUNED_TABLE, false) => "retention.sql",
        (PRUNED_TABLE, true) => "retention.postgres.sql",
        (OUTBOX_TABLE, false) => "outbox.sql",
        (OUTBOX_TABLE, true) => "outbox.postgres.sql",
        (_, false) => "schema.sql",
        (_, true) => "schema.postgres.sql",
    }
}

impl InitError {
    /// Whether the account or the DSN has to change (exit code 2): a
    /// missing CREATE privilege, a refused login, an unknown database.
    /// Existing tables are not: `init` did its job by refusing.
    pub fn is_configuration(&self) -> bool {
        match self {
            InitError::PermissionDenied { .. } => true,
            InitError::Database(e) => e.is_refusal(),
            InitError::TablesExist { .. } | InitError::NotTheSchema { .. } => false,
        }
    }
}

impl From<sqlx::Error> for InitError {
    fn from(e: sqlx::Error) -> Self {
        InitError::Database(DbError::from(e))
    }
}

/// Runs `ddl`; a refusal to create says what to grant.
async fn create<E: Engine>(conn: &mut E::Connection, ddl: &'static str) -> Result<(), InitError> {
    let Err(e) = E::create(&mut *conn, ddl).await else {
        return Ok(());
    };
    let error = DbError::from(e);
    // 1142 is "CREATE command denied", PostgreSQL's 42501 "permission
    // denied for schema": the account is fine otherwise.
    if error.lacks_table_privilege() {
        let grant = E::create_grant(conn).await.ok();
        return Err(InitError::PermissionDenied { error, grant });
    }
    Err(InitError::Database(error))
}

/// The `CREATE TABLE` statements of [`SCHEMA_SQL`], without comments: what
/// [`init`] runs.
pub fn statements() -> Vec<&'static str> {
    create_statements(SCHEMA_SQL)
}

/// The `CREATE TABLE` statement of [`RETENTION_SQL`], without comments:
/// what [`InitOptions::retention`] adds.
pub fn retention_statements() -> Vec<&'static str> {
    create_statements(RETENTION_SQL)
}

/// The `CREATE TABLE` statement of [`OUTBOX_SQL`], without comments: what
/// [`InitOptions::outbox`] adds.
pub fn outbox_statements() -> Vec<&'static str> {
    create_statements(OUTBOX_SQL)
}

pub(crate) fn create_statements(sql: &'static str) -> Vec<&'static str> {
    sql.split(";\n")
        .map(str::trim)
        .filter_map(|s| s.find("CREATE TABLE").map(|start| &s[start..]))
        .collect()
}

/// The columns `schema.sql` (or, for [`PRUNED_TABLE`], `retention.sql`,
/// for [`OUTBOX_TABLE`], `outbox.sql`) gives `table`, in order (empty for a table neither creates). Read from
/// the DDL itself, so the self-check can never expect other columns than
/// `init` creates.
pub fn columns(table: &str) -> Vec<&'static str> {
    create_statement(table)
        .unwrap_or_default()
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|line| line.starts_with(|c: char| c.is_ascii_lowercase()))
        .filter_map(|line| line.split_whitespace().next())
        .collect()
}

fn create_statement(table: &str) -> Option<&'static str> {
    let head = format!("CREATE TABLE {table} (");
    statements()
        .into_iter()
        .chain(retention_statements())
        .chain(outbox_statements())
        .find(|s| s.starts_with(&head))
}

/// The columns of `table` that make up its primary key, which the runtime
/// never updates.
pub fn key_columns(table: &str) -> Vec<&'static str> {
    create_statement(table)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .find_map(|line| line.strip_prefix("PRIMARY KEY ("))
        .and_then(|rest| rest.split_once(')'))
        .map(|(keys, _)| keys.split(',').map(str::trim).collect())
        .unwrap_or_default()
}

/// A statement that needs `privilege` (`SELECT`, `INSERT`, `UPDATE` or
/// `DELETE`) on `table`, on every column `schema.sql` or `retention.sql`
/// gives it (an `UPDATE` sets every column but the key to itself), and
/// changes no row: how a check asks the server itself whether an account
/// may, grants through roles, wildcards and column lists included.
pub fn privilege_probe(table: &str, privilege: &str) -> String {
    let columns = columns(table);
    let list = columns.join(", ");
    match privilege {
        "SELECT" => format!("SELECT {list} FROM {table} WHERE 1 = 0"),
        "INSERT" => {
            format!("INSERT INTO {table} ({list}) SELECT {list} FROM {table} WHERE 1 = 0")
        }
        "UPDATE" => {
            let keys = key_columns(table);
            let set = columns
                .iter()
                .filter(|c| !keys.contains(c))
                .map(|c| format!("{c} = {c}"))
                .collect::<Vec<_>>()
                .join(", ");
            format!("UPDATE {table} SET {set} WHERE 1 = 0")
        }
        _ => format!("DELETE FROM {table} WHERE 1 = 0"),
    }
}

/// What `init` does when the tables are there already.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Existing {
    /// Stop with [`InitError::TablesExist`] (the default: `init` creates
    /// new tables only).
    #[default]
    Refuse,
    /// When both tables of `schema.sql` exist with every column, change
    /// nothing in them and report them as a fresh `init` would: the
    /// foreign keys are counted, not assumed. Anything less is still
    /// refused. `retention.sql`'s table is checked like the others if it
    /// is there; if it is missing it is created only with
    /// [`InitOptions::retention`] (a database initialized without it), and
    /// only once the other two have been found whole; so is `outbox.sql`'s
    /// table, with [`InitOptions::outbox`].
    Report,
}

/// What [`init_with`] creates, and what it does when the tables exist.
///
/// The default is what [`init`] does: the two tables of `schema.sql`
/// only, refused if any of the receiver's tables exists.
///
/// ```no_run
/// use result_inbox::db::schema::{self, Existing, InitOptions};
/// use result_inbox::db::Dsn;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let dsn: Dsn = std::env::var("ORBIT_RECEIVER_DSN")?.parse()?;
/// // `receiver init --keep-existing --retention`: add prune's tally to a
/// // database that has the two tables, change nothing else.
/// let options = InitOptions {
///     existing: Existing::Report,
///     retention: true,
///     ..InitOptions::default()
/// };
/// let report = schema::init_with(&dsn, options).await?;
/// assert_eq!(report.foreign_keys, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InitOptions {
    /// What happens when the tables are there already. Default
    /// [`Existing::Refuse`].
    pub existing: Existing,
    /// Whether `retention.sql`'s tally ([`PRUNED_TABLE`], which `receiver
    /// prune` needs) is created too: after the two tables on an empty
    /// database, or alone beside them with [`Existing::Report`]. Default
    /// `false`: the model's two tables only.
    pub retention: bool,
    /// Whether `outbox.sql`'s table ([`OUTBOX_TABLE`]) is created too, as
    /// the tally is. Default `false`.
    pub outbox: bool,
}

/// Creates the two tables of `schema.sql` in the DSN's database, then reads
/// back the number of foreign keys on the receiver's tables. Creates no
/// tally (see [`InitOptions::retention`]).
pub async fn init(dsn: &Dsn) -> Result<InitReport, InitError> {
    init_with(dsn, InitOptions::default()).await
}

/// [`init`], with a choice of what happens when the tables exist and of
/// whether `retention.sql`'s tally is created. On a PostgreSQL address
/// (feature `postgres`) the DDL is `schema.postgres.sql`'s (and
/// `retention.postgres.sql`'s), created in one transaction.
pub async fn init_with(dsn: &Dsn, options: InitOptions) -> Result<InitReport, InitError> {
    match dsn.engine() {
        #[cfg(feature = "postgres")]
        super::EngineKind::Postgres => init_on::<sqlx::Postgres>(dsn, options).await,
        _ => init_on::<sqlx::MySql>(dsn, options).await,
    }
}

async fn init_on<E: Engine>(dsn: &Dsn, options: InitOptions) -> Result<InitReport, InitError> {
    use sqlx::Connection;
    let mut conn = E::connect_one(dsn)
        .await
        .map_err(|e| InitError::Database(DbError::from(e).connecting_to(dsn.engine())))?;
    let found = E::existing_tables(&mut conn).await?;
    if !found.is_empty() {
        if options.existing == Existing::Report {
            let report = report_existing::<E>(&mut conn, dsn, &found, options).await;
            conn.close().await.ok();
            return report;
        }
        return Err(InitError::TablesExist {
            database: dsn.database().to_owned(),
            tables: found,
        });
    }
    create::<E>(&mut conn, E::SCHEMA_SQL).await?;
    if options.retention {
        create::<E>(&mut conn, E::RETENTION_SQL).await?;
    }
    if options.outbox {
        create::<E>(&mut conn, E::OUTBOX_SQL).await?;
    }
    let foreign_keys = E::count_foreign_keys(&mut conn).await?;
    conn.close().await.ok();
    Ok(InitReport { foreign_keys })
}

/// The report of an `init` that found the tables in place: both must be
/// there with all their columns, and the tally and the outbox too when
/// they are there; then, if asked, a missing tally or outbox is created;
/// the foreign keys are counted.
async fn report_existing<E: Engine>(
    conn: &mut E::Connection,
    dsn: &Dsn,
    found: &[String],
    options: InitOptions,
) -> Result<InitReport, InitError> {
    let not_the_schema = |problem: String| InitError::NotTheSchema {
        database: dsn.database().to_owned(),
        schema_file: schema_file(dsn.engine()),
        problem,
    };
    for table in TABLES {
        if !found.iter().any(|t| t == table) {
            return Err(not_the_schema(format!("table {table} is missing")));
        }
    }
    for table in ALL_TABLES
        .into_iter()
        .filter(|t| found.iter().any(|f| f == t))
    {
        let present = E::table_columns(conn, table).await?;
        let missing: Vec<&str> = columns(table)
            .into_iter()
            .filter(|c| !present.iter().any(|p| p.eq_ignore_ascii_case(c)))
            .collect();
        if !missing.is_empty() {
            return Err(not_the_schema(format!(
                "table {table} lacks {}",
                missing.join(", ")
            )));
        }
    }
    if options.retention && !found.iter().any(|t| t == PRUNED_TABLE) {
        create::<E>(conn, E::RETENTION_SQL).await?;
    }
    if options.outbox && !found.iter().any(|t| t == OUTBOX_TABLE) {
        create::<E>(conn, E::OUTBOX_SQL).await?;
    }
    Ok(InitReport {
        foreign_keys: E::count_foreign_keys(conn).await?,
    })
}

/// Foreign keys declared on, or pointing at, the receiver's tables.
pub async fn count_foreign_keys(conn: &mut MySqlConnection) -> Result<u64, sqlx::Error> {
    <sqlx::MySql as Statements>::count_foreign_keys(conn).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_table_is_named_with_the_file_of_its_engine_that_creates_it() {
        use crate::db::EngineKind::{MySql, Postgres};
        for (table, mysql, postgres) in [
            (INBOX_TABLE, "schema.sql", "schema.postgres.sql"),
            (TASK_VIEW_TABLE, "schema.sql", "schema.postgres.sql"),
            (PRUNED_TABLE, "retention.sql", "retention.postgres.sql"),
            (OUTBOX_TABLE, "outbox.sql", "outbox.postgres.sql"),
        ] {
            assert_eq!(
                (file_of(table, MySql), file_of(table, Postgres)),
                (mysql, postgres)
            );
        }
        assert_eq!(schema_file(Postgres), "schema.postgres.sql");
    }

    #[test]
    fn init_runs_the_two_create_statements_of_the_model_and_no_tally() {
        let s = statements();
        assert_eq!(s.len(), 2);
        assert!(s[0].starts_with("CREATE TABLE receiver_inbox"));
        assert!(s[1].starts_with("CREATE TABLE receiver_task_views"));
        assert!(s.iter().all(|ddl| !ddl.contains(PRUNED_TABLE)));
        assert_eq!(InitOptions::default().existing, Existing::Refuse);
        assert!(!InitOptions::default().retention);
        assert!(!InitOptions::default().outbox);
        assert!(s.iter().all(|ddl| !ddl.contains(OUTBOX_TABLE)));
    }

    #[test]
    fn the_outbox_statement_creates_the_outbox_alone_clustered_by_its_order_and_unique_by_effect_id(
    ) {
        let s = outbox_statements();
        assert_eq!(s.len(), 1);
        assert!(s[0].starts_with("CREATE TABLE receiver_outbox ("));
        assert_eq!(columns(OUTBOX_TABLE).len(), 19);
        assert_eq!(columns(OUTBOX_TABLE).first(), Some(&"seq"));
        assert_eq!(key_columns(OUTBOX_TABLE), ["seq"]);
        assert!(s[0].contains("UNIQUE KEY receiver_outbox_effect (effect_id)"));
        // The PostgreSQL twin names the same columns, in the same order.
        for column in columns(OUTBOX_TABLE) {
            assert!(
                POSTGRES_OUTBOX_SQL.contains(&format!("\n  {column} "))
                    && POSTGRES_OUTBOX_SQL
                        .contains(&format!("COMMENT ON COLUMN receiver_outbox.{column} IS")),
                "{column}"
            );
        }
    }

    #[test]
    fn the_retention_statement_creates_the_prune_tally_alone() {
        let s = retention_statements();
        assert_eq!(s.len(), 1);
        assert!(s[0].starts_with("CREATE TABLE receiver_pruned ("));
        assert_eq!(columns(PRUNED_TABLE).len(), 7);
        assert_eq!(
            key_columns(PRUNED_TABLE),
            ["consumer_name", "queue_id", "task_id"]
        );
    }

    #[test]
    fn the_columns_are_read_from_the_ddl_seventeen_in_all() {
        let inbox = columns(INBOX_TABLE);
        let views = columns(TASK_VIEW_TABLE);
        assert_eq!(inbox.len() + views.len(), 17);
        assert_eq!(inbox.first(), Some(&"consumer_name"));
        assert_eq!(inbox.last(), Some(&"received_at"));
        assert_eq!(views.last(), Some(&"updated_at"));
        assert_eq!(
            key_columns(TASK_VIEW_TABLE),
            ["consumer_name", "queue_id", "task_id"]
        );
        assert!(columns("other").is_empty());
    }

    #[test]
    fn the_privilege_probes_touch_no_row_and_never_update_a_key() {
        for table in [INBOX_TABLE, TASK_VIEW_TABLE, PRUNED_TABLE, OUTBOX_TABLE] {
            for privilege in ["SELECT", "INSERT", "UPDATE", "DELETE"] {
                let statement = privilege_probe(table, privilege);
                assert!(statement.ends_with("WHERE 1 = 0"), "{statement}");
                assert!(statement.starts_with(privilege), "{statement}");
            }
            let update = privilege_probe(table, "UPDATE");
            for key in key_columns(table) {
                assert!(!update.contains(&format!("{key} = ")), "{update}");
            }
        }
    }

    #[test]
    fn the_schema_creates_only_and_never_drops_or_references() {
        let upper = statements()
            .into_iter()
            .chain(retention_statements())
            .chain(outbox_statements())
            .collect::<Vec<_>>()
            .join("\n")
            .to_uppercase();
        for word in [
            "DROP ",
            "ALTER ",
            "FOREIGN KEY",
            "REFERENCES",
            "CASCADE",
            "IF NOT EXISTS",
            " JSON ",
        ] {
            assert!(!upper.contains(word), "the DDL contains {word}");
        }
    }
}
