//! What an account refused `CREATE TABLE` lacks ([`CreateGrant`]): each
//! engine's statements find it out, and `init` says it
//! ([`InitError::PermissionDenied`](super::schema::InitError::PermissionDenied)).

/// What an account refused `CREATE TABLE` lacks on its engine, and the
/// statement that gives it: MySQL asks for `CREATE` on the database,
/// PostgreSQL on the schema the tables go in (granting it on the database
/// changes nothing there).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CreateGrant {
    /// The privilege and where, in words: `the CREATE privilege on schema
    /// public (…)`.
    pub needs: String,
    /// Who may give it, and where: `an administrator`, or on PostgreSQL the
    /// schema's owner connected to the receiver's database.
    pub by: String,
    /// The statement, names as the server quotes them:
    /// ``GRANT CREATE ON `receiver`.* TO 'inbox_owner'@'%';`` or
    /// `GRANT CREATE ON SCHEMA public TO inbox_owner;`.
    pub statement: String,
}
