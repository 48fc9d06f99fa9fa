//! What the inbox and the task view say to a MySQL or MariaDB server:
//! every statement they send, in MySQL's dialect, and what its answer
//! means (a duplicate key, a statement's affected rows). The callers
//! decide what to do with it; nothing here knows a delivery or an outcome.

pub(crate) mod inbox;
pub(crate) mod session;
pub(crate) mod task_view;
pub(crate) mod transaction;
