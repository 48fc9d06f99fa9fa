//! Reading the receiver's columns back.

use sqlx::mysql::MySqlRow;
use sqlx::Row;

use super::DbError;

/// A text column of the receiver's tables as a `String`. Their binary
/// collation makes sqlx see bytes; text that is not UTF-8 is an error, not
/// replaced.
pub fn text(row: &MySqlRow, i: usize) -> Result<String, DbError> {
    let bytes: Vec<u8> = row.try_get(i).map_err(DbError::from)?;
    String::from_utf8(bytes).map_err(|_| DbError::from(sqlx::Error::Decode("not UTF-8".into())))
}
