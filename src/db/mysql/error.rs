//! A MySQL or MariaDB server's error as a [`DbError`]: the kind, the
//! operator's hint and the condition its number says (see [`errno`]), and
//! the receiver table an error 1146 names.

use sqlx::error::DatabaseError;
use sqlx::mysql::MySqlDatabaseError;

use super::errno;
use crate::db::schema::{OUTBOX_TABLE, PRUNED_TABLE, TABLES};
use crate::db::DbError;

/// The failure a MySQL server answered with. Its number classifies it,
/// never its message, which can quote key values or row data and is not
/// kept.
pub(crate) fn db_error(db: &dyn DatabaseError) -> DbError {
    let number = db
        .try_downcast_ref::<MySqlDatabaseError>()
        .map(|m| m.number());
    // 1146 names the table as 'database.table'; only the name of one of the
    // receiver's own tables is taken from it.
    let missing_table = (number == Some(errno::NO_SUCH_TABLE))
        .then(|| {
            TABLES
                .into_iter()
                .chain([PRUNED_TABLE, OUTBOX_TABLE])
                .find(|table| db.message().contains(&format!(".{table}'")))
        })
        .flatten();
    DbError {
        number,
        sqlstate: db.code().map(|c| c.into_owned()),
        detail: errno::detail_of(number),
        condition: errno::condition_of(number),
        missing_table,
        ..DbError::of(errno::kind_of(number))
    }
}

#[cfg(test)]
mod tests {
    use super::errno;
    use crate::db::{DbError, DbErrorKind};

    /// The error the server answers with `number`, as [`db_error`](super::db_error)
    /// maps it.
    fn numbered(number: u16) -> DbError {
        DbError {
            number: Some(number),
            detail: errno::detail_of(Some(number)),
            condition: errno::condition_of(Some(number)),
            ..DbError::of(errno::kind_of(Some(number)))
        }
    }

    #[test]
    fn certification_failures_of_galera_and_group_replication_are_deadlocks_and_retried() {
        for number in [
            errno::DEADLOCK,
            errno::ERROR_DURING_COMMIT,
            errno::TRANSACTION_ROLLBACK_DURING_COMMIT,
        ] {
            assert_eq!(
                errno::kind_of(Some(number)),
                DbErrorKind::Deadlock,
                "{number}"
            );
            assert!(numbered(number).is_rolled_back());
        }
    }

    #[test]
    fn a_cluster_node_that_is_not_ready_is_unavailable_and_retried() {
        let e = DbError {
            number: Some(errno::WSREP_NOT_READY),
            sqlstate: Some("08S01".into()),
            detail: errno::detail_of(Some(errno::WSREP_NOT_READY)),
            ..DbError::of(errno::kind_of(Some(errno::WSREP_NOT_READY)))
        };
        assert!(e.is_unavailable());
        assert!(e.is_rolled_back());
        assert!(e.to_string().contains("not ready"), "{e}");
        assert!(e.to_string().contains("1047"), "{e}");
    }

    #[test]
    fn a_duplicate_key_or_another_server_error_is_never_retried() {
        for number in [errno::DUPLICATE_KEY, errno::NO_SUCH_TABLE, 1364] {
            assert!(!numbered(number).is_rolled_back(), "{number}");
        }
    }

    #[test]
    fn the_numbers_the_predicates_ask_are_a_refusal_a_missing_privilege_and_a_duplicate_key() {
        assert!(numbered(errno::BAD_DB).is_refusal());
        assert!(numbered(errno::ACCESS_DENIED).is_refusal());
        assert!(!numbered(errno::NO_SUCH_TABLE).is_refusal());
        for number in [errno::TABLE_ACCESS_DENIED, errno::COLUMN_ACCESS_DENIED] {
            assert!(numbered(number).lacks_table_privilege(), "{number}");
        }
        assert!(!numbered(errno::ACCESS_DENIED).lacks_table_privilege());
        assert!(numbered(errno::DUPLICATE_KEY).is_duplicate_key());
        assert!(!numbered(errno::DEADLOCK).is_duplicate_key());
    }
}
