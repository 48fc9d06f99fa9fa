//! A PostgreSQL server's error as a [`DbError`]: the kind, the operator's
//! hint and the condition its SQLSTATE says (see [`sqlstate`]), and the
//! receiver table a 42P01 names.

use sqlx::postgres::PgDatabaseError;

use super::sqlstate;
use crate::db::schema::{OUTBOX_TABLE, PRUNED_TABLE, TABLES};
use crate::db::DbError;

/// The failure a PostgreSQL server answered with. Its SQLSTATE classifies
/// it, never its message, which can quote key values or row data and is
/// not kept.
pub(crate) fn db_error(db: &PgDatabaseError) -> DbError {
    let code = db.code();
    // 42P01 names the relation as "table".
    let missing_table = (code == sqlstate::UNDEFINED_TABLE)
        .then(|| {
            TABLES
                .into_iter()
                .chain([PRUNED_TABLE, OUTBOX_TABLE])
                .find(|table| db.message().contains(&format!("\"{table}\"")))
        })
        .flatten();
    DbError {
        detail: sqlstate::detail_of_sqlstate(code),
        condition: sqlstate::condition_of_sqlstate(code),
        missing_table,
        sqlstate: Some(code.to_owned()),
        ..DbError::of(sqlstate::kind_of_sqlstate(code))
    }
}

#[cfg(test)]
mod tests {
    use super::sqlstate::{condition_of_sqlstate, kind_of_sqlstate};
    use crate::db::error::Condition;
    use crate::db::DbErrorKind;

    #[test]
    fn the_sqlstates_the_predicates_ask_are_a_refusal_a_missing_privilege_and_a_duplicate_key() {
        assert_eq!(
            condition_of_sqlstate("3D000"),
            Some(Condition::UnknownDatabase)
        );
        assert_eq!(
            condition_of_sqlstate("42501"),
            Some(Condition::LacksTablePrivilege)
        );
        assert_eq!(kind_of_sqlstate("42501"), DbErrorKind::PermissionDenied);
        assert_eq!(
            condition_of_sqlstate("23505"),
            Some(Condition::DuplicateKey)
        );
        assert_eq!(condition_of_sqlstate("42P01"), None);
    }
}
