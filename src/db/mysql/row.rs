//! Reading the receiver's columns back.

use sqlx::mysql::{MySql, MySqlRow};
use sqlx::{Decode, Row, Type};

use crate::db::DbError;

/// A text column of the receiver's tables as a `String`. Their binary
/// collation makes sqlx see bytes; text that is not UTF-8 is an error, not
/// replaced.
pub fn text(row: &MySqlRow, i: usize) -> Result<String, DbError> {
    let bytes: Vec<u8> = get(row, i)?;
    String::from_utf8(bytes).map_err(|_| DbError::from(sqlx::Error::Decode("not UTF-8".into())))
}

/// Column `i` of `row`; a value that does not decode is a [`DbError`].
pub(crate) fn get<'r, T: Decode<'r, MySql> + Type<MySql>>(
    row: &'r MySqlRow,
    i: usize,
) -> Result<T, DbError> {
    Ok(row.try_get(i)?)
}
